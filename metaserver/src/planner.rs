//! Scheduling one graph against the registry (seed 004 step 5): build the predictor from the
//! monitoring history and the placements still running, run the configured scheduler, and
//! remember the new placements so the next graph sees those servers as busier. Pure: the
//! time is a parameter.

use ninf_scheduling::{
    GraphError, Link, LoadPredictor, Predictor, PredictorKind, Schedule, Scheduler, TaskGraph,
};

use crate::registry::Registry;

/// A placement the metaserver made that may still be running (absolute Unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct ActivePlacement {
    pub graph: u64,
    pub server: String,
    pub processors: u32,
    pub start: f64,
    pub finish: f64,
}

/// The record of placements made, feeding the predictor.
#[derive(Debug, Clone)]
pub struct Planner {
    pub predictor: PredictorKind,
    /// Assumed for paths nobody has measured yet.
    pub default_link: Link,
    active: Vec<ActivePlacement>,
}

impl Planner {
    pub fn new(predictor: PredictorKind, default_link: Link) -> Planner {
        Planner {
            predictor,
            default_link,
            active: Vec::new(),
        }
    }

    /// Places `graph` with `scheduler` as of `now`. `client_links` are the proxy's
    /// measurements (server address, sample), oldest first.
    pub fn plan(
        &self,
        registry: &Registry,
        graph: &TaskGraph,
        client_links: &[(String, Link)],
        scheduler: &mut dyn Scheduler,
        now: f64,
    ) -> Result<Schedule, GraphError> {
        let grid = registry.grid_view(now);
        let history = registry.history(client_links);
        let mut predictor =
            LoadPredictor::from_history(&grid, &history, self.predictor, self.default_link);
        for p in self.active.iter().filter(|p| p.finish > now) {
            if let Some(server) = registry.index_of(&p.server) {
                predictor.place(server, p.processors, p.start - now, p.finish - now);
            }
        }
        scheduler.schedule(graph, &grid, &mut predictor)
    }

    /// Remembers a graph's placements (scheduled at `now`).
    pub fn record(
        &mut self,
        graph_id: u64,
        graph: &TaskGraph,
        schedule: &Schedule,
        registry: &Registry,
        now: f64,
    ) {
        let servers = registry.servers();
        for (task, (&server, timing)) in schedule.servers.iter().zip(&schedule.timings).enumerate()
        {
            if let Some(entry) = servers.get(server) {
                self.active.push(ActivePlacement {
                    graph: graph_id,
                    server: entry.address.clone(),
                    processors: graph.tasks[task].processors,
                    start: now + timing.start,
                    finish: now + timing.finish,
                });
            }
        }
    }

    /// Forgets a graph's placements once it has ended, and any whose predicted end is past.
    pub fn finish(&mut self, graph_id: u64, now: f64) {
        self.active
            .retain(|p| p.graph != graph_id && p.finish > now);
    }

    /// Placements still counted.
    pub fn active(&self) -> &[ActivePlacement] {
        &self.active
    }
}
