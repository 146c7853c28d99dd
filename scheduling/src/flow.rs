//! FLOW (the metaserver paper): cut the graph into paths and place each path whole, heaviest first.
//!
//! 1. Among the tasks not yet placed, take the path (a chain of tasks linked by edges) with
//!    the largest total computation.
//! 2. Place it on the server, among those serving every routine on it, where the path's last
//!    task would finish first (its inputs from the client and from already placed tasks,
//!    computation at the predicted speed; tasks inside the path exchange data for free).
//!    If no server serves every routine on the path, the path is cut to its longest prefix
//!    that one server does serve; the rest stays for later rounds.
//! 3. Report the path's tentative placements to the predictor, remove the path, repeat.
//!
//! Finally the tentative placements are withdrawn and the whole assignment is timed in
//! dependency order (reporting the final placements), so predicted times respect every
//! dependency, including those between paths placed in different rounds.

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, ServerId};
use crate::paths::HeaviestPaths;
use crate::predictor::{PlacementId, Predictor};
use crate::schedule::{Prepared, Schedule, Scheduler, Timing, finish_schedule, predict, record};

#[derive(Debug, Default)]
pub struct Flow;

/// The heaviest path among unplaced tasks and the servers serving every routine on it; when
/// none does, the path is shortened to its longest prefix that some server serves.
pub fn next_path(prepared: &Prepared, paths: &HeaviestPaths) -> (Vec<TaskId>, Vec<ServerId>) {
    let mut path = paths.heaviest();
    loop {
        let found: Vec<ServerId> = prepared.capable[prepared.function_of[path[0]]]
            .iter()
            .copied()
            .filter(|&s| {
                path.iter()
                    .all(|&t| prepared.serves[prepared.function_of[t]][s])
            })
            .collect();
        if !found.is_empty() || path.len() <= 1 {
            return (path, found);
        }
        path.pop();
    }
}

impl Scheduler for Flow {
    fn name(&self) -> &'static str {
        "flow"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let (order, predecessors) = (&prepared.order, &prepared.predecessors);
        let n = graph.tasks.len();
        let mut paths = HeaviestPaths::new(graph, order, predecessors);
        let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; n];
        let mut servers = vec![0; n];
        let mut tentative: Vec<PlacementId> = Vec::new();
        while !paths.is_empty() {
            let (path, candidates) = next_path(&prepared, &paths);
            let mut best: Option<(ServerId, Vec<Timing>)> = None;
            for server in candidates {
                // Path tasks are entered into the table while the path is timed on this
                // server, then taken out again: no copy of the whole table per server.
                let mut timings = Vec::with_capacity(path.len());
                for &t in &path {
                    let timing = predict(graph, predecessors, t, server, &placed, predictor);
                    placed[t] = Some((server, timing));
                    timings.push(timing);
                }
                for &t in &path {
                    placed[t] = None;
                }
                let last = timings.last().map_or(0.0, |t| t.finish);
                if best
                    .as_ref()
                    .is_none_or(|(_, b)| last < b.last().map_or(0.0, |t| t.finish))
                {
                    best = Some((server, timings));
                }
            }
            let Some((server, timings)) = best else {
                let t = &graph.tasks[path[0]];
                return Err(GraphError::Unimplemented {
                    label: t.label.clone(),
                    function: t.function.clone(),
                });
            };
            for (&t, timing) in path.iter().zip(timings) {
                record(
                    graph,
                    predecessors,
                    t,
                    (server, timing),
                    &placed,
                    predictor,
                    &mut tentative,
                );
                placed[t] = Some((server, timing));
                servers[t] = server;
            }
            paths.remove(&path);
        }
        // Newest first: each comes off the end of its server's timeline.
        for id in tentative.into_iter().rev() {
            predictor.withdraw(id);
        }
        Ok(finish_schedule(graph, order, servers, predictor))
    }
}
