//! Baselines that ignore predictions: round-robin, and uniformly random (seeded, so runs
//! repeat). Random placement is a strong baseline on real graphs; keeping it next to the
//! others keeps comparisons honest.

use crate::graph::{GraphError, TaskGraph};
use crate::grid::{GridView, ServerId};
use crate::predictor::Predictor;
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
    state: u64,
}

impl Random {
    pub fn new(seed: u64) -> Random {
        Random { state: seed }
    }

    /// SplitMix64: small, fast, and the same sequence for the same seed everywhere.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
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
