//! `ninf experiment wan`: seed 004's experiment on the wide-area testbed ([`crate::testbed`]).
//! The metaserver, the proxy and the client run in the client's site; a compute server runs
//! in each server site, each a real process of the shipped binaries. The client runs the
//! seed's workloads (5 dgefa/dgesl pairs; the 3-stage mmul cascade) through the proxy under
//! each scheduler, and reports per (scheduler, workload, n) what the seed's Tables 2-5 report,
//! plus the predictor's error per task.
//!
//! The client part (`ninf experiment-client`, hidden) is this same program started inside the
//! client's namespace; it prints one JSON object per result line, which this side collects.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

use crate::testbed::{Profile, Testbed};
use crate::workloads::{self, Summary, WorkloadRun};

/// Ports inside the sites.
const METASERVER_PORT: u16 = 7000;
const PROXY_PORT: u16 = 7100;
const SERVER_PORT: u16 = 7001;

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
        }
    }
}

/// A child process killed when dropped.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` and waits for its "listening on" line.
fn start(mut command: std::process::Command, what: &str) -> anyhow::Result<Started> {
    command.stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start the {what}"))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let started = Started(child);
    match lines.next() {
        Some(Ok(line)) if line.starts_with("listening on") => Ok(started),
        other => bail!("the {what} did not start (first line: {other:?})"),
    }
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Builds the testbed, starts the grid in it, runs the client part, tears everything down.
pub fn run(options: &WanOptions) -> anyhow::Result<Vec<WanResult>> {
    let profile = Profile::load(&options.profile)?;
    let bin = |name: &str| -> anyhow::Result<PathBuf> {
        let path = options.bin_dir.join(name);
        if !path.exists() {
            bail!(
                "{} is missing; build the binaries first (cargo build --release --workspace --bins)",
                path.display()
            );
        }
        Ok(path)
    };
    let (metaserver_bin, proxy_bin, server_bin, ninf_bin) = (
        bin("ninf-metaserver")?,
        bin("ninf-proxy")?,
        bin("ninf-server")?,
        bin("ninf")?,
    );
    let bed = Testbed::new(&options.prefix, profile).up()?;
    let work = std::env::temp_dir().join(format!("ninf-wan-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let client = bed.profile.client().name.clone();
    let client_address = bed.address(&client);
    let metaserver = format!("{client_address}:{METASERVER_PORT}");
    let proxy = format!("{client_address}:{PROXY_PORT}");
    // Measurements every 30 s with small probes, so monitoring does not crowd slow links
    // (the seed measured every 100 s).
    write(
        &work.join("metaserver.toml"),
        &format!(
            "listen = \"{metaserver}\"\ndata_dir = \"{}\"\nheartbeat_seconds = 1.0\nheartbeat_timeout_seconds = 10.0\nnetwork_seconds = 30.0\n",
            work.join("metaserver").display()
        ),
    )?;
    write(
        &work.join("proxy.toml"),
        &format!(
            "listen = \"{proxy}\"\nmetaserver = \"{metaserver}\"\nprobe_seconds = 30.0\nprobe_bytes = 262144\n"
        ),
    )?;
    let mut running = Vec::new();
    let mut command = bed.command(&client, &metaserver_bin);
    command.arg("--config").arg(work.join("metaserver.toml"));
    running.push(start(command, "metaserver")?);
    let mut command = bed.command(&client, &proxy_bin);
    command.arg("--config").arg(work.join("proxy.toml"));
    running.push(start(command, "proxy")?);
    let servers: Vec<(String, u32, f64)> = bed
        .profile
        .servers()
        .map(|s| (s.name.clone(), s.processors, bed.profile.slowdown(s)))
        .collect();
    for (name, processors, slowdown) in &servers {
        let address = format!("{}:{SERVER_PORT}", bed.address(name));
        let config = work.join(format!("server-{name}.toml"));
        write(
            &config,
            &format!(
                "listen = \"{address}\"\nmetaserver = \"{metaserver}\"\nprocessors = {processors}\nprobe_bytes = 262144\ncpu_slowdown = {slowdown:?}\n"
            ),
        )?;
        let mut command = bed.command(name, &server_bin);
        command.arg("--config").arg(&config);
        running.push(start(command, &format!("server in site {name}"))?);
    }
    let mut command = bed.command(&client, &ninf_bin);
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
    drop(running);
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
            let channel = tonic::transport::Channel::from_shared(format!("http://{metaserver}"))?
                .connect()
                .await?;
            let reply = ninf_proto::v1::scheduling_client::SchedulingClient::new(channel)
                .status(ninf_proto::v1::StatusRequest { recent_graphs: 0 })
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
    for scheduler in &options.schedulers {
        let grid = ninf::grid::GridClient::connect(&options.proxy)?.with_scheduler(scheduler);
        for workload in &options.workloads {
            let sizes = if options.sizes.is_empty() {
                workloads::seed_sizes(workload).to_vec()
            } else {
                options.sizes.clone()
            };
            for n in sizes {
                let mut runs = Vec::with_capacity(options.trials);
                for trial in 0..options.trials as u64 {
                    let run = match workload.as_str() {
                        "pairs" => workloads::pairs(&grid, n, 5, 11 + trial)?,
                        "cascade" => workloads::cascade(&grid, n, 23 + trial)?,
                        other => bail!("unknown workload `{other}` (pairs, cascade)"),
                    };
                    runs.push(run);
                }
                let summary = Summary::of(scheduler, workload, n, &runs);
                let result = WanResult::of(&options.profile, &summary, &runs, &options.sites);
                println!("{}", serde_json::to_string(&result)?);
            }
        }
    }
    Ok(())
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
