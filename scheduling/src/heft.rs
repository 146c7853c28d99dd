//! HEFT (Topcuoglu, Hariri and Wu 2002): list scheduling by upward rank with insertion.
//!
//! 1. Each task's mean cost: its flops over the predicted speed of each server that serves its
//!    routine, averaged. Each edge's mean cost: its transfer time averaged over every ordered
//!    pair of distinct up servers. A task's results going back to the client cost the mean
//!    transfer from the servers to the client's site (the proxy's links).
//! 2. Upward rank: rank(i) = cost(i) + max over successors j of (edge(i, j) + rank(j)), or
//!    cost(i) + its results' transfer for a task with no successor.
//! 3. In decreasing rank, each task goes to the server where it would finish first. A server
//!    runs this graph's tasks in its processors' free time: a task may be inserted into an
//!    idle stretch between tasks already placed there (the "insertion" policy), as long as
//!    its processors are free for the whole run. Speeds come from the predictor, so measured
//!    load and other transactions' placements are taken into account.
//!
//! As with FLOW, the assignment is then timed once more in dependency order by the common
//! model (time-sharing on each server), which is what is reported and compared.

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::predictor::Predictor;
use crate::schedule::{Prepared, Schedule, Scheduler, finish_schedule};

#[derive(Debug, Default)]
pub struct Heft;

/// One server's use by this graph's tasks: (start, finish, processors), by start.
#[derive(Debug, Clone, Default)]
struct Busy(Vec<(f64, f64, u32)>);

impl Busy {
    /// Processors in use at instant `t`.
    fn used_at(&self, t: f64) -> u32 {
        self.0
            .iter()
            .filter(|&&(s, f, _)| s <= t && t < f)
            .map(|&(_, _, p)| p)
            .sum()
    }

    /// The earliest start from `ready` at which `processors` of `capacity` stay free for
    /// `duration`: at `ready` or at the end of a placed task.
    fn earliest(&self, ready: f64, duration: f64, processors: u32, capacity: u32) -> f64 {
        let need = processors.min(capacity);
        let mut candidates: Vec<f64> = std::iter::once(ready)
            .chain(self.0.iter().map(|&(_, f, _)| f).filter(|&f| f > ready))
            .collect();
        candidates.sort_by(f64::total_cmp);
        for start in candidates {
            // Usage only changes at placed starts inside the window: check each.
            let end = start + duration;
            let mut points: Vec<f64> = vec![start];
            points.extend(
                self.0
                    .iter()
                    .map(|&(s, _, _)| s)
                    .filter(|&s| s > start && s < end),
            );
            if points.iter().all(|&t| self.used_at(t) + need <= capacity) {
                return start;
            }
        }
        self.0.iter().map(|&(_, f, _)| f).fold(ready, f64::max)
    }

    fn insert(&mut self, start: f64, finish: f64, processors: u32) {
        let at = self.0.partition_point(|&(s, _, _)| s <= start);
        self.0.insert(at, (start, finish, processors));
    }
}

/// Mean transfer time of `bytes` between distinct up servers, and from servers to the client.
struct MeanLinks {
    between: Vec<(Location, Location)>,
    to_client: Vec<(Location, Location)>,
}

impl MeanLinks {
    fn new(grid: &GridView) -> MeanLinks {
        let up: Vec<ServerId> = (0..grid.servers.len())
            .filter(|&s| grid.servers[s].up)
            .collect();
        let mut between = Vec::new();
        for &a in &up {
            for &b in &up {
                if a != b {
                    between.push((Location::Server(a), Location::Server(b)));
                }
            }
        }
        let to_client = up
            .iter()
            .map(|&s| (Location::Server(s), Location::Client))
            .collect();
        MeanLinks { between, to_client }
    }

    fn mean(pairs: &[(Location, Location)], bytes: u64, predictor: &dyn Predictor) -> f64 {
        if pairs.is_empty() || bytes == 0 {
            return 0.0;
        }
        pairs
            .iter()
            .map(|&(a, b)| predictor.link(a, b).transfer_time(bytes))
            .sum::<f64>()
            / pairs.len() as f64
    }
}

/// Upward ranks of every task (HEFT's priority), from predicted speeds and links.
pub fn upward_ranks(
    graph: &TaskGraph,
    prepared: &Prepared,
    grid: &GridView,
    predictor: &dyn Predictor,
) -> Vec<f64> {
    let links = MeanLinks::new(grid);
    let successors = graph.successors();
    let n = graph.tasks.len();
    let mut rank = vec![0.0f64; n];
    for &t in prepared.order.iter().rev() {
        let task = &graph.tasks[t];
        let servers = &prepared.capable[prepared.function_of[t]];
        let cost = if servers.is_empty() {
            0.0
        } else {
            servers
                .iter()
                .map(|&s| predictor.compute_time(s, task, 0.0))
                .sum::<f64>()
                / servers.len() as f64
        };
        let tail = successors[t]
            .iter()
            .map(|&(j, bytes)| MeanLinks::mean(&links.between, bytes, predictor) + rank[j])
            .fold(
                MeanLinks::mean(&links.to_client, task.client_out_bytes, predictor),
                f64::max,
            );
        rank[t] = cost + tail;
    }
    rank
}

/// Tasks by decreasing upward rank; ties keep dependency order, so producers come first.
pub fn rank_order(prepared: &Prepared, rank: &[f64]) -> Vec<TaskId> {
    let mut position = vec![0usize; rank.len()];
    for (i, &t) in prepared.order.iter().enumerate() {
        position[t] = i;
    }
    let mut order = prepared.order.clone();
    order.sort_by(|&a, &b| {
        rank[b]
            .total_cmp(&rank[a])
            .then(position[a].cmp(&position[b]))
    });
    order
}

impl Scheduler for Heft {
    fn name(&self) -> &'static str {
        "heft"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let rank = upward_ranks(graph, &prepared, grid, predictor);
        let order = rank_order(&prepared, &rank);
        let n = graph.tasks.len();
        let mut servers = vec![0; n];
        let mut finish = vec![0.0f64; n];
        let mut busy = vec![Busy::default(); grid.servers.len()];
        for &t in &order {
            let task = &graph.tasks[t];
            let mut best: Option<(ServerId, f64, f64)> = None;
            for &s in &prepared.capable[prepared.function_of[t]] {
                let here = Location::Server(s);
                let mut ready = predictor
                    .link(Location::Client, here)
                    .transfer_time(task.client_in_bytes);
                for &(p, bytes) in &prepared.predecessors[t] {
                    let from = Location::Server(servers[p]);
                    ready = ready.max(finish[p] + predictor.link(from, here).transfer_time(bytes));
                }
                let duration = predictor.compute_time(s, task, ready);
                let start = busy[s].earliest(
                    ready,
                    duration,
                    task.processors.max(1),
                    grid.servers[s].processors.max(1),
                );
                let end = start + duration;
                if best.is_none_or(|(_, _, e)| end < e) {
                    best = Some((s, start, end));
                }
            }
            let Some((s, start, end)) = best else {
                return Err(GraphError::Unimplemented {
                    label: task.label.clone(),
                    function: task.function.clone(),
                });
            };
            busy[s].insert(
                start,
                end,
                task.processors
                    .max(1)
                    .min(grid.servers[s].processors.max(1)),
            );
            servers[t] = s;
            finish[t] = end;
        }
        Ok(finish_schedule(graph, &prepared.order, servers, predictor))
    }
}
