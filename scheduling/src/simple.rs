//! SIMPLE (seed 004), transfer-aware: each task, in dependency order, goes to the server with
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

/// The servers able to run one routine on one processor count, by their bound's seconds
/// per flop ([`Predictor::least_compute_line`]), least first (ties to the lower id).
struct Candidates {
    by_speed: Vec<(ServerId, f64)>,
    /// `per_call[i]`: the least seconds per call among `by_speed[i..]`.
    per_call: Vec<f64>,
}

impl Candidates {
    fn new(servers: &[ServerId], task: &crate::graph::Task, predictor: &dyn Predictor) -> Self {
        let mut lines: Vec<(ServerId, f64, f64)> = servers
            .iter()
            .map(|&s| {
                let (per_flop, per_call) = predictor.least_compute_line(s, task);
                (s, per_flop, per_call)
            })
            .collect();
        lines.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut per_call = vec![0.0; lines.len()];
        let mut least = f64::INFINITY;
        for (i, line) in lines.iter().enumerate().rev() {
            least = least.min(line.2.max(0.0));
            per_call[i] = least;
        }
        Candidates {
            by_speed: lines
                .into_iter()
                .map(|(s, per_flop, _)| (s, per_flop))
                .collect(),
            per_call,
        }
    }

    /// The least bound among the servers from position `i` on, for a task of `flops`.
    fn floor(&self, i: usize, flops: f64) -> f64 {
        let per_call = self.per_call.get(i).copied().unwrap_or(0.0);
        match self.by_speed.get(i) {
            Some(&(_, per_flop)) if flops > 0.0 => flops * per_flop + per_call,
            _ => per_call,
        }
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
        // Capable servers by routine and processor count, fastest (when idle) first.
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
            for (i, &(server, _)) in candidates.by_speed.iter().enumerate() {
                if let Some((_, b)) = best {
                    if (inputs_ready + candidates.floor(i, t.flops)) * (1.0 - ROUNDING) > b.finish {
                        break;
                    }
                    if inputs_ready + predictor.least_compute_time(server, t) > b.finish {
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
