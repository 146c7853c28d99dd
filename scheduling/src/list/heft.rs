//! HEFT (Topcuoglu, Hariri and Wu 2002): list scheduling by upward rank with insertion.
//!
//! 1. Each task's mean cost: its compute time averaged over the servers that serve its
//!    routine. Each edge's mean cost: its transfer time averaged over every ordered pair of
//!    distinct up servers. A task's results going back to the client cost the mean
//!    transfer from the servers to the client's site (the proxy's links).
//! 2. Upward rank: rank(i) = cost(i) + max over successors j of (edge(i, j) + rank(j)), or
//!    cost(i) + its results' transfer for a task with no successor.
//! 3. In decreasing rank, each task goes to the server where it would finish first. A server
//!    runs this graph's tasks in its processors' free time: a task may be inserted into an
//!    idle stretch between tasks already placed there (the "insertion" policy), as long as
//!    its processors are free for the whole run. Speeds come from the predictor, so measured
//!    load and other transactions' placements are taken into account.
//!
//! The assignment is then timed once more by the predictor's model ([`Partial::finish`]),
//! which is what is reported and compared.

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::GridView;
use crate::list::{MeanLinks, Partial, mean_cost};
use crate::predictor::Predictor;
use crate::schedule::{Prepared, Schedule, Scheduler};

#[derive(Debug, Default)]
pub struct Heft;

/// Upward ranks of every task (HEFT's priority), from predicted speeds and links.
pub fn upward_ranks(
    graph: &TaskGraph,
    prepared: &Prepared,
    grid: &GridView,
    predictor: &dyn Predictor,
) -> Vec<f64> {
    let links = MeanLinks::new(grid);
    let successors = graph.successors();
    let mut rank = vec![0.0f64; graph.tasks.len()];
    for &t in prepared.order.iter().rev() {
        let tail = successors[t]
            .iter()
            .map(|&(j, bytes)| links.between(bytes, predictor) + rank[j])
            .fold(
                links.to_client(graph.tasks[t].client_out_bytes, predictor),
                f64::max,
            );
        rank[t] = mean_cost(graph, prepared, predictor, t) + tail;
    }
    rank
}

/// Tasks by decreasing `rank`; ties keep dependency order, so producers come first.
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

/// HEFT's list: every task in `order` at its earliest finish.
pub fn list_schedule(
    graph: &TaskGraph,
    prepared: &Prepared,
    grid: &GridView,
    predictor: &dyn Predictor,
    order: &[TaskId],
) -> Result<Partial, GraphError> {
    let mut partial = Partial::new(graph, grid);
    for &t in order {
        let at = partial.earliest_finish(graph, prepared, grid, predictor, t)?;
        partial.place(graph, grid, t, at);
    }
    Ok(partial)
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
        let partial = list_schedule(graph, &prepared, grid, predictor, &order)?;
        Ok(partial.finish(graph, &prepared, predictor))
    }
}
