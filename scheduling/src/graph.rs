//! Network Task graphs (the metaserver paper): each task is one routine call with its computation and the
//! data it receives from the client or from other tasks, and the data it returns to the
//! client. Edges carry an intermediate array from the task that produces it to a task that
//! consumes it.

use serde::{Deserialize, Serialize};

/// Index of a task in its graph.
pub type TaskId = usize;

/// One routine call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// A label for people and logs, e.g. `mmul#3`.
    pub label: String,
    /// The routine it calls.
    pub function: String,
    /// Floating-point operations (from the IDL's CalcOrder and the actual scalars).
    pub flops: f64,
    /// Bytes it receives from the client (IN arrays not produced by another task, and scalars).
    pub client_in_bytes: u64,
    /// Bytes it returns to the client (OUT arrays the client needs).
    pub client_out_bytes: u64,
    /// Processors it occupies (from the IDL's `Parallel`; 1 for sequential routines).
    pub processors: u32,
}

/// Data produced by one task and consumed by another.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Edge {
    pub from: TaskId,
    pub to: TaskId,
    pub bytes: u64,
}

/// One array a task receives from the client, which the proxy may upload ahead of the call
/// (see [`crate::staging`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientInput {
    /// The routine's parameter index.
    pub parameter: u32,
    pub bytes: u64,
}

/// One array a task reads from data kept on the grid (a data handle's copies): no client
/// sends it, and the call reads it from the copy nearest its server, or in place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResidentInput {
    pub bytes: u64,
    /// The servers holding a copy (their `ServerId`s, at least one).
    pub copies: Vec<usize>,
}

impl ResidentInput {
    /// Where the call on `server` reads it from: in place when the server holds a copy,
    /// otherwise from the first copy.
    pub fn source_for(&self, server: usize) -> Option<usize> {
        if self.copies.contains(&server) {
            Some(server)
        } else {
            self.copies.first().copied()
        }
    }
}

/// A transaction's dataflow graph.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskGraph {
    pub tasks: Vec<Task>,
    pub edges: Vec<Edge>,
    /// Per task, the arrays among its `client_in_bytes` that can be sent apart from its call.
    /// Shorter than `tasks`, or empty, where they are not known: those tasks' client data
    /// travels with their calls.
    #[serde(default)]
    pub client_inputs: Vec<Vec<ClientInput>>,
    /// Per task, the arrays it reads from data kept on the grid (not in `client_in_bytes`).
    /// Shorter than `tasks`, or empty, for tasks that read none.
    #[serde(default)]
    pub resident_inputs: Vec<Vec<ResidentInput>>,
    /// Per task, the one server it must run on, if any: a call that reads or writes sticky
    /// data runs where that data is, since sticky data never moves. Shorter than `tasks`, or empty,
    /// for tasks free to go anywhere.
    #[serde(default)]
    pub pinned: Vec<Option<usize>>,
    /// Per task, the other servers a pinned task may run on instead: for a call that only
    /// reads sticky data, the servers of its holder's host, which read the data where it
    /// lies without copying it. Shorter than `tasks`, or empty, for none.
    #[serde(default)]
    pub pinned_with: Vec<Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GraphError {
    #[error("edge {edge} refers to task {task}, but the graph has {tasks} tasks")]
    UnknownTask {
        edge: usize,
        task: TaskId,
        tasks: usize,
    },
    #[error("edge {edge} goes from task `{label}` to itself")]
    SelfLoop { edge: usize, label: String },
    #[error("the graph has a cycle through {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error("task `{label}` has {flops} flops; computation must be a finite number >= 0")]
    BadFlops { label: String, flops: f64 },
    #[error("task `{label}` needs {processors} processors; it must need at least 1")]
    NoProcessors { label: String, processors: u32 },
    #[error("no server implements `{function}` (task `{label}`)")]
    Unimplemented { label: String, function: String },
    #[error(
        "task `{label}` must run on {server}, where the sticky data it writes is, but that \
         server {why}"
    )]
    PinnedAway {
        label: String,
        server: String,
        why: &'static str,
    },
}

impl TaskGraph {
    pub fn add_task(&mut self, task: Task) -> TaskId {
        self.tasks.push(task);
        self.tasks.len() - 1
    }

    pub fn add_edge(&mut self, from: TaskId, to: TaskId, bytes: u64) {
        self.edges.push(Edge { from, to, bytes });
    }

    /// The arrays `task` reads from data kept on the grid.
    pub fn resident(&self, task: TaskId) -> &[ResidentInput] {
        self.resident_inputs.get(task).map_or(&[], Vec::as_slice)
    }

    /// The server `task` must run on, if any.
    pub fn pinned(&self, task: TaskId) -> Option<usize> {
        self.pinned.get(task).copied().flatten()
    }

    /// The servers a pinned `task` may run on besides its pin.
    pub fn pinned_with(&self, task: TaskId) -> &[usize] {
        self.pinned_with.get(task).map_or(&[], Vec::as_slice)
    }

    /// Checks the structure: task ids, self-loops, cycles, flops and processor counts.
    pub fn validate(&self) -> Result<(), GraphError> {
        let n = self.tasks.len();
        for (i, e) in self.edges.iter().enumerate() {
            for task in [e.from, e.to] {
                if task >= n {
                    return Err(GraphError::UnknownTask {
                        edge: i,
                        task,
                        tasks: n,
                    });
                }
            }
            if e.from == e.to {
                return Err(GraphError::SelfLoop {
                    edge: i,
                    label: self.tasks[e.from].label.clone(),
                });
            }
        }
        for t in &self.tasks {
            if !t.flops.is_finite() || t.flops < 0.0 {
                return Err(GraphError::BadFlops {
                    label: t.label.clone(),
                    flops: t.flops,
                });
            }
            if t.processors == 0 {
                return Err(GraphError::NoProcessors {
                    label: t.label.clone(),
                    processors: t.processors,
                });
            }
        }
        self.topological_order().map(|_| ())
    }

    /// Tasks in an order where every producer comes before its consumers: Kahn's algorithm
    /// with a FIFO queue, so tasks go wave by wave (all ready tasks, then those they made
    /// ready), ids ascending within the first wave. This is the order in which tasks become
    /// ready when independent ones are issued together.
    pub fn topological_order(&self) -> Result<Vec<TaskId>, GraphError> {
        let n = self.tasks.len();
        let mut indegree = vec![0usize; n];
        let successors = self.successors();
        for e in &self.edges {
            indegree[e.to] += 1;
        }
        let mut ready: std::collections::VecDeque<TaskId> =
            (0..n).filter(|&t| indegree[t] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(t) = ready.pop_front() {
            order.push(t);
            for &(next, _) in &successors[t] {
                indegree[next] -= 1;
                if indegree[next] == 0 {
                    ready.push_back(next);
                }
            }
        }
        if order.len() == n {
            return Ok(order);
        }
        Err(GraphError::Cycle(self.find_cycle(&indegree)))
    }

    /// Labels along one cycle among the tasks Kahn's algorithm could not order.
    fn find_cycle(&self, indegree: &[usize]) -> Vec<String> {
        let successors = self.successors();
        let Some(start) = (0..self.tasks.len()).find(|&t| indegree[t] > 0) else {
            return Vec::new();
        };
        // Walk backwards-unresolved successors until a task repeats.
        let mut seen = vec![usize::MAX; self.tasks.len()];
        let mut path = Vec::new();
        let mut t = start;
        loop {
            if seen[t] != usize::MAX {
                let mut cycle: Vec<String> = path[seen[t]..]
                    .iter()
                    .map(|&x: &TaskId| self.tasks[x].label.clone())
                    .collect();
                cycle.push(self.tasks[t].label.clone());
                return cycle;
            }
            seen[t] = path.len();
            path.push(t);
            match successors[t].iter().find(|&&(next, _)| indegree[next] > 0) {
                Some(&(next, _)) => t = next,
                None => return path.iter().map(|&x| self.tasks[x].label.clone()).collect(),
            }
        }
    }

    /// For each task, its consumers and the bytes each edge carries.
    pub fn successors(&self) -> Vec<Vec<(TaskId, u64)>> {
        let mut out = vec![Vec::new(); self.tasks.len()];
        for e in &self.edges {
            if e.from < out.len() {
                out[e.from].push((e.to, e.bytes));
            }
        }
        out
    }

    /// For each task, its producers and the bytes each edge carries.
    pub fn predecessors(&self) -> Vec<Vec<(TaskId, u64)>> {
        let mut out = vec![Vec::new(); self.tasks.len()];
        for e in &self.edges {
            if e.to < out.len() {
                out[e.to].push((e.from, e.bytes));
            }
        }
        out
    }
}
