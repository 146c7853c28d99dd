//! A proxy reports what happened to a graph: its placements stop counting as predicted load,
//! and the actual times are stored beside the predictions.

use ninf_proto::v1;

use crate::db::ActualRecord;
use crate::planner::TaskOutcome;
use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    /// What happened to a graph: stored, and its placements stop counting as load.
    pub async fn report_actuals(&self, report: v1::ActualsReport) -> Result<(), MetaserverError> {
        let now = unix_now();
        // Taken out in a statement of its own: the lock is released before it is taken again.
        let placed_here = self.state().running.remove(&report.graph_id);
        if placed_here.is_none() && !self.placed_by_another(report.graph_id).await? {
            return Err(MetaserverError::UnknownGraph(report.graph_id));
        }
        if let Some(graph) = placed_here {
            let mut state = self.state();
            let failed = !report.error.is_empty();
            let predicted = graph.predicted_makespan;
            self.metrics
                .graph(&graph.scheduler, failed, predicted, report.makespan);
            // A task issued again may have run elsewhere than placed: it teaches nothing.
            let retried: std::collections::HashSet<u32> = report
                .tasks
                .iter()
                .filter(|t| !t.error.is_empty())
                .map(|t| t.task)
                .collect();
            let times: Vec<TaskOutcome> = report
                .tasks
                .iter()
                .filter(|t| !retried.contains(&t.task))
                .map(|t| {
                    let timing = t.timing.unwrap_or_default();
                    TaskOutcome {
                        task: t.task as usize,
                        start: t.start,
                        finish: t.finish,
                        compute_seconds: timing.compute_seconds,
                        queue_seconds: timing.queue_seconds,
                        stopped_seconds: timing.stopped_seconds,
                        cold: timing.cold,
                        threads: timing.threads,
                    }
                })
                .collect();
            if !failed {
                state
                    .planner
                    .teach_template(report.graph_id, report.makespan, &times);
            }
            state.planner.finish(report.graph_id, now, &times);
        }
        let actuals: Vec<ActualRecord> = report
            .tasks
            .iter()
            .map(|t| ActualRecord {
                task: t.task,
                start: t.start,
                finish: t.finish,
                compute_seconds: t.timing.map_or(0.0, |t| t.compute_seconds),
                stopped_seconds: t.timing.map_or(0.0, |t| t.stopped_seconds),
                fetch_seconds: t.timing.map_or(0.0, |t| t.fetch_seconds),
                queue_seconds: t.timing.map_or(0.0, |t| t.queue_seconds),
            })
            .collect();
        self.db
            .record_actuals(report.graph_id, report.makespan, &report.error, &actuals)
            .await?;
        self.log_incidents(&report);
        self.graph_changed(report.graph_id);
        Ok(())
    }

    /// Whether the resource DB holds a running graph this metaserver did not place: one the
    /// metaserver active before a fail-over placed, whose actuals are stored all the same.
    async fn placed_by_another(&self, graph: u64) -> Result<bool, MetaserverError> {
        let recorded = self.db.graph(graph).await?;
        Ok(recorded.is_some_and(|g| g.state == "running"))
    }

    /// The faults a proxy met during the graph, and its failure, as events.
    fn log_incidents(&self, report: &v1::ActualsReport) {
        let graph = Some(report.graph_id);
        for incident in &report.incidents {
            let message = format!(
                "task {} at {:.3} s: {}",
                incident.task, incident.at, incident.detail
            );
            self.log_event(&incident.kind, &incident.server, graph, message);
        }
        if !report.error.is_empty() {
            self.log_event("graph-failed", "", graph, report.error.clone());
        }
    }
}
