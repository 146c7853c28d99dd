//! `ninf dag-bench`: every scheduler on random layered task graphs over a modelled platform,
//! with nothing executed (issue 5's pure scheduling benchmark). For each graph size and
//! communication-to-computation ratio it reports each scheduler's predicted makespan over
//! HEFT's on the same graph, the schedule length ratio (makespan over the critical path's
//! fastest computation), and the time spent scheduling.

use std::time::Instant;

use ninf_scheduling::by_name;
use ninf_scheduling::random_dag::{Platform, critical_path_lower_bound, layered};
use serde::Serialize;

#[derive(Debug, Clone)]
pub struct DagBenchOptions {
    pub tasks: Vec<usize>,
    pub ccr: Vec<f64>,
    pub graphs: u64,
    pub servers: usize,
    pub schedulers: Vec<String>,
    pub seed: u64,
}

/// Means over the graphs of one (tasks, ccr, scheduler).
#[derive(Debug, Clone, Serialize)]
pub struct DagBenchResult {
    pub tasks: usize,
    pub ccr: f64,
    pub scheduler: String,
    pub graphs: u64,
    /// Mean of makespan / HEFT's makespan on the same graph.
    pub makespan_over_heft: f64,
    /// Mean schedule length ratio.
    pub slr: f64,
    /// Graphs where this scheduler's makespan was the lowest of all (ties count for each).
    pub best: u64,
    /// Mean wall-clock time to schedule one graph, milliseconds.
    pub schedule_ms: f64,
}

pub fn run(options: &DagBenchOptions) -> anyhow::Result<Vec<DagBenchResult>> {
    let mut results = Vec::new();
    for &tasks in &options.tasks {
        for &ccr in &options.ccr {
            // makespans[graph][scheduler], times likewise.
            let mut makespans: Vec<Vec<f64>> = Vec::new();
            let mut times: Vec<Vec<f64>> = Vec::new();
            let mut bounds: Vec<f64> = Vec::new();
            for g in 0..options.graphs {
                let seed = options.seed.wrapping_mul(1_000_003).wrapping_add(g);
                let platform = Platform::random(options.servers, seed);
                let graph = layered(tasks, ccr, &platform, seed ^ 0x5eed);
                bounds.push(critical_path_lower_bound(&graph, &platform.grid));
                let mut row = Vec::new();
                let mut time_row = Vec::new();
                for name in &options.schedulers {
                    let mut scheduler = by_name(name, seed).map_err(|e| anyhow::anyhow!("{e}"))?;
                    let mut predictor = platform.predictor();
                    let started = Instant::now();
                    let schedule = scheduler.schedule(&graph, &platform.grid, &mut predictor)?;
                    time_row.push(started.elapsed().as_secs_f64() * 1e3);
                    row.push(schedule.makespan);
                }
                makespans.push(row);
                times.push(time_row);
            }
            let heft = options.schedulers.iter().position(|s| s == "heft");
            let n = options.graphs.max(1) as f64;
            for (k, name) in options.schedulers.iter().enumerate() {
                let over_heft = makespans
                    .iter()
                    .map(|row| heft.map_or(f64::NAN, |h| row[k] / row[h]))
                    .sum::<f64>()
                    / n;
                let slr = makespans
                    .iter()
                    .zip(&bounds)
                    .map(|(row, b)| row[k] / b.max(f64::MIN_POSITIVE))
                    .sum::<f64>()
                    / n;
                let best = makespans
                    .iter()
                    .filter(|row| {
                        let least = row.iter().copied().fold(f64::INFINITY, f64::min);
                        row[k] <= least * (1.0 + 1e-9)
                    })
                    .count() as u64;
                results.push(DagBenchResult {
                    tasks,
                    ccr,
                    scheduler: name.clone(),
                    graphs: options.graphs,
                    makespan_over_heft: over_heft,
                    slr,
                    best,
                    schedule_ms: times.iter().map(|row| row[k]).sum::<f64>() / n,
                });
            }
        }
    }
    Ok(results)
}
