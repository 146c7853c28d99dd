//! What the scheduler knows about the grid: servers (speed, processors, routines, state) and
//! where data can be (the client's site or a server).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::graph::{GraphError, TaskGraph, TaskId};

/// Index of a server in the grid view.
pub type ServerId = usize;

/// Where data lives or travels between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Location {
    /// The client's site (its proxy).
    Client,
    Server(ServerId),
}

/// One end of a path between sites (network neighbourhoods of servers, the Network Weather
/// Service's cliques): the client's site, or a site of servers by index. A path between two
/// places that has no samples of its own is estimated by the samples between their sites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Site {
    Client,
    Servers(u32),
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

    /// The grid with the servers named in `avoid` marked down, when `graph` can still run
    /// without them; otherwise the grid as it is. `avoid` is a hint (servers a proxy has
    /// seen fail and the metaserver has not yet marked down): it must never make a graph
    /// fail that the avoided servers could still run.
    pub fn avoiding(&self, avoid: &[String], graph: &TaskGraph) -> GridView {
        let mut grid = self.clone();
        for server in &mut grid.servers {
            if avoid.contains(&server.name) {
                server.up = false;
            }
        }
        if grid.check(graph).is_ok() {
            grid
        } else {
            self.clone()
        }
    }

    /// The up servers that may run task `task` of `graph`: those serving its routine, or
    /// only its pinned server (and those it is pinned with).
    pub fn capable_for(&self, graph: &TaskGraph, task: TaskId) -> Vec<ServerId> {
        let function = &graph.tasks[task].function;
        match graph.pinned(task) {
            Some(pin) => {
                let with = graph.pinned_with(task);
                self.capable(function)
                    .filter(|s| *s == pin || with.contains(s))
                    .collect()
            }
            None => self.capable(function).collect(),
        }
    }

    /// Checks that every task's routine is served by some up server, and that each pinned
    /// task's server is up and serves it.
    pub fn check(&self, graph: &TaskGraph) -> Result<(), GraphError> {
        for (i, task) in graph.tasks.iter().enumerate() {
            if self.capable(&task.function).next().is_none() {
                return Err(GraphError::Unimplemented {
                    label: task.label.clone(),
                    function: task.function.clone(),
                });
            }
            if let Some(pin) = graph.pinned(i) {
                let why = match self.servers.get(pin) {
                    None => Some("is not in the grid"),
                    Some(s) if !s.up => Some("is down"),
                    Some(s) if !s.functions.contains(&task.function) => {
                        Some("does not serve its routine")
                    }
                    Some(_) => None,
                };
                if let Some(why) = why {
                    return Err(GraphError::PinnedAway {
                        label: task.label.clone(),
                        server: self
                            .servers
                            .get(pin)
                            .map_or_else(|| format!("server {pin}"), |s| s.name.clone()),
                        why,
                    });
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Task;

    fn server(name: &str, functions: &[&str]) -> ServerView {
        ServerView {
            name: name.to_string(),
            flops_per_processor: 1e9,
            processors: 1,
            functions: functions.iter().map(|f| f.to_string()).collect(),
            up: true,
        }
    }

    fn graph(functions: &[&str]) -> TaskGraph {
        TaskGraph {
            tasks: functions
                .iter()
                .map(|f| Task {
                    label: f.to_string(),
                    function: f.to_string(),
                    flops: 1e9,
                    client_in_bytes: 0,
                    client_out_bytes: 0,
                    processors: 1,
                })
                .collect(),
            ..TaskGraph::default()
        }
    }

    #[test]
    fn avoided_servers_are_down_only_while_the_graph_can_do_without_them() {
        let grid = GridView {
            servers: vec![
                server("a:1", &["dgefa", "dgesl"]),
                server("b:1", &["dgefa", "dgesl", "mmul"]),
            ],
        };
        let avoid = ["b:1".to_string(), "unknown:1".to_string()];
        let pairs = grid.avoiding(&avoid, &graph(&["dgefa", "dgesl"]));
        assert_eq!(
            pairs.servers.iter().map(|s| s.up).collect::<Vec<_>>(),
            vec![true, false]
        );
        // Only b serves mmul: avoiding it would fail the graph, so nothing is avoided.
        let cascade = grid.avoiding(&avoid, &graph(&["mmul"]));
        assert_eq!(cascade, grid);
        assert_eq!(grid.avoiding(&[], &graph(&["mmul"])), grid);
    }

    #[test]
    fn a_pinned_task_runs_on_its_pin_or_a_server_pinned_with_it_that_serves_its_routine() {
        let mut grid = GridView {
            servers: vec![
                server("a:1", &["dgesl"]),
                server("a:2", &["dgesl"]),
                server("a:3", &["mmul"]),
                server("b:1", &["dgesl"]),
            ],
        };
        let mut g = graph(&["dgesl", "dgesl"]);
        g.pinned = vec![Some(0), Some(0)];
        g.pinned_with = vec![Vec::new(), vec![1, 2]];
        assert_eq!(grid.capable_for(&g, 0), vec![0], "pinned alone");
        assert_eq!(
            grid.capable_for(&g, 1),
            vec![0, 1],
            "a:3 is pinned with it but does not serve dgesl; b:1 is not pinned with it"
        );
        grid.servers[1].up = false;
        assert_eq!(grid.capable_for(&g, 1), vec![0], "a server that is down");
    }
}
