//! What the proxy reports about a transaction that ran: where each call ran, predicted and
//! actual times, and what recovery did.

use std::collections::BTreeMap;

use ninf_proto::v1;

/// What happened to one call of a transaction.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPlan {
    pub label: String,
    pub function: String,
    pub server: String,
    /// Seconds from the graph's start.
    pub predicted_start: f64,
    pub predicted_finish: f64,
    pub actual_start: f64,
    pub actual_finish: f64,
    /// The server's own account: fetching inputs from storage, waiting, computing.
    pub fetch_seconds: f64,
    pub queue_seconds: f64,
    pub compute_seconds: f64,
    /// Of `compute_seconds`, the time the call's gang job stood stopped outside its slots
    /// (behind other jobs on its server).
    pub stopped_seconds: f64,
    /// The routine's status (LINPACK's `info`).
    pub status: i64,
}

/// A transaction's placement and timing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub graph_id: u64,
    pub scheduler: String,
    pub tasks: Vec<TaskPlan>,
    /// (producer, consumer) of every edge.
    pub edges: Vec<(usize, usize)>,
    pub predicted_makespan: f64,
    pub actual_makespan: f64,
    /// Share of edges whose two calls ran on different servers.
    pub inter_server_ratio: f64,
    /// Seconds the proxy waited for the metaserver's placement.
    pub schedule_seconds: f64,
    /// Calls the proxy issued again after a server failed or lost an input.
    pub tasks_retried: u32,
    /// Finished calls run again because their kept outputs were lost with a server.
    pub regenerated: u32,
    /// Client arrays the proxy uploaded ahead of their calls, as the schedule staged them.
    pub staged_uploads: u32,
    /// Seconds those uploads took, summed (in no task's timing).
    pub staged_upload_seconds: f64,
    /// Tasks a restarted proxy did not run again: they had finished before it died, and
    /// their outputs were still held on the servers.
    pub resumed_tasks: u32,
}

impl Plan {
    pub(crate) fn from_reply(graph: &v1::TaskGraph, reply: v1::RunReply) -> Plan {
        let mut tasks = vec![TaskPlan::default(); graph.tasks.len()];
        for t in reply.tasks {
            let timing = t.timing.unwrap_or_default();
            if let Some(slot) = tasks.get_mut(t.task as usize) {
                *slot = TaskPlan {
                    label: t.label,
                    function: t.function,
                    server: t.server,
                    predicted_start: t.predicted_start,
                    predicted_finish: t.predicted_finish,
                    actual_start: t.actual_start,
                    actual_finish: t.actual_finish,
                    fetch_seconds: timing.fetch_seconds,
                    queue_seconds: timing.queue_seconds,
                    compute_seconds: timing.compute_seconds,
                    stopped_seconds: timing.stopped_seconds,
                    status: t.status,
                };
            }
        }
        Plan {
            graph_id: reply.graph_id,
            scheduler: reply.scheduler,
            tasks,
            edges: graph
                .edges
                .iter()
                .map(|e| (e.from_task as usize, e.to_task as usize))
                .collect(),
            predicted_makespan: reply.predicted_makespan,
            actual_makespan: reply.actual_makespan,
            inter_server_ratio: reply.inter_server_ratio,
            schedule_seconds: reply.schedule_seconds,
            tasks_retried: reply.tasks_retried,
            regenerated: reply.regenerated,
            staged_uploads: reply.staged_uploads,
            staged_upload_seconds: reply.staged_upload_seconds,
            resumed_tasks: reply.resumed_tasks,
        }
    }

    /// Calls per server.
    pub fn servers(&self) -> BTreeMap<String, usize> {
        let mut count = BTreeMap::new();
        for t in &self.tasks {
            *count.entry(t.server.clone()).or_insert(0) += 1;
        }
        count
    }
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "graph {} ({}): predicted {:.3} s, actual {:.3} s, inter-server {:.0}%",
            self.graph_id,
            self.scheduler,
            self.predicted_makespan,
            self.actual_makespan,
            self.inter_server_ratio * 100.0
        )?;
        writeln!(
            f,
            "{:<12} {:<22} {:>17} {:>17} {:>9}",
            "task", "server", "predicted (s)", "actual (s)", "compute"
        )?;
        for t in &self.tasks {
            writeln!(
                f,
                "{:<12} {:<22} {:>8.3}-{:<8.3} {:>8.3}-{:<8.3} {:>9.3}",
                t.label,
                t.server,
                t.predicted_start,
                t.predicted_finish,
                t.actual_start,
                t.actual_finish,
                t.compute_seconds
            )?;
        }
        Ok(())
    }
}
