//! SIMPLE and FLOW exactly as the metaserver paper ran them, for reproducing its experiment. The seed
//! says both "schedule according to CPU performance and load" (section 4.6): a server is
//! chosen by its predicted speed alone, never by where the data is or how fast it moves. Its
//! predictor knew only that "a server just given a task will soon be busier", with no time
//! axis: every placement made so far in the graph counts as a running job on its server
//! while the rest of the graph is placed.
//!
//! - `seed-simple`: each task in call order (the order of the transaction's calls) goes to
//!   the capable server with the shortest predicted computation time; the placement then
//!   counts as load.
//! - `seed-flow`: the heaviest remaining path (by computation) goes whole to the server that
//!   serves all of it with the shortest predicted computation time for the path; the path
//!   then counts as one job (its tasks run one after another).
//!
//! Ties go to the lower server id. Once every task has a server, the load hints are
//! withdrawn and the assignment is timed under the full model (transfers included) and
//! reported, as every scheduler's is. The transfer-aware versions are [`crate::simple`] and
//! [`crate::flow`].

use crate::flow::next_path;
use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, ServerId};
use crate::paths::HeaviestPaths;
use crate::predictor::{PAST_DEADLINE_SECONDS, PlacementId, Predictor};
use crate::schedule::{Prepared, Schedule, Scheduler, finish_schedule};

/// The metaserver paper's SIMPLE.
#[derive(Debug, Default)]
pub struct SeedSimple;

/// The metaserver paper's FLOW.
#[derive(Debug, Default)]
pub struct SeedFlow;

/// A load hint lasting the rest of the schedule.
fn hint(predictor: &mut dyn Predictor, server: ServerId, processors: u32) -> PlacementId {
    predictor.place(server, processors, 0.0, f64::INFINITY)
}

/// Predicted computation time of `tasks` on `server` with the hints so far. The paper's
/// figure has no time axis (every task at time 0); a server whose batch job would end
/// before the tasks, run one after another, are done still costs the predictor's penalty
/// ([`PAST_DEADLINE_SECONDS`]), so that the seed's schedulers keep to walltimes too.
fn compute_time(
    graph: &TaskGraph,
    tasks: &[TaskId],
    server: ServerId,
    predictor: &dyn Predictor,
) -> f64 {
    let mut total = 0.0;
    for &t in tasks {
        let task = &graph.tasks[t];
        let time = predictor.compute_time(server, task, 0.0);
        let in_turn = predictor.compute_time(server, task, total);
        total += if in_turn >= PAST_DEADLINE_SECONDS && time < PAST_DEADLINE_SECONDS {
            time + PAST_DEADLINE_SECONDS
        } else {
            time
        };
    }
    total
}

/// The fastest of `candidates` for `tasks`; the lower id on a tie.
fn fastest(
    graph: &TaskGraph,
    tasks: &[TaskId],
    candidates: impl IntoIterator<Item = ServerId>,
    predictor: &dyn Predictor,
) -> Option<ServerId> {
    let mut best: Option<(ServerId, f64)> = None;
    for server in candidates {
        let time = compute_time(graph, tasks, server, predictor);
        if best.is_none_or(|(_, b)| time < b) {
            best = Some((server, time));
        }
    }
    best.map(|(s, _)| s)
}

fn unimplemented(graph: &TaskGraph, task: TaskId) -> GraphError {
    GraphError::Unimplemented {
        label: graph.tasks[task].label.clone(),
        function: graph.tasks[task].function.clone(),
    }
}

/// The transaction's call order when it respects every dependency (the client library
/// builds graphs in call order), else the topological order.
fn call_order(graph: &TaskGraph, prepared: &Prepared) -> Vec<TaskId> {
    if graph.edges.iter().all(|e| e.from < e.to) {
        (0..graph.tasks.len()).collect()
    } else {
        prepared.order.clone()
    }
}

impl Scheduler for SeedSimple {
    fn name(&self) -> &'static str {
        "seed-simple"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let mut servers = vec![0; graph.tasks.len()];
        let mut hints = Vec::with_capacity(graph.tasks.len());
        for task in call_order(graph, &prepared) {
            let candidates = prepared.capable[prepared.function_of[task]].iter().copied();
            let server = fastest(graph, &[task], candidates, predictor)
                .ok_or_else(|| unimplemented(graph, task))?;
            hints.push(hint(predictor, server, graph.tasks[task].processors));
            servers[task] = server;
        }
        // Newest first: each comes off the end of its server's timeline.
        for id in hints.into_iter().rev() {
            predictor.withdraw(id);
        }
        Ok(finish_schedule(graph, &prepared.order, servers, predictor))
    }
}

impl Scheduler for SeedFlow {
    fn name(&self) -> &'static str {
        "seed-flow"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let mut paths = HeaviestPaths::new(graph, &prepared.order, &prepared.predecessors);
        let mut servers = vec![0; graph.tasks.len()];
        let mut hints = Vec::new();
        while !paths.is_empty() {
            let (path, candidates) = next_path(&prepared, &paths);
            let server = fastest(graph, &path, candidates, predictor)
                .ok_or_else(|| unimplemented(graph, path[0]))?;
            let processors = path
                .iter()
                .map(|&t| graph.tasks[t].processors)
                .max()
                .unwrap_or(1);
            hints.push(hint(predictor, server, processors));
            for &t in &path {
                servers[t] = server;
            }
            paths.remove(&path);
        }
        // Newest first: each comes off the end of its server's timeline.
        for id in hints.into_iter().rev() {
            predictor.withdraw(id);
        }
        Ok(finish_schedule(graph, &prepared.order, servers, predictor))
    }
}
