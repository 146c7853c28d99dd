//! Jobs as the simulator sees them, and generators of the papers' workloads.

use serde::Serialize;

use crate::random::{Random, WeightedSizes};

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

/// How the FPMPFS paper's run times are drawn. The paper gives only their mean (32 s, over 500 jobs
/// of three real programs), so the distribution is a choice; these span its variability by
/// the coefficient of variation (CV), all with the same mean and independent of the demand.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunTimes {
    /// Exponential: CV 1.
    Exponential,
    /// Every job takes the mean: CV 0.
    Fixed,
    /// Erlang with k phases: CV 1/√k.
    Erlang(u32),
    /// Two-phase hyperexponential with balanced means and this CV (above 1).
    Hyper(f64),
}

impl RunTimes {
    /// One run time of mean `mean`.
    pub fn draw(self, random: &mut Random, mean: f64) -> f64 {
        match self {
            RunTimes::Exponential => random.exponential(mean),
            RunTimes::Fixed => mean,
            RunTimes::Erlang(k) => {
                let k = k.max(1);
                (0..k)
                    .map(|_| random.exponential(mean / f64::from(k)))
                    .sum()
            }
            RunTimes::Hyper(cv) => {
                let c2 = (cv * cv).max(1.0);
                let p = 0.5 * (1.0 + ((c2 - 1.0) / (c2 + 1.0)).sqrt());
                if random.uniform() < p {
                    random.exponential(mean / (2.0 * p))
                } else {
                    random.exponential(mean / (2.0 * (1.0 - p)))
                }
            }
        }
    }

    /// The coefficient of variation the distribution has.
    pub fn cv(self) -> f64 {
        match self {
            RunTimes::Exponential => 1.0,
            RunTimes::Fixed => 0.0,
            RunTimes::Erlang(k) => 1.0 / f64::from(k.max(1)).sqrt(),
            RunTimes::Hyper(cv) => cv.max(1.0),
        }
    }
}

impl std::str::FromStr for RunTimes {
    type Err = String;
    fn from_str(s: &str) -> Result<RunTimes, String> {
        let bad = || {
            format!(
                "unknown run-time distribution `{s}` (exponential, fixed, erlang:K with K ≥ 1, hyper:CV with CV > 1)"
            )
        };
        match s.split_once(':') {
            None if s == "exponential" => Ok(RunTimes::Exponential),
            None if s == "fixed" => Ok(RunTimes::Fixed),
            Some(("erlang", k)) => k
                .parse()
                .ok()
                .filter(|&k| k >= 1)
                .map(RunTimes::Erlang)
                .ok_or_else(bad),
            Some(("hyper", cv)) => cv
                .parse()
                .ok()
                .filter(|cv: &f64| cv.is_finite() && *cv > 1.0)
                .map(RunTimes::Hyper)
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

/// The FPMPFS paper's workload (its evaluation on an 8-PE Cenju-3): `jobs` jobs, PE demand uniform
/// over 1..=`processors`, run times of mean `mean_run` seconds drawn from `run_times`, Poisson
/// arrivals at `load` by its equation (1): load = λ p̄ / (m μ), so the mean interarrival time
/// is p̄ · mean_run / (m · load).
pub fn seed001(
    processors: u32,
    jobs: usize,
    mean_run: f64,
    run_times: RunTimes,
    load: f64,
    seed: u64,
) -> Vec<Job> {
    let mut random = Random::new(seed);
    let mean_demand = (1.0 + f64::from(processors)) / 2.0;
    let interarrival = mean_demand * mean_run / (f64::from(processors) * load.max(1e-6));
    let mut at = 0.0;
    (0..jobs)
        .map(|i| {
            at += random.exponential(interarrival);
            let processors = random.integer(1, processors);
            let run = run_times.draw(&mut random, mean_run);
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

/// The gang thesis's workload for comparing DQT allocation policies (section 7.2.2, Table 7.1):
/// power-of-two job sizes below the machine's size with probability inversely proportional
/// to the size, run times uniform over 500..=19,999 time units, Poisson arrivals until
/// `horizon` at the interval of its formula T = size × length / (P × W).
pub fn seed000(processors: u32, load: f64, horizon: f64, seed: u64) -> Vec<Job> {
    let mut random = Random::new(seed);
    // Sizes below the machine's: s < P, that is s ≤ P − 1.
    let sizes = WeightedSizes::powers_of_two(processors.max(2) - 1, |s| 1.0 / f64::from(s));
    let mean_size = sizes.mean();
    let (shortest, longest) = (500u32, 19_999u32);
    let mean_length = f64::from(shortest + longest) / 2.0;
    let interval = mean_size * mean_length / (f64::from(processors) * load.max(1e-6));
    let mut jobs = Vec::new();
    let mut at = random.exponential(interval);
    while at < horizon {
        let size = sizes.draw(&mut random);
        let run = f64::from(random.integer(shortest, longest));
        jobs.push(Job {
            id: jobs.len() as u64 + 1,
            submit: at,
            run,
            processors: size,
            requested: run,
        });
        at += random.exponential(interval);
    }
    jobs
}

/// The workload factor of the gang thesis: work over processors × time.
pub fn workload_factor(jobs: &[Job], processors: u32, horizon: f64) -> f64 {
    jobs.iter()
        .map(|j| f64::from(j.processors) * j.run)
        .sum::<f64>()
        / (f64::from(processors) * horizon)
}
