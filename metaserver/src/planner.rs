//! Scheduling one graph against the registry (seed 004 step 5): build the predictor from the
//! monitoring history and the placements still running, run the configured scheduler, and
//! remember the new placements so the next graph sees those servers as busier. Pure: the
//! time is a parameter.
//!
//! A load sample counts every job running when it was taken, including this metaserver's
//! own placements. Those are known better than the sample knows them: a graph that has
//! ended since no longer loads its servers, and a running graph's placements are entered
//! into the predictor with their own times. So the jobs of known placements that were
//! running at the sample's time are taken out of the measured load before the predictor
//! adds back those still running; the sample keeps only the load nobody here placed.

use ninf_scheduling::{
    GraphError, Link, LoadPredictor, Predictor, PredictorKind, Schedule, Scheduler, TaskGraph,
};

use crate::registry::Registry;

/// A placement the metaserver made that may still be running (absolute Unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct ActivePlacement {
    pub graph: u64,
    pub task: usize,
    pub server: String,
    pub processors: u32,
    pub start: f64,
    pub finish: f64,
    /// When the graph was placed: its tasks' actual times count from here.
    pub placed_at: f64,
}

/// How long the placements of ended graphs are kept to correct load samples taken while they
/// ran (samples are seconds old at most; this is generous).
const ENDED_MEMORY_SECONDS: f64 = 300.0;

/// The record of placements made, feeding the predictor.
#[derive(Debug, Clone)]
pub struct Planner {
    pub predictor: PredictorKind,
    /// Assumed for paths nobody has measured yet.
    pub default_link: Link,
    active: Vec<ActivePlacement>,
    /// Placements of graphs that have ended, with their actual times.
    ended: Vec<ActivePlacement>,
}

impl Planner {
    pub fn new(predictor: PredictorKind, default_link: Link) -> Planner {
        Planner {
            predictor,
            default_link,
            active: Vec::new(),
            ended: Vec::new(),
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
        self.plan_avoiding(registry, graph, client_links, &[], scheduler, now)
    }

    /// [`Planner::plan`], placing around the servers in `avoid` (by address) when the
    /// graph can run without them ([`ninf_scheduling::GridView::avoiding`]).
    pub fn plan_avoiding(
        &self,
        registry: &Registry,
        graph: &TaskGraph,
        client_links: &[(String, Link)],
        avoid: &[String],
        scheduler: &mut dyn Scheduler,
        now: f64,
    ) -> Result<Schedule, GraphError> {
        let grid = registry.grid_view(now).avoiding(avoid, graph);
        let history = registry.history(client_links);
        let mut predictor =
            LoadPredictor::from_history(&grid, &history, self.predictor, self.default_link);
        for (index, server) in registry.servers().iter().enumerate() {
            if let Some(sampled) = server.load_sampled_at {
                let known: u32 = self
                    .active
                    .iter()
                    .chain(&self.ended)
                    .filter(|p| {
                        p.server == server.address && p.start <= sampled && sampled < p.finish
                    })
                    .map(|p| p.processors)
                    .sum();
                predictor.discount_load(index, f64::from(known));
            }
        }
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
                    task,
                    server: entry.address.clone(),
                    processors: graph.tasks[task].processors,
                    start: now + timing.start,
                    finish: now + timing.finish,
                    placed_at: now,
                });
            }
        }
    }

    /// A graph has ended at `now`; `actuals` are its tasks' (task, start, finish) in seconds
    /// from its start. Its placements stop counting as load, and are kept with their actual
    /// times (a task without an actual is taken to have run until `now`) to correct load
    /// samples taken while they ran. Placements whose predicted end is past go too.
    pub fn finish(&mut self, graph_id: u64, now: f64, actuals: &[(usize, f64, f64)]) {
        let (ended, active): (Vec<ActivePlacement>, Vec<ActivePlacement>) = self
            .active
            .drain(..)
            .partition(|p| p.graph == graph_id || p.finish <= now);
        self.active = active;
        for mut p in ended {
            if p.graph == graph_id {
                match actuals.iter().find(|(task, _, _)| *task == p.task) {
                    Some(&(_, start, finish)) => {
                        p.start = p.placed_at + start;
                        p.finish = (p.placed_at + finish).min(now);
                    }
                    None => p.finish = now,
                }
            }
            self.ended.push(p);
        }
        self.ended.retain(|p| p.finish > now - ENDED_MEMORY_SECONDS);
    }

    /// Placements still counted.
    pub fn active(&self) -> &[ActivePlacement] {
        &self.active
    }
}
