//! What a simulation measured: utilisation, response, wait, bounded slowdown, turnaround.

use serde::Serialize;

use crate::engine::Outcome;

/// Bounded slowdown's threshold (seconds): jobs shorter than this count as this long.
pub const SLOWDOWN_THRESHOLD: f64 = 10.0;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Metrics {
    pub jobs: usize,
    /// Processor-seconds of work over processors × (last end − first submit).
    pub utilization: f64,
    /// End − submit.
    pub mean_response_s: f64,
    pub p95_response_s: f64,
    /// Start − submit.
    pub mean_wait_s: f64,
    pub p95_wait_s: f64,
    /// max(1, (wait + run) / max(run, 10 s)).
    pub mean_bounded_slowdown: f64,
    /// End − submit, as the migration paper names it.
    pub mean_turnaround_s: f64,
    pub makespan_s: f64,
}

fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[((values.len() - 1) as f64 * q).round() as usize]
}

impl Metrics {
    pub fn of(outcomes: &[Outcome], processors: u32) -> Metrics {
        let n = outcomes.len().max(1) as f64;
        let first = outcomes
            .iter()
            .map(|o| o.submit)
            .fold(f64::INFINITY, f64::min);
        let last = outcomes.iter().map(|o| o.end).fold(0.0, f64::max);
        let makespan = if outcomes.is_empty() {
            0.0
        } else {
            last - first
        };
        let work: f64 = outcomes
            .iter()
            .map(|o| f64::from(o.processors) * o.run)
            .sum();
        let mut responses: Vec<f64> = outcomes.iter().map(|o| o.end - o.submit).collect();
        let mut waits: Vec<f64> = outcomes.iter().map(|o| o.start - o.submit).collect();
        let slowdown: f64 = outcomes
            .iter()
            .map(|o| ((o.end - o.submit) / o.run.max(SLOWDOWN_THRESHOLD)).max(1.0))
            .sum();
        let mean_response = responses.iter().sum::<f64>() / n;
        Metrics {
            jobs: outcomes.len(),
            utilization: if makespan > 0.0 {
                work / (f64::from(processors) * makespan)
            } else {
                0.0
            },
            mean_response_s: mean_response,
            p95_response_s: percentile(&mut responses, 0.95),
            mean_wait_s: waits.iter().sum::<f64>() / n,
            p95_wait_s: percentile(&mut waits, 0.95),
            mean_bounded_slowdown: slowdown / n,
            mean_turnaround_s: mean_response,
            makespan_s: makespan,
        }
    }
}
