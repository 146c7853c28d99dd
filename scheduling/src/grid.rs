//! What the scheduler knows about the grid: servers (speed, processors, routines, state) and
//! where data can be (the client's site or a server).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::graph::{GraphError, TaskGraph};

/// Index of a server in the grid view.
pub type ServerId = usize;

/// Where data lives or travels between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Location {
    /// The client's site (its proxy).
    Client,
    Server(ServerId),
}

/// One compute server as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerView {
    /// Its address, for people and logs.
    pub name: String,
    /// Benchmark speed of one processor (flops per second).
    pub flops_per_processor: f64,
    pub processors: u32,
    /// Routines it serves.
    pub functions: BTreeSet<String>,
    /// Whether it is up (heartbeating); a server that is down gets no tasks.
    pub up: bool,
}

/// The servers a schedule may use.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GridView {
    pub servers: Vec<ServerView>,
}

impl GridView {
    /// Up servers that serve `function`, in id order.
    pub fn capable<'a>(&'a self, function: &'a str) -> impl Iterator<Item = ServerId> + 'a {
        self.servers
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.up && s.functions.contains(function))
            .map(|(i, _)| i)
    }

    /// Checks that every task's routine is served by some up server.
    pub fn check(&self, graph: &TaskGraph) -> Result<(), GraphError> {
        for task in &graph.tasks {
            if self.capable(&task.function).next().is_none() {
                return Err(GraphError::Unimplemented {
                    label: task.label.clone(),
                    function: task.function.clone(),
                });
            }
        }
        Ok(())
    }
}

/// A network path's predicted performance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Bytes per second.
    pub throughput: f64,
    /// Seconds per transfer.
    pub latency: f64,
}

impl Link {
    /// Time to move `bytes` over the link; nothing to move takes no time.
    pub fn transfer_time(&self, bytes: u64) -> f64 {
        if bytes == 0 {
            0.0
        } else {
            self.latency + bytes as f64 / self.throughput.max(f64::MIN_POSITIVE)
        }
    }
}
