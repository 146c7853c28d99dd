//! SIMPLE (the metaserver paper), transfer-aware: each task, in dependency order, goes to the server with
//! the shortest predicted completion time (its inputs' transfers plus its computation); the
//! decision and its transfers are reported to the predictor before the next one, so later
//! tasks see the added load and the shared paths. The seed's own SIMPLE, which looks at
//! computation alone, is [`crate::seed::SeedSimple`].

use std::collections::HashMap;

use crate::graph::{GraphError, TaskGraph};
use crate::grid::{GridView, ServerId};
use crate::predictor::Predictor;
use crate::schedule::{Prepared, Schedule, Scheduler, Timing, assemble, predict, record};

#[derive(Debug, Default)]
pub struct Simple;

/// Relative slack for comparing a bound computed as a line with one computed directly: far
/// above their rounding, far below any difference between servers.
const ROUNDING: f64 = 1e-9;

/// The servers able to run one routine on one processor count, with their bound's line
/// ([`Predictor::least_compute_line`]: seconds per flop, seconds per call), least seconds
/// per flop first (ties to the lower id). The bound is at the measured load, which no
/// placement changes, so it holds for the whole schedule.
struct Candidates {
    by_speed: Vec<(ServerId, f64, f64)>,
    /// `least_per_call[i]`: the least seconds per call among `by_speed[i..]`.
    least_per_call: Vec<f64>,
}

/// A line's seconds for a task of `flops` (none for the flops of a call without any, even
/// on a server without speed).
fn line_seconds(flops: f64, per_flop: f64, per_call: f64) -> f64 {
    if flops > 0.0 {
        flops * per_flop + per_call
    } else {
        per_call
    }
}

impl Candidates {
    fn new(servers: &[ServerId], task: &crate::graph::Task, predictor: &dyn Predictor) -> Self {
        let mut by_speed: Vec<(ServerId, f64, f64)> = servers
            .iter()
            .map(|&s| {
                let (per_flop, per_call) = predictor.least_compute_line(s, task);
                (s, per_flop, per_call.max(0.0))
            })
            .collect();
        by_speed.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut least_per_call = vec![0.0; by_speed.len()];
        let mut least = f64::INFINITY;
        for (i, &(_, _, per_call)) in by_speed.iter().enumerate().rev() {
            least = least.min(per_call);
            least_per_call[i] = least;
        }
        Candidates {
            by_speed,
            least_per_call,
        }
    }

    /// Server `i`'s bound, and the least bound among the servers from `i` on, for a task of
    /// `flops`.
    fn bounds(&self, i: usize, flops: f64) -> (f64, f64) {
        let Some(&(_, per_flop, per_call)) = self.by_speed.get(i) else {
            return (0.0, 0.0);
        };
        let least = self.least_per_call.get(i).copied().unwrap_or(0.0);
        (
            line_seconds(flops, per_flop, per_call),
            line_seconds(flops, per_flop, least),
        )
    }
}

impl Scheduler for Simple {
    fn name(&self) -> &'static str {
        "simple"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let predecessors = &prepared.predecessors;
        let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
        let mut servers = vec![0; graph.tasks.len()];
        let mut recorded = Vec::new();
        let mut makespan = 0.0f64;
        // Capable servers by routine and processor count, least bound per flop first.
        let mut fastest_first: HashMap<(usize, u32), Candidates> = HashMap::new();
        for &task in &prepared.order {
            let t = &graph.tasks[task];
            let candidates = fastest_first
                .entry((prepared.function_of[task], t.processors))
                .or_insert_with(|| {
                    Candidates::new(&prepared.capable[prepared.function_of[task]], t, predictor)
                });
            // No server can start before the last input is produced, nor compute in less
            // than its bound: once that passes the best finish, the server loses, and once
            // the bound of every server left does, they all do.
            let inputs_ready = predecessors[task]
                .iter()
                .filter_map(|&(p, _)| placed[p].map(|(_, timing)| timing.finish))
                .fold(0.0, f64::max);
            let mut best: Option<(ServerId, Timing)> = None;
            for (i, &(server, _, _)) in candidates.by_speed.iter().enumerate() {
                if let Some((_, b)) = best {
                    let (own, rest) = candidates.bounds(i, t.flops);
                    let loses = |bound: f64| (inputs_ready + bound) * (1.0 - ROUNDING) > b.finish;
                    if loses(rest) {
                        break;
                    }
                    if loses(own) {
                        continue;
                    }
                }
                let timing = predict(graph, predecessors, task, server, &placed, predictor);
                let better = best.is_none_or(|(bs, b)| {
                    timing.finish < b.finish || (timing.finish == b.finish && server < bs)
                });
                if better {
                    best = Some((server, timing));
                }
            }
            let Some((server, timing)) = best else {
                return Err(GraphError::Unimplemented {
                    label: graph.tasks[task].label.clone(),
                    function: graph.tasks[task].function.clone(),
                });
            };
            let done = record(
                graph,
                predecessors,
                task,
                (server, timing),
                &placed,
                predictor,
                &mut recorded,
            );
            makespan = makespan.max(done);
            servers[task] = server;
            placed[task] = Some((server, timing));
        }
        Ok(assemble(graph, servers, placed, makespan))
    }
}
