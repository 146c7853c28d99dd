//! Baselines that ignore predictions: round-robin, and uniformly random (seeded, so runs
//! repeat). Random placement is a strong baseline on real graphs; keeping it next to the
//! others keeps comparisons honest.

use crate::graph::{GraphError, TaskGraph};
use crate::grid::{GridView, ServerId};
use crate::predictor::Predictor;
use crate::random::SplitMix;
use crate::schedule::{Prepared, Schedule, Scheduler, finish_schedule};

/// Each task, in dependency order, goes to the next capable server after the last one used.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: ServerId,
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let count = grid.servers.len().max(1);
        let mut servers = vec![0; graph.tasks.len()];
        for &task in &prepared.order {
            let capable = &prepared.capable[prepared.function_of[task]];
            let pick = capable
                .iter()
                .copied()
                .min_by_key(|&s| (s + count - self.next % count) % count)
                .unwrap_or(0);
            servers[task] = pick;
            self.next = pick + 1;
        }
        Ok(finish_schedule(graph, &prepared.order, servers, predictor))
    }
}

/// Each task goes to a capable server drawn uniformly at random.
#[derive(Debug)]
pub struct Random {
    random: SplitMix,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random {
            random: SplitMix::new(seed),
        }
    }

    fn next(&mut self) -> u64 {
        self.random.next_u64()
    }
}

impl Scheduler for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let mut servers = vec![0; graph.tasks.len()];
        for &task in &prepared.order {
            let capable = &prepared.capable[prepared.function_of[task]];
            servers[task] = capable[(self.next() % capable.len() as u64) as usize];
        }
        Ok(finish_schedule(graph, &prepared.order, servers, predictor))
    }
}
