//! The gang table's status as `GangControl.Status` reports it: the table's shape, its jobs
//! (in the table and queued), the node agents, and the switch skews measured.

use std::collections::VecDeque;

use ninf_gang::{JobId, JobState};
use ninf_proto::v1;

use super::links::MasterClock;
use super::records::Inner;
use super::table::GangMaster;

impl<C: MasterClock> GangMaster<C> {
    pub fn status(&self) -> v1::GangStatus {
        let inner = self.lock();
        let config = inner.scheduler.config;
        let matrix = inner.scheduler.matrix();
        let counters = inner.scheduler.counters();
        let skews = sorted(&inner.skews_us);
        let install_skews = sorted(&inner.install_skews_us);
        let table = self.current.borrow().clone();
        let slot = table.slot(table.slot_number(self.clock.now()));
        v1::GangStatus {
            slot_active: slot.is_some(),
            current_row: slot.map_or(0, |s| s.row as u32),
            running_now: slot.map_or_else(Vec::new, |s| s.running.clone()),
            table_layout: table_layout(&inner),
            processors: config.processors,
            max_rows: config.max_rows as u32,
            rows: matrix.rows() as u32,
            quantum: config.quantum,
            policy: format!("{:?}", config.policy).to_lowercase(),
            layout: matrix.layout(),
            jobs: jobs(&inner),
            queued: inner.scheduler.queue().len() as u32,
            expected_wait_seconds: inner.expected_wait(),
            tables_issued: counters.tables,
            admitted: counters.admitted,
            finished: counters.finished,
            deadlocks_killed: inner.deadlocks_killed,
            nodes: nodes(&inner),
            skew_samples: skews.len() as u64,
            skew_p50_us: quantile(&skews, 0.5),
            skew_p99_us: quantile(&skews, 0.99),
            skew_max_us: skews.last().copied().unwrap_or(0.0),
            install_skew_samples: install_skews.len() as u64,
            install_skew_p99_us: quantile(&install_skews, 0.99),
        }
    }
}

fn table_layout<C: MasterClock>(inner: &Inner<C>) -> String {
    match inner.scheduler.config.layout {
        ninf_gang::Layout::Dqt {
            allocation, fair, ..
        } if inner.scheduler.tree().is_some() => format!(
            "{}dqt-{}",
            if fair { "fair-" } else { "" },
            allocation.name()
        ),
        _ => "matrix".to_string(),
    }
}

/// The jobs in the table, then those queued.
fn jobs<C: MasterClock>(inner: &Inner<C>) -> Vec<v1::GangJob> {
    let function = |id: JobId| {
        inner
            .jobs
            .get(&id)
            .map(|j| j.function.clone())
            .unwrap_or_default()
    };
    let processes = |id: JobId| {
        inner
            .jobs
            .get(&id)
            .map(|j| j.processes.clone())
            .unwrap_or_default()
    };
    let mut jobs: Vec<v1::GangJob> = inner
        .scheduler
        .matrix()
        .jobs()
        .map(|(id, p)| v1::GangJob {
            job: id,
            processors: p.columns.len() as u32,
            admitted: true,
            row: p.row as u32,
            columns: p.columns.clone(),
            state: match p.state {
                JobState::Runnable => "runnable",
                JobState::Idle => "idle",
                JobState::Stopped { .. } => "stopped",
            }
            .to_string(),
            function: function(id),
            processes: processes(id),
        })
        .collect();
    jobs.extend(inner.scheduler.queue().jobs().iter().map(|q| v1::GangJob {
        job: q.id,
        processors: q.processors,
        admitted: false,
        row: 0,
        columns: Vec::new(),
        state: "queued".to_string(),
        function: function(q.id),
        processes: Vec::new(),
    }));
    jobs
}

fn nodes<C: MasterClock>(inner: &Inner<C>) -> Vec<v1::GangNode> {
    inner
        .nodes
        .iter()
        .map(|(name, n)| v1::GangNode {
            node: name.clone(),
            columns: n.columns.clone(),
            applied_version: n.report.applied_version,
            table_messages: n.report.table_messages,
            switches: n.report.switches,
            clock_checks: n.report.clock_checks,
            clock_drifts: n.report.clock_drifts,
            clock_offset: n.report.clock_offset,
            signal_failures: n.report.signal_failures,
            attached: n.attached(),
            broker_address: n.broker_address.clone(),
            network: n.report.network,
            ranks_run: n.report.ranks_run,
        })
        .collect()
}

fn sorted(series: &VecDeque<f64>) -> Vec<f64> {
    let mut v: Vec<f64> = series.iter().copied().collect();
    v.sort_by(f64::total_cmp);
    v
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        0.0
    } else {
        sorted[((sorted.len() - 1) as f64 * q).round() as usize]
    }
}
