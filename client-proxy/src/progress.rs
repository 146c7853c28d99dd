//! Progress of a graph run, for a client that follows it (`RunWithProgress`): tasks done of
//! total, bytes moved, retries. Kept in a watch channel, so a client that reads slowly sees
//! the latest figures, never a backlog; a run nobody follows updates nothing.

use ninf_proto::v1;
use tokio::sync::watch;

/// Where a run reports its progress (nowhere, for `Run`).
#[derive(Debug, Clone, Default)]
pub struct ProgressSink(Option<watch::Sender<v1::RunProgress>>);

impl ProgressSink {
    /// A run nobody follows.
    pub fn none() -> ProgressSink {
        ProgressSink(None)
    }

    /// A sink and the receiver that follows it.
    pub fn channel() -> (ProgressSink, watch::Receiver<v1::RunProgress>) {
        let (sender, receiver) = watch::channel(v1::RunProgress::default());
        (ProgressSink(Some(sender)), receiver)
    }

    /// Whether a client follows the run (else its figures need not be worked out).
    pub fn is_followed(&self) -> bool {
        self.0.is_some()
    }

    fn update(&self, change: impl FnOnce(&mut v1::RunProgress)) {
        if let Some(sender) = &self.0 {
            sender.send_modify(change);
        }
    }

    /// The graph was placed: its id and size.
    pub fn placed(&self, graph_id: u64, tasks: usize) {
        self.update(|p| {
            p.graph_id = graph_id;
            p.tasks_total = tasks as u32;
        });
    }

    /// A task's call replied; `bytes` moved for it.
    pub fn task_done(&self, tasks_done: usize, bytes: u64) {
        self.update(|p| {
            p.tasks_done = tasks_done as u32;
            p.bytes_moved += bytes;
        });
    }

    /// A call is issued again after a fault; `tasks_done` went back to this.
    pub fn retried(&self, tasks_done: usize) {
        self.update(|p| {
            p.retries += 1;
            p.tasks_done = tasks_done as u32;
        });
    }
}
