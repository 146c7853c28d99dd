//! Following a long transaction: a client given a progress callback runs its graphs with the
//! proxy's `RunWithProgress` and calls it as tasks end (the latest figures only, when tasks
//! end faster than they arrive). The CLI's bars and the Python client use it.

use std::sync::Arc;

use ninf_proto::v1;

/// How far a transaction has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// The graph's id at the metaserver (0 until it is placed).
    pub graph_id: u64,
    /// Tasks whose calls replied.
    pub tasks_done: u32,
    pub tasks_total: u32,
    /// Bytes of call requests and replies between the proxy and the servers, and of
    /// intermediate results the tasks read from storage.
    pub bytes_moved: u64,
    /// Calls issued again after a fault.
    pub retries: u32,
}

impl From<&v1::RunProgress> for Progress {
    fn from(p: &v1::RunProgress) -> Progress {
        Progress {
            graph_id: p.graph_id,
            tasks_done: p.tasks_done,
            tasks_total: p.tasks_total,
            bytes_moved: p.bytes_moved,
            retries: p.retries,
        }
    }
}

/// What a client calls with each progress report.
pub type ProgressCallback = Arc<dyn Fn(&Progress) + Send + Sync>;
