//! Jobs as the simulator sees them, and generators of the papers' workloads.

use serde::Serialize;

use crate::random::Random;

/// A rigid job: it needs `processors` for `run` seconds from its start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Job {
    pub id: u64,
    /// Arrival time, seconds.
    pub submit: f64,
    /// Actual run time, seconds.
    pub run: f64,
    pub processors: u32,
    /// The user's estimate, which backfilling plans with (at least `run` here unless the
    /// workload says otherwise).
    pub requested: f64,
}

/// Seed 001's workload (its evaluation on an 8-PE Cenju-3): `jobs` jobs, PE demand uniform
/// over 1..=`processors`, run times exponential with mean `mean_run` seconds, Poisson arrivals
/// at `load` by its equation (1): load = λ p̄ / (m μ), so the mean interarrival time is
/// p̄ · mean_run / (m · load).
pub fn seed001(processors: u32, jobs: usize, mean_run: f64, load: f64, seed: u64) -> Vec<Job> {
    let mut random = Random::new(seed);
    let mean_demand = (1.0 + f64::from(processors)) / 2.0;
    let interarrival = mean_demand * mean_run / (f64::from(processors) * load.max(1e-6));
    let mut at = 0.0;
    (0..jobs)
        .map(|i| {
            at += random.exponential(interarrival);
            let processors = random.integer(1, processors);
            let run = random.exponential(mean_run);
            Job {
                id: i as u64 + 1,
                submit: at,
                run,
                processors,
                requested: run,
            }
        })
        .collect()
}
