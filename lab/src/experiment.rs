//! `ninf experiment wan`: the metaserver paper's experiment on the wide-area testbed ([`crate::testbed`]).
//! The metaserver, the proxy and the client run in the client's site; a compute server runs
//! in each server site, each a real process of the shipped binaries. The client runs the
//! seed's workloads (5 dgefa/dgesl pairs; the 3-stage mmul cascade) through the proxy under
//! each scheduler, and reports per (scheduler, workload, n) what the seed's Tables 2-5 report,
//! plus the predictor's error per task.
//!
//! The client part (`ninf experiment-client`, hidden) is this same program started inside the
//! client's namespace; it prints one JSON object per result line, which this side collects.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::bed_grid::{Binaries, Settings, start_grid};
use crate::testbed::{Profile, Testbed};
use ninf_grid::workloads::{self, Summary, WorkloadRun};

#[derive(Debug, Clone)]
pub struct WanOptions {
    pub profile: String,
    pub schedulers: Vec<String>,
    pub workloads: Vec<String>,
    /// Matrix orders for every workload; `None`: the seed's ([`workloads::seed_sizes`]).
    pub sizes: Option<Vec<usize>>,
    pub trials: usize,
    /// Namespace prefix.
    pub prefix: String,
    /// Where `ninf-metaserver`, `ninf-proxy`, `ninf-server` and `ninf` are.
    pub bin_dir: PathBuf,
    /// Seconds to wait for the servers and their network measurements.
    pub settle_seconds: f64,
    /// The metaserver's predictor (`latest`, `forecast`, `capacity`).
    pub predictor: String,
    /// The metaserver's `calibrate`: whether predictions learn from the calls that ran.
    pub calibrate: bool,
}

/// One result line: the seed's measures plus the predictor's error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WanResult {
    pub profile: String,
    pub scheduler: String,
    pub workload: String,
    pub n: usize,
    pub trials: usize,
    pub exec_mean_s: f64,
    pub exec_sd_s: f64,
    pub comm_total_s: f64,
    pub comp_total_s: f64,
    pub server_ratio: std::collections::BTreeMap<String, f64>,
    pub inter_server_ratio: f64,
    /// Mean predicted makespan, and the mean relative error |predicted - actual| / actual of
    /// each task's finish time, counted from the graph's start.
    pub predicted_makespan_s: f64,
    pub task_time_error: f64,
    pub max_abs_error: f64,
    /// Each trial's execution time (s), in trial order: the spread behind the mean and sd.
    #[serde(default)]
    pub exec_trials_s: Vec<f64>,
    /// The median per-task and the mean per-graph relative error of the predictions
    /// ([`Summary`]'s).
    #[serde(default)]
    pub prediction_error_median: f64,
    #[serde(default)]
    pub graph_prediction_error: f64,
    /// The same errors for the best prediction the same for every trial
    /// ([`ninf_grid::workloads::spread_errors`]): the trials' own spread.
    #[serde(default)]
    pub spread_error_median: f64,
    #[serde(default)]
    pub graph_spread_error: f64,
}

impl WanResult {
    fn of(
        profile: &str,
        summary: &Summary,
        runs: &[WorkloadRun],
        sites: &[(String, String)],
    ) -> WanResult {
        let mut errors = Vec::new();
        for run in runs {
            for t in &run.plan.tasks {
                // Finish times from the graph's start: the proxy issues a task before its
                // inputs move, so a start time means different things on the two sides.
                if t.actual_finish > 0.0 {
                    errors.push(((t.predicted_finish - t.actual_finish) / t.actual_finish).abs());
                }
            }
        }
        // Servers by site name rather than address.
        let server_ratio = summary
            .server_ratio
            .iter()
            .map(|(address, share)| {
                let name = sites
                    .iter()
                    .find(|(_, a)| address.starts_with(a.as_str()))
                    .map_or(address.clone(), |(n, _)| n.clone());
                (name, *share)
            })
            .collect();
        WanResult {
            profile: profile.to_string(),
            scheduler: summary.scheduler.clone(),
            workload: summary.workload.clone(),
            n: summary.n,
            trials: summary.trials,
            exec_mean_s: summary.exec_s,
            exec_sd_s: summary.exec_sd_s,
            comm_total_s: summary.comm_total_s,
            comp_total_s: summary.comp_total_s,
            server_ratio,
            inter_server_ratio: summary.inter_server_ratio,
            predicted_makespan_s: summary.predicted_s,
            task_time_error: errors.iter().sum::<f64>() / errors.len().max(1) as f64,
            max_abs_error: summary.max_abs_error,
            exec_trials_s: runs.iter().map(|r| r.exec_seconds).collect(),
            prediction_error_median: summary.prediction_error_median,
            graph_prediction_error: summary.graph_prediction_error,
            spread_error_median: summary.spread_error_median,
            graph_spread_error: summary.graph_spread_error,
        }
    }
}

/// Builds the testbed, starts the grid in it, runs the client part, tears everything down.
pub fn run(options: &WanOptions) -> anyhow::Result<Vec<WanResult>> {
    let profile = Profile::load(&options.profile)?;
    let binaries = Binaries::find(&options.bin_dir)?;
    let bed = Testbed::new(&options.prefix, profile)
        .with_forwarder(&binaries.ninf)
        .up()?;
    let work = crate::bed_grid::work_dir("wan")?;
    let client = bed.profile.client().name.clone();
    // Measurements every 30 s with small probes, so monitoring does not crowd slow links
    // (the seed measured every 100 s).
    let metaserver_settings = format!(
        "heartbeat_seconds = 1.0\nheartbeat_timeout_seconds = 10.0\nnetwork_seconds = 30.0\npredictor = \"{}\"\ncalibrate = {}\n",
        options.predictor, options.calibrate
    );
    let grid = start_grid(
        &bed,
        &work,
        &binaries,
        &Settings {
            metaserver: &metaserver_settings,
            proxy: "probe_seconds = 30.0\nprobe_bytes = 262144\n",
            slowdown_factor: 1.0,
        },
    )?;
    let (metaserver, proxy) = (grid.metaserver.clone(), grid.proxy.clone());
    let servers = &grid.servers;
    let mut command = bed.command(&client, &binaries.ninf);
    command
        .arg("experiment-client")
        .args(["--proxy", &proxy, "--metaserver", &metaserver])
        .args(["--servers", &servers.len().to_string()])
        .args(["--schedulers", &options.schedulers.join(",")])
        .args(["--workloads", &options.workloads.join(",")])
        .args(["--trials", &options.trials.to_string()])
        .args(["--settle-seconds", &options.settle_seconds.to_string()])
        .args(["--profile", &bed.profile.name]);
    let sites: Vec<String> = bed
        .profile
        .servers()
        .map(|s| format!("{}={}", s.name, bed.address(&s.name)))
        .collect();
    command.args(["--sites", &sites.join(",")]);
    if let Some(sizes) = &options.sizes {
        let sizes: Vec<String> = sizes.iter().map(usize::to_string).collect();
        command.args(["--sizes", &sizes.join(",")]);
    }
    command.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let output = command.output().context("cannot run the client part")?;
    drop(grid);
    drop(bed);
    let _ = std::fs::remove_dir_all(&work);
    if !output.status.success() {
        bail!("the client part failed ({})", output.status);
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("bad result line `{l}`")))
        .collect()
}

/// What the client part is asked to do.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub proxy: String,
    pub metaserver: String,
    pub servers: usize,
    pub schedulers: Vec<String>,
    pub workloads: Vec<String>,
    /// Matrix orders for every workload; empty: the seed's.
    pub sizes: Vec<usize>,
    pub trials: usize,
    pub settle_seconds: f64,
    pub profile: String,
    /// (site, address) of each server.
    pub sites: Vec<(String, String)>,
}

/// What the metaserver knows, on standard error: each server's speed and each measured path.
fn describe(status: &ninf_proto::v1::GridStatus) {
    for server in &status.servers {
        eprintln!(
            "server {}: {:.1} MFLOPS x {} processors, load {:.2}",
            server.address, server.mflops, server.processors, server.load
        );
    }
    for path in &status.network {
        eprintln!(
            "path {} -> {}: {:.2} Mbit/s, {:.1} ms",
            path.from,
            path.to,
            path.throughput_bytes_per_second * 8e-6,
            path.latency_seconds * 1e3
        );
    }
}

/// Waits until `servers` servers are up and the network among them has been measured.
async fn settle(metaserver: &str, servers: usize, limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let status = async {
            let channel = ninf_proto::net::connect(
                metaserver,
                None,
                ninf_proto::net::ConnectionSettings::default(),
            )
            .await?;
            let reply = ninf_proto::v1::scheduling_client::SchedulingClient::new(channel)
                .status(ninf_proto::v1::StatusRequest {
                    recent_graphs: 0,
                    data: false,
                    ..Default::default()
                })
                .await?;
            anyhow::Ok(reply.into_inner())
        }
        .await;
        if let Ok(status) = status {
            let up = status.servers.iter().filter(|s| s.up).count();
            let measured = status.network.len();
            if up >= servers && measured >= servers * servers.saturating_sub(1) {
                describe(&status);
                return Ok(());
            }
        }
        if started.elapsed() > limit {
            bail!("the servers did not all register and measure their network within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The client part: runs inside the client's site and prints one result per line.
pub fn client(options: &ClientOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(settle(
        &options.metaserver,
        options.servers,
        Duration::from_secs_f64(options.settle_seconds.max(1.0)),
    ))?;
    drop(runtime);
    warm_up(options)?;
    for scheduler in &options.schedulers {
        let grid = ninf::grid::GridClient::connect(&options.proxy)?.with_scheduler(scheduler);
        for workload in &options.workloads {
            for n in sizes_of(options, workload) {
                let mut runs = Vec::with_capacity(options.trials);
                for trial in 0..options.trials as u64 {
                    runs.push(run_workload(&grid, workload, n, trial)?);
                }
                let summary = Summary::of(scheduler, workload, n, &runs);
                let result = WanResult::of(&options.profile, &summary, &runs, &options.sites);
                println!("{}", serde_json::to_string(&result)?);
            }
        }
    }
    Ok(())
}

/// One transaction of each workload at each size under the first scheduler, not reported,
/// as `ninf demo` runs: the first calls of a fresh grid pay for cold servers (connections,
/// executables, the proxy's first probes) and counted against whichever scheduler ran first.
/// On `paper-slow-ab` the first `flow` pairs took 2.7-3.3 s against 1.4-2.4 s for the next
/// two, and the metaserver predicted them with nothing learned yet.
fn warm_up(options: &ClientOptions) -> anyhow::Result<()> {
    let Some(first) = options.schedulers.first() else {
        return Ok(());
    };
    let grid = ninf::grid::GridClient::connect(&options.proxy)?.with_scheduler(first);
    for workload in &options.workloads {
        for n in sizes_of(options, workload) {
            run_workload(&grid, workload, n, u64::MAX / 2)?;
        }
    }
    Ok(())
}

/// The sizes to run `workload` at: the options' own, or the seed's.
fn sizes_of(options: &ClientOptions, workload: &str) -> Vec<usize> {
    if options.sizes.is_empty() {
        workloads::seed_sizes(workload).to_vec()
    } else {
        options.sizes.clone()
    }
}

/// Trial `trial` of `workload` at size `n`; each trial has its own data, the same under
/// every scheduler.
fn run_workload(
    grid: &ninf::grid::GridClient,
    workload: &str,
    n: usize,
    trial: u64,
) -> anyhow::Result<workloads::WorkloadRun> {
    Ok(match workload {
        "pairs" => workloads::pairs(grid, n, 5, 11u64.wrapping_add(trial))?,
        "cascade" => workloads::cascade(grid, n, 23u64.wrapping_add(trial))?,
        other => bail!("unknown workload `{other}` (pairs, cascade)"),
    })
}

/// The results as a markdown table shaped like the seed's Tables 2-5.
pub fn markdown(results: &[WanResult]) -> String {
    let mut out = String::from(
        "| scheduler | workload | n | exec mean (s) | exec sd (s) | comm total (s) | comp total (s) | server ratio | inter-server | predicted (s) | task time error |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in results {
        let ratio: Vec<String> = r
            .server_ratio
            .iter()
            .map(|(s, v)| format!("{s} {:.1}%", v * 100.0))
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1}% | {:.2} | {:.0}% |\n",
            r.scheduler,
            r.workload,
            r.n,
            r.exec_mean_s,
            r.exec_sd_s,
            r.comm_total_s,
            r.comp_total_s,
            ratio.join(" / "),
            r.inter_server_ratio * 100.0,
            r.predicted_makespan_s,
            r.task_time_error * 100.0
        ));
    }
    out
}

/// Execution time against n, one line per scheduler, for each workload: `DIR/wan-WORKLOAD.svg`.
pub fn plot(results: &[WanResult], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use ninf_sim::plot::{Chart, Series};
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut written = Vec::new();
    let mut workloads: Vec<&str> = results.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    workloads.sort_unstable();
    workloads.dedup();
    for workload in workloads {
        let mut schedulers: Vec<&str> = Vec::new();
        for r in results.iter().filter(|r| r.workload == workload) {
            if !schedulers.contains(&r.scheduler.as_str()) {
                schedulers.push(&r.scheduler);
            }
        }
        let chart = Chart {
            title: format!(
                "{workload}: execution time vs n ({})",
                results.first().map_or("", |r| r.profile.as_str())
            ),
            x_label: "n".into(),
            y_label: "mean execution time (s)".into(),
            series: schedulers
                .iter()
                .map(|s| Series {
                    name: s.to_string(),
                    points: results
                        .iter()
                        .filter(|r| r.workload == workload && r.scheduler == *s)
                        .map(|r| (r.n as f64, r.exec_mean_s))
                        .collect(),
                })
                .collect(),
        };
        let path = dir.join(format!("wan-{workload}.svg"));
        std::fs::write(&path, chart.svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

/// The metaserver paper's Tables 2 and 3: (n, exec mean, exec sd, comm total, comp total) for SIMPLE
/// and for FLOW, in seconds.
const PAPER_PAIRS: [(usize, [f64; 4], [f64; 4]); 4] = [
    (100, [14.84, 4.83, 16.80, 0.12], [8.74, 6.03, 5.54, 0.13]),
    (300, [25.75, 3.86, 52.96, 4.62], [16.71, 3.79, 25.02, 4.58]),
    (
        500,
        [64.19, 10.51, 137.98, 31.36],
        [35.77, 6.89, 70.73, 29.47],
    ),
    (
        700,
        [131.05, 14.13, 309.65, 90.19],
        [67.98, 11.35, 119.64, 102.90],
    ),
];
const PAPER_CASCADE: [(usize, [f64; 4], [f64; 4]); 3] = [
    (100, [7.83, 0.66, 7.84, 4.71], [8.68, 2.89, 6.91, 4.46]),
    (
        200,
        [41.13, 5.86, 35.06, 39.14],
        [33.11, 5.38, 24.51, 37.54],
    ),
    (
        300,
        [116.51, 7.12, 74.30, 155.14],
        [99.86, 13.65, 52.47, 149.85],
    ),
];
/// Tables 4 and 5: server A's share and the inter-server ratio, SIMPLE then FLOW.
const PAPER_RATIOS_PAIRS: [(f64, f64); 2] = [(0.728, 0.539), (0.728, 0.0)];
const PAPER_RATIOS_CASCADE: [(f64, f64); 2] = [(0.571, 0.617), (0.586, 0.200)];

/// Our results next to the metaserver paper's Tables 2-5, for the seed's own schedulers (`seed-simple`,
/// `seed-flow`) and every other scheduler run. Our times are multiplied by `speedup`, the
/// profile's, so they are in the modelled setting's seconds like the paper's.
pub fn paper_tables(results: &[WanResult], speedup: f64) -> String {
    let find = |scheduler: &str, workload: &str, n: usize| {
        results
            .iter()
            .find(|r| r.scheduler == scheduler && r.workload == workload && r.n == n)
    };
    let mut schedulers: Vec<&str> = Vec::new();
    for r in results {
        if !schedulers.contains(&r.scheduler.as_str()) {
            schedulers.push(&r.scheduler);
        }
    }
    let others: Vec<&str> = schedulers
        .iter()
        .copied()
        .filter(|s| *s != "seed-simple" && *s != "seed-flow")
        .collect();
    let time = |r: Option<&WanResult>, f: fn(&WanResult) -> f64| {
        r.map_or("–".to_string(), |r| format!("{:.2}", f(r) * speedup))
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
        _ => "–".to_string(),
    };
    let mut out = String::new();
    for (workload, title, paper) in [
        ("pairs", "Table 2 (pairs)", &PAPER_PAIRS[..]),
        ("cascade", "Table 3 (cascade)", &PAPER_CASCADE[..]),
    ] {
        if !results.iter().any(|r| r.workload == workload) {
            continue;
        }
        out.push_str(&format!(
            "{title}: execution time mean / sd (s), ours ×{speedup}\n\n| n | paper SIMPLE | paper FLOW | paper FLOW/SIMPLE | seed-simple | seed-flow | FLOW/SIMPLE |"
        ));
        for s in &others {
            out.push_str(&format!(" {s} | {s}/seed-flow |"));
        }
        out.push_str("\n|---|---|---|---|---|---|---|");
        out.push_str(&"---|---|".repeat(others.len()));
        out.push('\n');
        for &(n, simple, flow) in paper {
            let (ours_simple, ours_flow) = (
                find("seed-simple", workload, n),
                find("seed-flow", workload, n),
            );
            let with_sd = |r: Option<&WanResult>| {
                r.map_or("–".to_string(), |r| {
                    format!(
                        "{:.2} / {:.2}",
                        r.exec_mean_s * speedup,
                        r.exec_sd_s * speedup
                    )
                })
            };
            out.push_str(&format!(
                "| {n} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} | {} | {} | {} |",
                simple[0],
                simple[1],
                flow[0],
                flow[1],
                flow[0] / simple[0],
                with_sd(ours_simple),
                with_sd(ours_flow),
                ratio(
                    ours_flow.map(|r| r.exec_mean_s),
                    ours_simple.map(|r| r.exec_mean_s)
                ),
            ));
            for s in &others {
                let r = find(s, workload, n);
                out.push_str(&format!(
                    " {} | {} |",
                    with_sd(r),
                    ratio(r.map(|r| r.exec_mean_s), ours_flow.map(|r| r.exec_mean_s))
                ));
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "\n{title}: total communication / computation time (s), ours ×{speedup}\n\n| n | paper SIMPLE comm | ours | paper FLOW comm | ours | paper SIMPLE comp | ours | paper FLOW comp | ours |\n|---|---|---|---|---|---|---|---|---|\n"
        ));
        for &(n, simple, flow) in paper {
            let (s, f) = (
                find("seed-simple", workload, n),
                find("seed-flow", workload, n),
            );
            out.push_str(&format!(
                "| {n} | {:.2} | {} | {:.2} | {} | {:.2} | {} | {:.2} | {} |\n",
                simple[2],
                time(s, |r| r.comm_total_s),
                flow[2],
                time(f, |r| r.comm_total_s),
                simple[3],
                time(s, |r| r.comp_total_s),
                flow[3],
                time(f, |r| r.comp_total_s),
            ));
        }
        out.push('\n');
    }
    out.push_str(&ratio_tables(results, &schedulers));
    out
}

/// Tables 4 and 5: the seed gives pairs over all sizes and the cascade at n = 300.
fn ratio_tables(results: &[WanResult], schedulers: &[&str]) -> String {
    let mut out = String::new();
    for (workload, title, paper, only) in [
        (
            "pairs",
            "Table 4 (pairs, all n)",
            PAPER_RATIOS_PAIRS,
            None::<usize>,
        ),
        (
            "cascade",
            "Table 5 (cascade, n = 300)",
            PAPER_RATIOS_CASCADE,
            Some(300),
        ),
    ] {
        let chosen: Vec<&WanResult> = results
            .iter()
            .filter(|r| r.workload == workload && only.is_none_or(|n| r.n == n))
            .collect();
        if chosen.is_empty() {
            continue;
        }
        out.push_str(&format!(
            "{title}: server A's share of invocations, share of inter-server edges\n\n| scheduler | A | inter-server |\n|---|---|---|\n| paper SIMPLE | {:.1}% | {:.1}% |\n| paper FLOW | {:.1}% | {:.1}% |\n",
            paper[0].0 * 100.0,
            paper[0].1 * 100.0,
            paper[1].0 * 100.0,
            paper[1].1 * 100.0
        ));
        for s in schedulers {
            let rows: Vec<&&WanResult> = chosen.iter().filter(|r| r.scheduler == *s).collect();
            if rows.is_empty() {
                continue;
            }
            let count = rows.len() as f64;
            let a = rows
                .iter()
                .map(|r| r.server_ratio.get("a").copied().unwrap_or(0.0))
                .sum::<f64>()
                / count;
            let inter = rows.iter().map(|r| r.inter_server_ratio).sum::<f64>() / count;
            out.push_str(&format!(
                "| {s} | {:.1}% | {:.1}% |\n",
                a * 100.0,
                inter * 100.0
            ));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use ninf::grid::{Plan, TaskPlan};

    fn result(
        scheduler: &str,
        workload: &str,
        n: usize,
        exec: f64,
        a: f64,
        inter: f64,
    ) -> WanResult {
        WanResult {
            profile: "paper".into(),
            scheduler: scheduler.into(),
            workload: workload.into(),
            n,
            trials: 10,
            exec_mean_s: exec,
            exec_sd_s: 0.5,
            comm_total_s: 2.0,
            comp_total_s: 1.0,
            server_ratio: [("a".to_string(), a), ("b".to_string(), 1.0 - a)].into(),
            inter_server_ratio: inter,
            predicted_makespan_s: exec,
            task_time_error: 0.1,
            max_abs_error: 0.0,
            exec_trials_s: vec![exec],
            prediction_error_median: 0.1,
            graph_prediction_error: 0.1,
            spread_error_median: 0.05,
            graph_spread_error: 0.05,
        }
    }

    #[test]
    fn paper_tables_put_our_ratios_next_to_the_seeds() {
        let results = vec![
            result("seed-simple", "pairs", 700, 20.0, 0.8, 0.4),
            result("seed-flow", "pairs", 700, 10.0, 0.8, 0.0),
            result("search", "pairs", 700, 9.0, 0.6, 0.0),
            result("seed-simple", "pairs", 100, 4.0, 0.6, 0.2),
            result("seed-simple", "cascade", 300, 8.0, 0.5, 0.5),
            result("seed-flow", "cascade", 300, 6.0, 0.75, 1.0 / 6.0),
        ];
        let text = paper_tables(&results, 5.0);
        // n = 700: ours ×5 with sd, FLOW/SIMPLE 10/20, search over seed-flow 9/10.
        assert!(
            text.contains(
                "| 700 | 131.05 / 14.13 | 67.98 / 11.35 | 0.52 | 100.00 / 2.50 | 50.00 / 2.50 | 0.50 | 45.00 / 2.50 | 0.90 |"
            ),
            "{text}"
        );
        // A size that one scheduler did not run shows a dash, not a made-up number.
        assert!(
            text.contains(
                "| 100 | 14.84 / 4.83 | 8.74 / 6.03 | 0.59 | 20.00 / 2.50 | – | – | – | – |"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "| 700 | 309.65 | 10.00 | 119.64 | 10.00 | 90.19 | 5.00 | 102.90 | 5.00 |"
            ),
            "{text}"
        );
        // Table 4 averages every size: seed-simple A (0.8 + 0.6) / 2, split (0.4 + 0.2) / 2.
        assert!(text.contains("| seed-simple | 70.0% | 30.0% |"), "{text}");
        assert!(text.contains("| paper SIMPLE | 72.8% | 53.9% |"), "{text}");
        // Table 5 is the cascade at n = 300 only.
        assert!(text.contains("| seed-flow | 75.0% | 16.7% |"), "{text}");
        assert!(text.contains("| paper FLOW | 58.6% | 20.0% |"), "{text}");
    }

    fn task(server: &str, predicted: f64, actual: (f64, f64), compute: f64) -> TaskPlan {
        TaskPlan {
            label: "t".into(),
            function: "f".into(),
            server: server.into(),
            predicted_start: 0.0,
            predicted_finish: predicted,
            actual_start: actual.0,
            actual_finish: actual.1,
            compute_seconds: compute,
            queue_seconds: 0.5,
            ..TaskPlan::default()
        }
    }

    #[test]
    fn results_count_shares_times_and_prediction_errors_from_the_trace() {
        // Two trials of a two-task graph. Trial 1: both on A, 4 s; trial 2: split, 6 s,
        // after uploads ahead of the calls that took 0.6 s.
        let run = |servers: [&str; 2], exec: f64, inter: f64, uploads: f64| WorkloadRun {
            plan: Plan {
                tasks: vec![
                    task(servers[0], 2.0, (0.0, 4.0), 1.0),
                    task(servers[1], 3.0, (1.0, 2.0), 0.2),
                ],
                inter_server_ratio: inter,
                predicted_makespan: 3.5,
                staged_upload_seconds: uploads,
                ..Plan::default()
            },
            exec_seconds: exec,
            max_abs_error: 0.0,
        };
        let runs = vec![
            run(["10.77.2.2:7001", "10.77.2.2:7001"], 4.0, 0.0, 0.0),
            run(["10.77.2.2:7001", "10.77.3.2:7001"], 6.0, 1.0, 0.6),
        ];
        let summary = Summary::of("flow", "pairs", 100, &runs);
        assert_eq!(summary.exec_s, 5.0);
        assert_eq!(summary.exec_sd_s, 1.0);
        // Communication: (4 - 1 - 0.5) + (1 - 0.2 - 0.5) per trial, plus the uploads'
        // 0.6 s of the second (0.3 on average); computation 1.2.
        assert!((summary.comm_total_s - 3.1).abs() < 1e-12);
        assert!((summary.comp_total_s - 1.2).abs() < 1e-12);
        assert_eq!(summary.inter_server_ratio, 0.5);
        let sites = [
            ("a".to_string(), "10.77.2.2".to_string()),
            ("b".to_string(), "10.77.3.2".to_string()),
        ];
        let result = WanResult::of("paper", &summary, &runs, &sites);
        assert_eq!(result.server_ratio["a"], 0.75);
        assert_eq!(result.server_ratio["b"], 0.25);
        // Finish errors: |2 - 4| / 4 and |3 - 2| / 2, in both trials.
        assert!((result.task_time_error - 0.5).abs() < 1e-12);
        assert_eq!(result.predicted_makespan_s, 3.5);
        assert_eq!(result.exec_trials_s, vec![4.0, 6.0]);
    }
}
