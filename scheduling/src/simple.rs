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
        let mut fastest_first: HashMap<(usize, u32), Vec<(ServerId, f64)>> = HashMap::new();
        for &task in &prepared.order {
            let t = &graph.tasks[task];
            let candidates = fastest_first
                .entry((prepared.function_of[task], t.processors))
                .or_insert_with(|| {
                    let mut list: Vec<(ServerId, f64)> = prepared.capable
                        [prepared.function_of[task]]
                        .iter()
                        .map(|&s| (s, predictor.peak_speed(s, t.processors)))
                        .collect();
                    list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                    list
                });
            // No server can start before the last input is produced, nor compute faster
            // than its peak: once that bound passes the best finish, the server loses. (A
            // learned per-call overhead can make a faster server lose to a slower one, so
            // the rest are still looked at.)
            let inputs_ready = predecessors[task]
                .iter()
                .filter_map(|&(p, _)| placed[p].map(|(_, timing)| timing.finish))
                .fold(0.0, f64::max);
            let mut best: Option<(ServerId, Timing)> = None;
            for &(server, _) in candidates.iter() {
                if let Some((_, b)) = best
                    && inputs_ready + predictor.least_compute_time(server, t) > b.finish
                {
                    continue;
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
