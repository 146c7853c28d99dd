//! SIMPLE (seed 004): each task, in dependency order, goes to the server with the shortest
//! predicted completion time (its inputs' transfers plus its computation); the decision is
//! reported to the predictor before the next one, so later tasks see the added load.

use crate::graph::{GraphError, TaskGraph};
use crate::grid::{GridView, ServerId};
use crate::predictor::Predictor;
use crate::schedule::{Schedule, Scheduler, Timing, assemble, check, predict};

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
        let order = check(graph, grid)?;
        let predecessors = graph.predecessors();
        let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
        let mut servers = vec![0; graph.tasks.len()];
        for task in order {
            let mut best: Option<(ServerId, Timing)> = None;
            for server in grid.capable(&graph.tasks[task].function) {
                let timing = predict(graph, &predecessors, task, server, &placed, predictor);
                if best.is_none_or(|(_, b)| timing.finish < b.finish) {
                    best = Some((server, timing));
                }
            }
            let Some((server, timing)) = best else {
                return Err(GraphError::Unimplemented {
                    label: graph.tasks[task].label.clone(),
                    function: graph.tasks[task].function.clone(),
                });
            };
            predictor.place(
                server,
                graph.tasks[task].processors,
                timing.start,
                timing.finish,
            );
            servers[task] = server;
            placed[task] = Some((server, timing));
        }
        Ok(assemble(graph, servers, placed, predictor))
    }
}
