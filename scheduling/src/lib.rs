//! The metaserver's decision logic, pure and deterministic (no I/O, no clock): Network Task
//! graphs, the resource state predictor, and the scheduler SPI with SIMPLE and FLOW from
//! the metaserver paper (as the seed ran them, and transfer-aware), HEFT, PEFT and lookahead HEFT (`list`), our own local search (`search`), plus round-robin and random baselines. The metaserver runs it on live data; the
//! simulator runs the same code. Formulas: docs/scheduling.md.

pub mod baseline;
pub mod calibration;
pub mod classic;
pub mod flow;
pub mod forecast;
pub mod formats;
pub mod graph;
pub mod grid;
pub mod list;
pub mod paths;
pub mod predictor;
pub mod random;
pub mod random_dag;
pub mod schedule;
pub mod search;
pub mod seed;
pub mod simple;
pub mod staging;
pub mod stats;
pub mod templates;
pub mod timeline;

pub use graph::{ClientInput, Edge, GraphError, ResidentInput, Task, TaskGraph, TaskId};
pub use grid::{GridView, Link, Location, ServerId, ServerView, Site};
pub use predictor::{History, LoadPredictor, Model, Predictor, PredictorKind};
pub use schedule::{Schedule, Scheduler, Staged, Timing};

/// Names of the schedulers a configuration may choose.
pub const SCHEDULERS: [&str; 11] = [
    "simple",
    "flow",
    "staged-flow",
    "seed-simple",
    "seed-flow",
    "heft",
    "peft",
    "heft-lookahead",
    "search",
    "round-robin",
    "random",
];

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown scheduler `{0}` (known: {known})", known = SCHEDULERS.join(", "))]
pub struct UnknownScheduler(pub String);

/// The scheduler a configuration names (`scheduler = "flow"`); `seed` drives `random`.
pub fn by_name(name: &str, seed: u64) -> Result<Box<dyn Scheduler>, UnknownScheduler> {
    Ok(match name {
        "simple" => Box::new(simple::Simple),
        "flow" => Box::new(flow::Flow),
        "staged-flow" => Box::new(staging::WithStaging {
            name: "staged-flow",
            placement: Box::new(flow::Flow),
        }),
        "seed-simple" => Box::new(seed::SeedSimple),
        "seed-flow" => Box::new(seed::SeedFlow),
        "heft" => Box::new(list::heft::Heft),
        "peft" => Box::new(list::peft::Peft),
        "heft-lookahead" => Box::new(list::lookahead::LookaheadHeft),
        "search" => Box::new(search::LocalSearch),
        "round-robin" => Box::new(baseline::RoundRobin::default()),
        "random" => Box::new(baseline::Random::new(seed)),
        other => return Err(UnknownScheduler(other.to_string())),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_scheduler_resolves_under_its_own_name_and_others_are_refused() {
        for name in SCHEDULERS {
            assert_eq!(by_name(name, 1).unwrap().name(), name);
        }
        let e = by_name("fastest", 1).err().unwrap().to_string();
        assert_eq!(
            e,
            format!(
                "unknown scheduler `fastest` (known: {})",
                SCHEDULERS.join(", ")
            )
        );
    }
}
