//! `ninf dag-bench`: every scheduler on random layered task graphs over a modelled platform,
//! with nothing executed (issue 5's pure scheduling benchmark). For each graph size and
//! communication-to-computation ratio it reports each scheduler's predicted makespan over
//! HEFT's on the same graph, the schedule length ratio (makespan over the critical path's
//! fastest computation), and the time spent scheduling. Graphs and a platform may instead
//! come from files ([`run_files`]: STG, WfFormat, platform JSON), to compare with outside
//! schedulers on the same inputs.

use std::time::Instant;

use ninf_scheduling::random_dag::{Platform, critical_path_lower_bound, layered};
use ninf_scheduling::{Model, TaskGraph, by_name};
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

/// One graph read from a file, under the name it was read from.
pub struct NamedGraph {
    pub file: String,
    pub graph: TaskGraph,
}

/// One scheduler's schedule of one graph from a file.
#[derive(Debug, Clone, Serialize)]
pub struct FileResult {
    pub graph: String,
    pub scheduler: String,
    pub tasks: usize,
    pub edges: usize,
    /// `exclusive` or `shared` (see [`ninf_scheduling::Model`]).
    pub model: &'static str,
    /// The schedule's predicted makespan on the platform under `model`, seconds.
    pub makespan: f64,
    /// Wall-clock time to schedule the graph, milliseconds.
    pub schedule_ms: f64,
    /// Each task's server (by the platform's index) and predicted start, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts: Option<Vec<f64>>,
}

/// The model's name in results and on the command line.
pub fn model_name(model: Model) -> &'static str {
    match model {
        Model::Exclusive => "exclusive",
        Model::Shared => "shared",
    }
}

/// Every scheduler on every graph on one platform, under `model`.
pub fn run_files(
    graphs: &[NamedGraph],
    platform: &Platform,
    schedulers: &[String],
    model: Model,
    placements: bool,
) -> anyhow::Result<Vec<FileResult>> {
    let mut results = Vec::new();
    for named in graphs {
        for name in schedulers {
            let mut scheduler = by_name(name, 1).map_err(|e| anyhow::anyhow!("{e}"))?;
            let mut predictor = platform.predictor_for(model);
            let started = Instant::now();
            let schedule = scheduler
                .schedule(&named.graph, &platform.grid, predictor.as_mut())
                .map_err(|e| anyhow::anyhow!("{}: {name}: {e}", named.file))?;
            let schedule_ms = started.elapsed().as_secs_f64() * 1e3;
            results.push(FileResult {
                graph: named.file.clone(),
                scheduler: name.clone(),
                tasks: named.graph.tasks.len(),
                edges: named.graph.edges.len(),
                model: model_name(model),
                makespan: schedule.makespan,
                schedule_ms,
                starts: placements.then(|| schedule.timings.iter().map(|t| t.start).collect()),
                servers: placements.then_some(schedule.servers),
            });
        }
    }
    Ok(results)
}
