//! The node agents as the master sees them: attaching and detaching, and the reports they
//! send (the table each applied, its counters, and when it continued each process, from
//! which the switch skews of parallel jobs are measured).

use ninf_gang::JobId;
use ninf_proto::v1;

use super::links::{AgentLink, MasterClock};
use super::records::{Inner, MAX_OPEN_BOUNDARIES, MAX_SKEWS, NodeRecord, ResumeSpread, Runner};
use super::table::GangMaster;

impl<C: MasterClock> GangMaster<C> {
    /// An agent attached, reachable through `link`; returns which attachment this is, for
    /// [`GangMaster::detach_node`].
    pub fn attach_node(&self, hello: v1::AgentHello, link: Box<dyn AgentLink>) -> u64 {
        let mut inner = self.lock();
        let attachment = inner.next_attachment;
        inner.next_attachment += 1;
        inner.nodes.insert(
            hello.node,
            NodeRecord {
                columns: hello.columns,
                link: Some(link),
                attachment,
                report: v1::AgentReport::default(),
                broker_socket: hello.broker_socket,
                broker_address: hello.broker_address,
            },
        );
        attachment
    }

    /// Attachment `attachment` of an agent ended (a later one under the same name stays).
    ///
    /// Its processes may be left stopped, and a job whose ranks talked through its broker has
    /// lost the messages the broker held. So such a job is killed, with the reason its call
    /// reports, and every other process on the node's columns is continued: it runs ungated
    /// until an agent attaches again, rather than staying frozen.
    pub fn detach_node(&self, node: &str, attachment: u64) {
        let mut inner = self.lock();
        let Some(record) = inner
            .nodes
            .get_mut(node)
            .filter(|n| n.attachment == attachment)
        else {
            return;
        };
        record.link = None;
        let columns = record.columns.clone();
        let lost: Vec<JobId> = inner
            .spread_jobs
            .iter()
            .filter(|(_, r)| r.nodes.contains(node))
            .map(|(&id, _)| id)
            .collect();
        for &id in &lost {
            tracing::warn!(job = id, node, "killed a job whose node broker went away");
            let reason = format!(
                "node `{node}`'s agent went away while the job's ranks talked through its broker; the messages it held are lost"
            );
            self.kill(&mut inner, id, reason);
        }
        for pid in processes_on(&inner, &columns, &lost) {
            self.signals.signal(pid, libc::SIGCONT);
        }
    }

    /// Takes an agent's report: its applied table, counters and continue times.
    pub fn node_report(&self, node: &str, mut report: v1::AgentReport) {
        let mut inner = self.lock();
        for sample in std::mem::take(&mut report.resumes) {
            record_resume(&mut inner, &sample);
        }
        while inner.resumes.len() > MAX_OPEN_BOUNDARIES {
            inner.resumes.pop_first();
        }
        if let Some(n) = inner.nodes.get_mut(node) {
            n.report = report;
        }
    }

    /// Slot switches the node agents have reported, summed.
    pub fn switches(&self) -> u64 {
        self.lock().nodes.values().map(|n| n.report.switches).sum()
    }

    /// Forgets the switch skews measured so far (benchmarks measure one setting at a time).
    pub fn reset_skews(&self) {
        let mut inner = self.lock();
        inner.skews_us.clear();
        inner.install_skews_us.clear();
        inner.resumes.clear();
    }
}

/// The processes this server started that run on `columns`, but for the jobs in `except`.
fn processes_on<C: MasterClock>(inner: &Inner<C>, columns: &[u32], except: &[JobId]) -> Vec<u32> {
    inner
        .jobs
        .iter()
        .filter(|(id, job)| !except.contains(id) && job.runner == Runner::Server)
        .filter_map(|(id, job)| {
            let placement = inner.scheduler.matrix().placement(*id)?;
            Some(
                placement
                    .columns
                    .iter()
                    .zip(&job.processes)
                    .filter(|(c, _)| columns.contains(c))
                    .map(|(_, &pid)| pid)
                    .collect::<Vec<_>>(),
            )
        })
        .flatten()
        .collect()
}

/// Counts one process's continue time at a boundary; once every process of the job has
/// reported, the boundary's skew (latest less earliest) joins its series.
fn record_resume<C: MasterClock>(inner: &mut Inner<C>, sample: &v1::ResumeSample) {
    let Some(processes) = inner.jobs.get(&sample.job).map(|j| j.processes.len()) else {
        return;
    };
    if processes < 2 {
        return;
    }
    let key = (sample.version, sample.slot, sample.job, sample.at_boundary);
    let spread = inner.resumes.entry(key).or_insert(ResumeSpread {
        first_ns: sample.resumed_ns,
        last_ns: sample.resumed_ns,
        count: 0,
    });
    spread.first_ns = spread.first_ns.min(sample.resumed_ns);
    spread.last_ns = spread.last_ns.max(sample.resumed_ns);
    spread.count += 1;
    if spread.count < processes {
        return;
    }
    let skew = (spread.last_ns - spread.first_ns) as f64 / 1000.0;
    inner.resumes.remove(&key);
    let series = if sample.at_boundary {
        &mut inner.skews_us
    } else {
        &mut inner.install_skews_us
    };
    if series.len() >= MAX_SKEWS {
        series.pop_front();
    }
    series.push_back(skew);
}
