//! `ninf load`: many client programs at once through one proxy, on a grid of real processes
//! (a metaserver, the proxy and compute servers on loopback). Each client is its own
//! identity at the proxy, as separate programs are, and runs its transactions (the seed's
//! cascade) one after another, each checked bit for bit against the routines run locally.
//! Reports the latency percentiles, the throughput, and the proxy's resident memory before
//! and after the run: a proxy that keeps something of every transaction grows.

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use ninf::grid::GridClient;
use ninf_proto::sync::lock;
use serde::Serialize;

use crate::processes::{binary, free_address, start, write};
use crate::workloads;

/// How long the proxy is left idle before its memory is read: it closes its idle
/// connections after `idle_connection_seconds` (5) and trims its heap a second later.
const SETTLE: Duration = Duration::from_secs(10);

/// What the load run does.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where `ninf-metaserver`, `ninf-proxy` and `ninf-server` are.
    pub bin_dir: std::path::PathBuf,
    /// Client programs at once, each with its own identity.
    pub clients: usize,
    /// Transactions each client runs, one after another, per round.
    pub transactions: usize,
    /// Rounds of the whole load, the proxy's memory read after each: memory that grows
    /// round after round is kept per transaction; memory that stays is the heap's
    /// high-water mark.
    pub rounds: usize,
    /// Order of the cascade's matrices.
    pub n: usize,
    pub servers: usize,
    /// The metaserver's resource DB; `None`: SQLite.
    pub database_url: Option<String>,
    /// The proxy's `journal` (a SQLite path, a `postgres://` URL, or `off`); `None`: the
    /// proxy's default, a SQLite file beside its configuration.
    pub proxy_journal: Option<String>,
    /// The metaserver's `calibrate`.
    pub calibrate: bool,
    /// The metaserver's `templates`.
    pub templates: bool,
    /// The metaserver's `predictor`; `None`: its default.
    pub predictor: Option<String>,
    /// The proxy's `max_running_transactions` (0: no limit).
    pub max_running: usize,
    /// A transaction unanswered this long stops the run with an error naming it, and the
    /// grid's files are kept for a look: a hang in the grid is a bug to see, not a wait.
    pub stall: Duration,
}

/// What happened.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LoadReport {
    pub clients: usize,
    /// The proxy's `max_running_transactions` (0: no limit).
    pub max_running_transactions: usize,
    pub transactions: usize,
    pub completed: usize,
    pub failed: usize,
    pub mismatched: usize,
    pub p50_seconds: f64,
    pub p99_seconds: f64,
    pub max_seconds: f64,
    pub transactions_per_second: f64,
    /// The metaserver's predictions against what happened, over the completed transactions
    /// ([`workloads::prediction_errors`]): per task (median) and per graph (mean).
    pub prediction_error_median: f64,
    pub graph_prediction_error: f64,
    /// The metaserver's placement of a graph as the proxy saw it (its schedule request to
    /// the reply; `RunReply.schedule_seconds`), over the completed transactions.
    pub schedule_p50_seconds: f64,
    pub schedule_p99_seconds: f64,
    /// The proxy's resident memory once the grid is up, and after each round.
    pub proxy_rss_before_bytes: u64,
    pub proxy_rss_after_bytes: Vec<u64>,
    /// Bytes the servers still store after the run.
    pub leaked_bytes: u64,
    pub seconds: f64,
    /// The first few errors.
    pub errors: Vec<String>,
}

/// Runs the load. Blocking. A run that stalls keeps the grid's files (configurations, the
/// metaserver's database, the proxy's journal) and says where.
pub fn run(options: &LoadOptions) -> anyhow::Result<LoadReport> {
    let work = std::env::temp_dir().join(format!("ninf-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let outcome = run_in(options, &work);
    match outcome {
        Err(e) if e.is::<Stalled>() => {
            Err(e.context(format!("the grid's files are kept in {}", work.display())))
        }
        outcome => {
            let _ = std::fs::remove_dir_all(&work);
            outcome
        }
    }
}

/// Transactions that went unanswered for longer than the run allows.
#[derive(Debug, thiserror::Error)]
#[error("the run stalled: {}", describe_stalled(.0))]
pub struct Stalled(pub Vec<StalledTransaction>);

/// One transaction a client still waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct StalledTransaction {
    pub client: usize,
    /// Its place among the client's transactions (from 0).
    pub transaction: usize,
    pub waited: Duration,
}

fn describe_stalled(stalled: &[StalledTransaction]) -> String {
    stalled
        .iter()
        .map(|s| {
            format!(
                "client {}, transaction {} unanswered after {:.1} s",
                s.client,
                s.transaction,
                s.waited.as_secs_f64()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Per client, the transaction it waits for (its place among the client's) and since when.
type Waiting = Vec<Option<(usize, Instant)>>;

/// The transactions of `running` that have waited at least `limit` at `now`.
fn stalled(
    running: &[Option<(usize, Instant)>],
    now: Instant,
    limit: Duration,
) -> Vec<StalledTransaction> {
    running
        .iter()
        .enumerate()
        .filter_map(|(client, current)| {
            let (transaction, began) = (*current)?;
            let waited = now.saturating_duration_since(began);
            (waited >= limit).then_some(StalledTransaction {
                client,
                transaction,
                waited,
            })
        })
        .collect()
}

fn run_in(options: &LoadOptions, work: &Path) -> anyhow::Result<LoadReport> {
    let bin = |name: &str| binary(&options.bin_dir, name);
    let metaserver = free_address()?;
    let proxy = free_address()?;
    let database = options
        .database_url
        .as_ref()
        .map(|url| format!("database_url = \"{url}\"\n"))
        .unwrap_or_default();
    let predictor = options
        .predictor
        .as_ref()
        .map(|p| format!("predictor = \"{p}\"\n"))
        .unwrap_or_default();
    write(
        &work.join("metaserver.toml"),
        &format!(
            "listen = \"{metaserver}\"\ndata_dir = \"{}\"\ncalibrate = {}\ntemplates = {}\n{database}{predictor}",
            work.join("metaserver").display(),
            options.calibrate,
            options.templates
        ),
    )?;
    let journal = options
        .proxy_journal
        .as_ref()
        .map(|j| format!("journal = \"{j}\"\n"))
        .unwrap_or_default();
    write(
        &work.join("proxy.toml"),
        &format!(
            "listen = \"{proxy}\"\nmetaserver = \"{metaserver}\"\n{journal}\
             max_running_transactions = {}\n",
            options.max_running
        ),
    )?;
    let mut command = Command::new(bin("ninf-metaserver")?);
    command.arg("--config").arg(work.join("metaserver.toml"));
    let _metaserver = start(command, "metaserver")?;
    let mut servers = Vec::new();
    let mut addresses = Vec::new();
    for i in 0..options.servers.max(1) {
        let address = free_address()?;
        let config = work.join(format!("server-{i}.toml"));
        write(
            &config,
            &format!(
                "listen = \"{address}\"\nmetaserver = \"{metaserver}\"\nprocessors = 1\n{}",
                ninf_compute_server::gang::cores::config_section(i)
            ),
        )?;
        let mut command = Command::new(bin("ninf-server")?);
        command.arg("--config").arg(&config);
        servers.push(start(command, &format!("server {i}"))?);
        addresses.push(address);
    }
    let mut command = Command::new(bin("ninf-proxy")?);
    command.arg("--config").arg(work.join("proxy.toml"));
    let proxy_process = start(command, "proxy")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(crate::chaos::wait_until_up(&metaserver, addresses.len()))?;
    // One transaction first, so that the proxy's connections and caches are made before
    // its memory is read.
    let warm = GridClient::connect(&proxy)?;
    workloads::cascade(&warm, options.n, 1)?;
    drop(warm);
    // Memory is read once the proxy has been idle long enough to give back what it freed
    // (`ninf_client_proxy::memory`).
    std::thread::sleep(SETTLE);
    let rss_before = resident_bytes(proxy_process.0.id())?;

    let started = Instant::now();
    let mut report = LoadReport::default();
    let mut latencies = Vec::new();
    let mut runs = Vec::new();
    for _ in 0..options.rounds.max(1) {
        let round = run_clients(&proxy, options, &mut latencies, &mut runs)?;
        report.merge(round);
        // The proxy's clean-ups (deletes) end, and it falls idle.
        std::thread::sleep(SETTLE);
        report
            .proxy_rss_after_bytes
            .push(resident_bytes(proxy_process.0.id())?);
    }
    report.seconds = started.elapsed().as_secs_f64();
    let run_seconds =
        report.seconds - SETTLE.as_secs_f64() * report.proxy_rss_after_bytes.len() as f64;
    report.transactions_per_second = report.completed as f64 / run_seconds.max(1e-9);
    latencies.sort_by(f64::total_cmp);
    report.clients = options.clients.max(1);
    report.max_running_transactions = options.max_running;
    report.p50_seconds = percentile(&latencies, 0.50);
    report.p99_seconds = percentile(&latencies, 0.99);
    report.max_seconds = latencies.last().copied().unwrap_or(0.0);
    (
        report.prediction_error_median,
        report.graph_prediction_error,
    ) = workloads::prediction_errors(&runs);
    let mut placing: Vec<f64> = runs.iter().map(|r| r.plan.schedule_seconds).collect();
    placing.sort_by(f64::total_cmp);
    report.schedule_p50_seconds = percentile(&placing, 0.50);
    report.schedule_p99_seconds = percentile(&placing, 0.99);
    report.proxy_rss_before_bytes = rss_before;
    report.leaked_bytes = runtime.block_on(crate::chaos::stored_bytes(&addresses))?;
    Ok(report)
}

impl LoadReport {
    /// Adds a round's counts.
    fn merge(&mut self, round: LoadReport) {
        self.transactions += round.transactions;
        self.completed += round.completed;
        self.failed += round.failed;
        self.mismatched += round.mismatched;
        for e in round.errors {
            if self.errors.len() < 5 {
                self.errors.push(e);
            }
        }
    }
}

/// One round: the clients, each a thread with its own connection and identity; their
/// latencies are added to `all_latencies` and their completed runs to `all_runs`. Fails
/// with [`Stalled`] once a transaction has waited `options.stall`; its client's thread is
/// left blocked, and ends with the process.
fn run_clients(
    proxy: &str,
    options: &LoadOptions,
    all_latencies: &mut Vec<f64>,
    all_runs: &mut Vec<workloads::WorkloadRun>,
) -> anyhow::Result<LoadReport> {
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let runs: Arc<Mutex<Vec<workloads::WorkloadRun>>> = Arc::default();
    let report: Arc<Mutex<LoadReport>> = Arc::default();
    let running: Arc<Mutex<Waiting>> = Arc::new(Mutex::new(vec![None; options.clients.max(1)]));
    let clients: Vec<_> = (0..options.clients.max(1))
        .map(|client| {
            let (latencies, report, proxy) = (latencies.clone(), report.clone(), proxy.to_string());
            let (runs, running) = (runs.clone(), running.clone());
            let (count, n) = (options.transactions, options.n);
            std::thread::spawn(move || {
                let grid = match GridClient::connect(&proxy) {
                    Ok(grid) => grid,
                    Err(e) => {
                        let mut r = lock(&report);
                        r.failed += count;
                        r.errors
                            .push(format!("client {client} cannot connect: {e}"));
                        return;
                    }
                };
                for i in 0..count {
                    let seed = (client * count + i) as u64 + 2;
                    let began = Instant::now();
                    lock(&running)[client] = Some((i, began));
                    let outcome = workloads::cascade(&grid, n, seed);
                    lock(&running)[client] = None;
                    let seconds = began.elapsed().as_secs_f64();
                    let mut r = lock(&report);
                    match outcome {
                        Ok(run) if run.max_abs_error == 0.0 => {
                            r.completed += 1;
                            lock(&latencies).push(seconds);
                            lock(&runs).push(run);
                        }
                        Ok(_) => r.mismatched += 1,
                        Err(e) => {
                            r.failed += 1;
                            if r.errors.len() < 5 {
                                r.errors
                                    .push(format!("client {client}, transaction {i}: {e}"));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    while !clients.iter().all(std::thread::JoinHandle::is_finished) {
        std::thread::sleep(Duration::from_millis(100));
        let stuck = stalled(&lock(&running), Instant::now(), options.stall);
        if !stuck.is_empty() {
            return Err(Stalled(stuck).into());
        }
    }
    for client in clients {
        let _ = client.join();
    }
    let mut report = lock(&report).clone();
    all_latencies.extend(lock(&latencies).iter());
    all_runs.append(&mut lock(&runs));
    report.transactions = options.clients.max(1) * options.transactions;
    Ok(report)
}

/// The `q` quantile of sorted values (nearest rank); 0 when there are none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A process's resident memory, from `/proc/PID/status`.
pub fn resident_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read the memory of process {pid}"))?;
    let kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .context("no VmRSS line")?;
    Ok(kib * 1024)
}

/// The report as text.
pub fn render(report: &LoadReport) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = format!(
        "clients          {}\ntransactions     {}\ncompleted        {}\nfailed           {}\nmismatched       {}\nlatency p50      {:.3} s\nlatency p99      {:.3} s\nlatency max      {:.3} s\nthroughput       {:.1} transactions/s\npredictions      {:.0}% off per task (median), {:.0}% per graph (mean)\nplacement        {:.1} ms p50, {:.1} ms p99 (the metaserver's, as the proxy saw it)\nproxy memory     {:.1} MiB before, after each round: {} MiB\nleaked_bytes     {}\nseconds          {:.1}\n",
        report.clients,
        report.transactions,
        report.completed,
        report.failed,
        report.mismatched,
        report.p50_seconds,
        report.p99_seconds,
        report.max_seconds,
        report.transactions_per_second,
        report.prediction_error_median * 100.0,
        report.graph_prediction_error * 100.0,
        report.schedule_p50_seconds * 1e3,
        report.schedule_p99_seconds * 1e3,
        mib(report.proxy_rss_before_bytes),
        report
            .proxy_rss_after_bytes
            .iter()
            .map(|&b| format!("{:.1}", mib(b)))
            .collect::<Vec<_>>()
            .join(", "),
        report.leaked_bytes,
        report.seconds,
    );
    for e in &report.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transaction_waited_for_past_the_limit_is_named_and_others_are_not() {
        let start = Instant::now();
        let running = [
            Some((3, start)),
            None,
            Some((7, start + Duration::from_secs(50))),
        ];
        let now = start + Duration::from_secs(60);
        assert!(stalled(&running, now, Duration::from_secs(61)).is_empty());
        let stuck = stalled(&running, now, Duration::from_secs(60));
        assert_eq!(
            stuck,
            [StalledTransaction {
                client: 0,
                transaction: 3,
                waited: Duration::from_secs(60)
            }]
        );
        assert_eq!(
            Stalled(stuck).to_string(),
            "the run stalled: client 0, transaction 3 unanswered after 60.0 s"
        );
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), 50.0);
        assert_eq!(percentile(&values, 0.99), 99.0);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
