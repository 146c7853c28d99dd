//! Staging: which client arrays the proxy uploads ahead of their calls, through which
//! server, in what order.
//!
//! The seed's proxy sends each call's client data with the call, and every call that is
//! ready sends at once. A server's path from the client is then shared by all of them, so
//! they all arrive late together, and no routine starts before the last one is in.
//! Uploading one array at a time per path, in the order the tasks will need them, lets the
//! first routines compute while the rest upload. An array can also go through another
//! server whose client path is free sooner, when the server-to-server path is fast: the
//! task then reads it from there as it reads a producer's output. That uses all the
//! client's paths at once whatever the placement.
//!
//! [`plan`] decides greedily. Tasks go in the order they can start (depth in the graph, then
//! the submission order), each task's arrays largest first. Each array goes to the server
//! where it would be in its task's server soonest, counting the uploads already queued on
//! each path. Arrays under [`MIN_STAGED_BYTES`] travel with their calls: an upload costs a
//! round trip of its own. [`improve`] then moves arrays between paths and up the order while
//! the whole graph's predicted makespan drops: the greedy choice cannot see that a relayed
//! array delays its call until the relay is in.

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::predictor::Predictor;
use crate::schedule::{Schedule, Scheduler, Staged, check, evaluate_staged, finish_staged};

/// Arrays smaller than this go with their calls.
pub const MIN_STAGED_BYTES: u64 = 64 * 1024;

/// Whole-graph timings [`improve`] may spend on one final plan.
pub const IMPROVE_BUDGET: usize = 400;

/// Servers an array may go through: every one that is up.
fn vias(grid: &GridView) -> Vec<ServerId> {
    (0..grid.servers.len())
        .filter(|&s| grid.servers[s].up)
        .collect()
}

/// The final plan for tasks placed on `servers`: [`plan`], then [`improve`] within
/// [`IMPROVE_BUDGET`]. Returns the plan and its predicted makespan.
pub fn plan_and_improve(
    graph: &TaskGraph,
    grid: &GridView,
    order: &[TaskId],
    servers: &[ServerId],
    predictor: &mut dyn Predictor,
) -> (Vec<Staged>, f64) {
    let staging = plan(graph, grid, order, servers, predictor);
    improve(
        graph,
        grid,
        order,
        servers,
        staging,
        predictor,
        IMPROVE_BUDGET,
    )
}

/// The uploads ahead of calls for tasks placed on `servers`, in upload order.
pub fn plan(
    graph: &TaskGraph,
    grid: &GridView,
    order: &[TaskId],
    servers: &[ServerId],
    predictor: &dyn Predictor,
) -> Vec<Staged> {
    let mut depth = vec![0usize; graph.tasks.len()];
    let predecessors = graph.predecessors();
    for &task in order {
        depth[task] = predecessors[task]
            .iter()
            .map(|&(p, _)| depth[p] + 1)
            .max()
            .unwrap_or(0);
    }
    let mut tasks: Vec<TaskId> = (0..graph.tasks.len().min(servers.len())).collect();
    tasks.sort_by_key(|&t| (depth[t], t));
    let vias = vias(grid);
    let mut path_free = vec![0.0f64; grid.servers.len()];
    let mut staging = Vec::new();
    for task in tasks {
        let Some(inputs) = graph.client_inputs.get(task) else {
            continue;
        };
        let mut inputs: Vec<_> = inputs
            .iter()
            .filter(|i| i.bytes >= MIN_STAGED_BYTES)
            .copied()
            .collect();
        inputs.sort_by_key(|i| std::cmp::Reverse(i.bytes));
        let home = servers[task];
        for input in inputs {
            let arrival = |via: ServerId| {
                let upload = path_free[via]
                    + predictor
                        .link(Location::Client, Location::Server(via))
                        .transfer_time(input.bytes);
                let relay = if via == home {
                    0.0
                } else {
                    predictor
                        .link(Location::Server(via), Location::Server(home))
                        .transfer_time(input.bytes)
                };
                (upload, upload + relay)
            };
            // The task's own server first, so a tie keeps the array where it is read.
            let mut best = (home, arrival(home));
            for &via in &vias {
                let candidate = arrival(via);
                if candidate.1 < best.1.1 {
                    best = (via, candidate);
                }
            }
            let (via, (uploaded, _)) = best;
            if let Some(free) = path_free.get_mut(via) {
                *free = uploaded;
            }
            staging.push(Staged {
                task,
                parameter: input.parameter,
                bytes: input.bytes,
                via,
            });
        }
    }
    staging
}

/// Improves a plan under the whole model: moves one array to another server's path, trades
/// the paths of two arrays, or moves one array a place earlier in the upload order, and
/// keeps a change only if the graph's predicted makespan drops; at most `budget` timings.
/// Returns the plan and its makespan.
pub fn improve(
    graph: &TaskGraph,
    grid: &GridView,
    order: &[TaskId],
    servers: &[ServerId],
    mut staging: Vec<Staged>,
    predictor: &mut dyn Predictor,
    mut budget: usize,
) -> (Vec<Staged>, f64) {
    let predecessors = graph.predecessors();
    let time = |staging: &[Staged], predictor: &mut dyn Predictor| {
        evaluate_staged(graph, order, &predecessors, servers, staging, predictor)
    };
    let mut best = time(&staging, predictor);
    let vias = vias(grid);
    let mut improved = true;
    while improved && budget > 0 {
        improved = false;
        for i in 0..staging.len() {
            let current = staging[i].via;
            for &via in &vias {
                if via == current || budget == 0 {
                    continue;
                }
                budget -= 1;
                staging[i].via = via;
                let m = time(&staging, predictor);
                if m < best * (1.0 - 1e-9) {
                    best = m;
                    improved = true;
                    break;
                }
                staging[i].via = current;
            }
            // Two arrays trading paths keep each path's load and change who waits.
            for j in i + 1..staging.len() {
                if improved || budget == 0 || staging[j].via == staging[i].via {
                    continue;
                }
                budget -= 1;
                let (a, b) = (staging[i].via, staging[j].via);
                (staging[i].via, staging[j].via) = (b, a);
                let m = time(&staging, predictor);
                if m < best * (1.0 - 1e-9) {
                    best = m;
                    improved = true;
                } else {
                    (staging[i].via, staging[j].via) = (a, b);
                }
            }
            if i > 0 && budget > 0 {
                budget -= 1;
                staging.swap(i - 1, i);
                let m = time(&staging, predictor);
                if m < best * (1.0 - 1e-9) {
                    best = m;
                    improved = true;
                } else {
                    staging.swap(i - 1, i);
                }
            }
        }
    }
    (staging, best)
}

/// Another scheduler's placement with its client arrays staged, to tell what staging alone
/// gains over that scheduler (`staged-flow` is FLOW's placement, staged).
pub struct WithStaging {
    pub name: &'static str,
    pub placement: Box<dyn Scheduler>,
}

impl Scheduler for WithStaging {
    fn name(&self) -> &'static str {
        self.name
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let order = check(graph, grid)?;
        let mut scratch = predictor.fork();
        let servers = self
            .placement
            .schedule(graph, grid, scratch.as_mut())?
            .servers;
        let (staging, _) = plan_and_improve(graph, grid, &order, &servers, predictor);
        Ok(finish_staged(graph, &order, servers, staging, predictor))
    }
}
