//! `ninf chaos`: a grid of real processes (a metaserver, a proxy and three compute servers on
//! loopback) runs a stream of transactions, the seed's cascades and dgefa/dgesl pairs at mixed
//! sizes, while one compute server after another is killed with SIGKILL and restarted on the
//! same address (and every few faults the metaserver instead, restarted on its database).
//! With two or more metaservers they share one PostgreSQL (a private cluster unless a
//! `database_url` is given), and a metaserver fault SIGKILLs the active one: a standby takes
//! over while the killed one comes back as a standby. A proxy fault SIGKILLs the proxy and
//! restarts it on its journal: its clients send their transactions again and it finishes
//! them from what the servers still hold. Every transaction must complete with
//! results equal bit for bit to the same routines run locally, and afterwards no server may
//! hold a byte of anyone's intermediates and no executable of a killed server may outlive it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ninf::grid::GridClient;
use ninf_proto::sync::lock;
use ninf_proto::v1;
use serde::Serialize;

use crate::processes::{Started, binary, free_address, start, write};
use crate::workloads;

/// What the chaos run does.
#[derive(Debug, Clone)]
pub struct ChaosOptions {
    /// Where `ninf-metaserver`, `ninf-proxy` and `ninf-server` are.
    pub bin_dir: PathBuf,
    /// Transactions at least; more, up to [`MORE_TRANSACTIONS`] times as many, until every
    /// kind of fault asked for has happened and the process is back.
    pub transactions: usize,
    /// Transactions in flight at once.
    pub concurrency: usize,
    /// Seconds between kills.
    pub kill_every_seconds: f64,
    /// Seconds a killed server stays down before it is restarted.
    pub down_seconds: f64,
    /// Emulated processor slowdown of the servers, so that calls last long enough to be hit.
    pub cpu_slowdown: f64,
    /// Every this many faults, the metaserver is killed instead of a server (0: never; 1:
    /// only metaservers are killed).
    pub metaserver_every: usize,
    /// Every this many faults, the proxy is killed (before a metaserver is considered; 0:
    /// never; 1: only the proxy is killed).
    pub proxy_every: usize,
    /// Metaservers: 1 on SQLite; 2 or more share a PostgreSQL, one active at a time.
    pub metaservers: usize,
    /// The PostgreSQL the metaservers share; `None`: a private cluster for the run.
    pub database_url: Option<String>,
    /// The proxy's `suspect_seconds` (0: each graph learns of a failure by itself).
    pub suspect_seconds: f64,
    /// The proxy's `same_host_calls`.
    pub same_host_calls: bool,
}

/// How many times `transactions` a run may send while it waits for the faults it asked for.
pub const MORE_TRANSACTIONS: usize = 10;

/// What happened.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ChaosReport {
    /// Transactions sent: at least those asked for, more if the faults came late.
    pub transactions: usize,
    pub completed: usize,
    pub faults_injected: usize,
    /// Of the faults, metaserver kills.
    pub metaserver_restarts: usize,
    /// Of the faults, proxy kills.
    pub proxy_restarts: usize,
    /// Tasks the restarted proxy did not run again: their outputs had survived.
    pub resumed_tasks: u64,
    /// Metaservers in the run (with 2 or more, each kill is of the active one).
    pub metaservers: usize,
    pub tasks_retried: u64,
    pub regenerated: u64,
    /// Transactions that failed.
    pub lost: usize,
    /// Transactions whose results differ from the local computation.
    pub mismatched: usize,
    /// Bytes the servers still store after the last transaction, plus spill files.
    pub leaked_bytes: u64,
    /// Data handles the metaserver still records after the last transaction (each data
    /// transaction frees its handle, whatever happened to it).
    pub handles_left: usize,
    /// Executables of killed servers still alive at the end.
    pub leaked_processes: usize,
    pub seconds: f64,
    /// The first few errors of lost transactions, and which transactions came back wrong.
    pub errors: Vec<String>,
}

impl ChaosReport {
    /// Nothing was lost, wrong or left behind.
    pub fn clean(&self) -> bool {
        self.completed == self.transactions
            && self.lost == 0
            && self.mismatched == 0
            && self.leaked_bytes == 0
            && self.handles_left == 0
            && self.leaked_processes == 0
    }
}

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                // The fields after the command name (which may hold spaces) start at ") ".
                .and_then(|s| {
                    let rest = s.rsplit_once(") ")?.1.to_string();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its entry is left for its parent to reap.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// A process of the chaos grid that is killed and restarted: its configuration and, while it
/// runs, its process.
struct ChaosServer {
    address: String,
    config: PathBuf,
    /// Where a compute server spills objects (the metaserver has none).
    spill_dir: Option<PathBuf>,
    process: Option<Started>,
}

impl ChaosServer {
    fn start(&mut self, binary: &Path) -> anyhow::Result<()> {
        let mut command = Command::new(binary);
        command.arg("--config").arg(&self.config);
        self.process = Some(start(command, &format!("server {}", self.address))?);
        Ok(())
    }

    /// SIGKILLs the server; returns the executables it had running.
    fn kill(&mut self) -> Vec<u32> {
        let Some(mut process) = self.process.take() else {
            return Vec::new();
        };
        let children = children_of(process.0.id());
        let _ = process.0.kill();
        let _ = process.0.wait();
        children
    }
}

/// Runs the chaos test. Blocking.
pub fn run(options: &ChaosOptions) -> anyhow::Result<ChaosReport> {
    let bin = |name: &str| binary(&options.bin_dir, name);
    let (metaserver_bin, proxy_bin, server_bin) = (
        bin("ninf-metaserver")?,
        bin("ninf-proxy")?,
        bin("ninf-server")?,
    );
    let work = std::env::temp_dir().join(format!("ninf-chaos-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let outcome = run_in(options, &work, &metaserver_bin, &proxy_bin, &server_bin);
    let _ = std::fs::remove_dir_all(&work);
    outcome
}

fn run_in(
    options: &ChaosOptions,
    work: &Path,
    metaserver_bin: &Path,
    proxy_bin: &Path,
    server_bin: &Path,
) -> anyhow::Result<ChaosReport> {
    let count = options.metaservers.max(1);
    let postgres = match (&options.database_url, count) {
        (None, 2..) => Some(crate::postgres::LocalPostgres::start()?),
        _ => None,
    };
    let database_url = options
        .database_url
        .clone()
        .or_else(|| postgres.as_ref().map(|p| p.url.clone()));
    let metaserver_processes =
        start_metaservers(count, work, database_url.as_deref(), metaserver_bin)?;
    let metaserver = metaserver_processes
        .iter()
        .map(|m| m.address.clone())
        .collect::<Vec<_>>()
        .join(",");
    let proxy = free_address()?;
    write(
        &work.join("proxy.toml"),
        &format!(
            "listen = \"{proxy}\"\nmetaserver = \"{metaserver}\"\nprobe_seconds = 2.0\nprobe_bytes = 65536\nretry_backoff_seconds = 0.2\nretry_backoff_max_seconds = 2.0\ntask_retries = 12\nsuspect_seconds = {:?}\nsame_host_calls = {}\njournal = \"{}\"\njournal_wait_seconds = 30.0\n",
            options.suspect_seconds,
            options.same_host_calls,
            work.join("proxy-journal.sqlite").display()
        ),
    )?;
    let metaserver_processes = Arc::new(Mutex::new(metaserver_processes));
    let servers = start_servers(options, work, &metaserver, server_bin)?;
    let mut proxy_process = ChaosServer {
        address: proxy.clone(),
        config: work.join("proxy.toml"),
        spill_dir: None,
        process: None,
    };
    proxy_process.start(proxy_bin)?;
    let proxy_process = Arc::new(Mutex::new(proxy_process));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(wait_until_up(&metaserver, servers.len()))?;

    let started = Instant::now();
    let servers = Arc::new(Mutex::new(servers));
    let done = Arc::new(AtomicBool::new(false));
    let faults_due = Arc::new(AtomicBool::new(true));
    let faults = Arc::new(AtomicUsize::new(0));
    let metaserver_kills = Arc::new(AtomicUsize::new(0));
    let proxy_kills = Arc::new(AtomicUsize::new(0));
    let orphans: Arc<Mutex<Vec<u32>>> = Arc::default();
    let injector = spawn_injector(
        Shared {
            servers: servers.clone(),
            metaservers: metaserver_processes.clone(),
            proxy: proxy_process.clone(),
            done: done.clone(),
            faults_due: faults_due.clone(),
            faults: faults.clone(),
            metaserver_kills: metaserver_kills.clone(),
            proxy_kills: proxy_kills.clone(),
            orphans: orphans.clone(),
        },
        (server_bin, metaserver_bin, proxy_bin),
        options,
    );

    let results = run_transactions(
        &proxy,
        Quota {
            at_least: options.transactions,
            at_most: options.transactions.saturating_mul(MORE_TRANSACTIONS),
            until: Some(faults_due),
        },
        options.concurrency,
    );
    let seconds = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let injected = injector
        .join()
        .map_err(|_| anyhow::anyhow!("the fault injector panicked"))?;
    injected.context("restarting a killed server")?;

    // Every server up again, then count what is left.
    let addresses: Vec<String> = {
        let mut s = lock(&servers);
        for server in s.iter_mut() {
            if server.process.is_none() {
                server.start(server_bin)?;
            }
        }
        s.iter().map(|s| s.address.clone()).collect()
    };
    let stored = runtime.block_on(stored_bytes(&addresses))?;
    let handles_left = runtime.block_on(recorded_handles(&metaserver))?;
    let spilled: u64 = lock(&servers)
        .iter()
        .filter_map(|s| s.spill_dir.as_deref())
        .map(directory_bytes)
        .sum();
    let leaked_processes = still_alive(&lock(&orphans));
    let mut report = results;
    report.faults_injected = faults.load(Ordering::Relaxed);
    report.metaserver_restarts = metaserver_kills.load(Ordering::Relaxed);
    report.proxy_restarts = proxy_kills.load(Ordering::Relaxed);
    report.metaservers = count;
    // The metaservers stop before their database.
    drop(metaserver_processes);
    drop(postgres);
    report.leaked_bytes = stored + spilled;
    report.handles_left = handles_left;
    report.leaked_processes = leaked_processes;
    report.seconds = seconds;
    Ok(report)
}

/// Starts `count` metaservers, on `database_url` when given (each its own SQLite file
/// otherwise).
fn start_metaservers(
    count: usize,
    work: &Path,
    database_url: Option<&str>,
    metaserver_bin: &Path,
) -> anyhow::Result<Vec<ChaosServer>> {
    let mut metaserver_processes = Vec::new();
    for i in 0..count {
        let address = free_address()?;
        let config = work.join(format!("metaserver-{i}.toml"));
        // Heartbeats every 0.25 s, down after 1.5 s without one: a killed server stops
        // getting new graphs quickly, and the proxy's retries cover the gap.
        let database = database_url
            .map(|url| format!("database_url = \"{url}\"\n"))
            .unwrap_or_default();
        write(
            &config,
            &format!(
                "listen = \"{address}\"\ndata_dir = \"{}\"\n{database}heartbeat_seconds = 0.25\nheartbeat_timeout_seconds = 1.5\nnetwork_seconds = 5.0\n",
                work.join(format!("metaserver-{i}")).display()
            ),
        )?;
        let mut process = ChaosServer {
            address,
            config,
            spill_dir: None,
            process: None,
        };
        process.start(metaserver_bin)?;
        metaserver_processes.push(process);
    }
    Ok(metaserver_processes)
}

/// Starts the run's three compute servers, one processor each.
fn start_servers(
    options: &ChaosOptions,
    work: &Path,
    metaserver: &str,
    server_bin: &Path,
) -> anyhow::Result<Vec<ChaosServer>> {
    let mut servers = Vec::new();
    for i in 0..3 {
        let address = free_address()?;
        let config = work.join(format!("server-{i}.toml"));
        let spill_dir = work.join(format!("spill-{i}"));
        write(
            &config,
            &format!(
                "listen = \"{address}\"\nmetaserver = \"{metaserver}\"\nprocessors = 1\nprobe_bytes = 65536\ncpu_slowdown = {:?}\n\n[storage]\nspill_dir = \"{}\"\n{}",
                options.cpu_slowdown,
                spill_dir.display(),
                ninf_compute_server::gang::cores::config_section(i)
            ),
        )?;
        let mut server = ChaosServer {
            address,
            config,
            spill_dir: Some(spill_dir),
            process: None,
        };
        server.start(server_bin)?;
        servers.push(server);
    }
    Ok(servers)
}

/// What the fault injector shares with the run.
struct Shared {
    servers: Arc<Mutex<Vec<ChaosServer>>>,
    metaservers: Arc<Mutex<Vec<ChaosServer>>>,
    proxy: Arc<Mutex<ChaosServer>>,
    done: Arc<AtomicBool>,
    /// Cleared once every kind of fault asked for has happened and the process is back.
    faults_due: Arc<AtomicBool>,
    faults: Arc<AtomicUsize>,
    metaserver_kills: Arc<AtomicUsize>,
    proxy_kills: Arc<AtomicUsize>,
    orphans: Arc<Mutex<Vec<u32>>>,
}

/// Kills a server (or, every `proxy_every` faults, the proxy, and every `metaserver_every`
/// faults, the metaserver) every `kill_every_seconds` and starts it again `down_seconds`
/// later, until `done` is set.
fn spawn_injector(
    shared: Shared,
    (server_bin, metaserver_bin, proxy_bin): (&Path, &Path, &Path),
    options: &ChaosOptions,
) -> std::thread::JoinHandle<anyhow::Result<()>> {
    let Shared {
        servers,
        metaservers,
        proxy,
        done,
        faults_due,
        faults,
        metaserver_kills,
        proxy_kills,
        orphans,
    } = shared;
    let server_bin = server_bin.to_path_buf();
    let metaserver_bin = metaserver_bin.to_path_buf();
    let proxy_bin = proxy_bin.to_path_buf();
    let every = Duration::from_secs_f64(options.kill_every_seconds.max(0.1));
    let down = Duration::from_secs_f64(options.down_seconds.max(0.0));
    let cycle = FaultCycle {
        metaserver_every: options.metaserver_every,
        proxy_every: options.proxy_every,
    };
    std::thread::spawn(move || -> anyhow::Result<()> {
        // An injector that stops (a process that would not restart) owes no more faults:
        // the run ends at its count and reports the error.
        let _owed = ClearOnDrop(faults_due.clone());
        let mut victim = 0;
        let mut tally = FaultTally::default();
        loop {
            if sleep_unless(&done, every) {
                return Ok(());
            }
            let fault = faults.fetch_add(1, Ordering::Relaxed) + 1;
            let victim_kind = cycle.victim(fault);
            if victim_kind == FaultVictim::Proxy {
                lock(&proxy).kill();
                proxy_kills.fetch_add(1, Ordering::Relaxed);
                tracing::info!("killed the proxy");
                std::thread::sleep(down);
                lock(&proxy).start(&proxy_bin)?;
                tally.proxies += 1;
            } else if victim_kind == FaultVictim::Metaserver {
                let addresses: Vec<String> = lock(&metaservers)
                    .iter()
                    .map(|m| m.address.clone())
                    .collect();
                let active = active_metaserver(&addresses).unwrap_or(0);
                lock(&metaservers)[active].kill();
                metaserver_kills.fetch_add(1, Ordering::Relaxed);
                tracing::info!(metaserver = active, "killed the active metaserver");
                std::thread::sleep(down);
                lock(&metaservers)[active].start(&metaserver_bin)?;
                tally.metaservers += 1;
            } else {
                let count = lock(&servers).len();
                if count == 0 {
                    return Ok(());
                }
                let i = victim % count;
                victim += 1;
                let children = lock(&servers)[i].kill();
                tracing::info!(server = i, executables = children.len(), "killed a server");
                lock(&orphans).extend(children);
                std::thread::sleep(down);
                lock(&servers)[i].start(&server_bin)?;
                tally.servers += 1;
            }
            if !cycle.still_due(&tally) {
                faults_due.store(false, Ordering::Relaxed);
            }
        }
    })
}

/// Clears its flag when dropped.
struct ClearOnDrop(Arc<AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Every how many faults the proxy and the metaserver are killed (0: never); the others
/// kill a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultCycle {
    pub metaserver_every: usize,
    pub proxy_every: usize,
}

/// Processes killed and started again so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultTally {
    pub servers: usize,
    pub metaservers: usize,
    pub proxies: usize,
}

/// What one fault kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultVictim {
    Server,
    Metaserver,
    Proxy,
}

impl FaultCycle {
    /// What fault number `fault` (from 1) kills: the proxy first when both are due.
    pub fn victim(&self, fault: usize) -> FaultVictim {
        let due = |every: usize| every > 0 && fault.is_multiple_of(every);
        if due(self.proxy_every) {
            FaultVictim::Proxy
        } else if due(self.metaserver_every) {
            FaultVictim::Metaserver
        } else {
            FaultVictim::Server
        }
    }

    /// Whether some kind of process the cycle kills has not yet been killed and restarted
    /// once: until then the run is not over, whatever its transaction count.
    pub fn still_due(&self, tally: &FaultTally) -> bool {
        let kills_servers = self.metaserver_every != 1 && self.proxy_every != 1;
        (self.proxy_every > 0 && tally.proxies == 0)
            || (self.metaserver_every > 0 && tally.metaservers == 0)
            || (kills_servers && tally.servers == 0)
    }

    /// Why the cycle never reaches one of the processes it names: the proxy takes a fault
    /// due to both, so a metaserver period that is a multiple of the proxy's never comes.
    pub fn unreachable(&self) -> Option<String> {
        let (m, p) = (self.metaserver_every, self.proxy_every);
        (m > 0 && p > 0 && m % p == 0).then(|| {
            format!(
                "the metaserver would never be killed: every {m}th fault is also a proxy fault (every {p}), and the proxy comes first"
            )
        })
    }
}

/// How many transactions a run sends.
#[derive(Debug, Clone, Default)]
pub struct Quota {
    pub at_least: usize,
    /// Never more than this.
    pub at_most: usize,
    /// Past `at_least`, the run goes on while this is set.
    pub until: Option<Arc<AtomicBool>>,
}

impl Quota {
    /// Exactly `count` transactions.
    pub fn exactly(count: usize) -> Self {
        Quota {
            at_least: count,
            at_most: count,
            until: None,
        }
    }

    fn allows(&self, i: usize) -> bool {
        i < self.at_least
            || (i < self.at_most
                && self
                    .until
                    .as_ref()
                    .is_some_and(|more| more.load(Ordering::Relaxed)))
    }
}

/// Runs the transactions of the mix the quota allows through `proxy`, `concurrency` at a
/// time, each checked bit for bit against the local computation; returns the counts.
pub fn run_transactions(proxy: &str, quota: Quota, concurrency: usize) -> ChaosReport {
    let next = Arc::new(AtomicUsize::new(0));
    let results: Arc<Mutex<ChaosReport>> = Arc::default();
    let quota = Arc::new(quota);
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (next, results, proxy) = (next.clone(), results.clone(), proxy.to_string());
            let quota = quota.clone();
            std::thread::spawn(move || {
                let grid = match GridClient::connect(&proxy) {
                    Ok(grid) => grid,
                    Err(e) => {
                        {
                            let mut r = lock(&results);
                            r.errors.push(format!("cannot connect to the proxy: {e}"));
                        }
                        return;
                    }
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if !quota.allows(i) {
                        return;
                    }
                    let outcome = transaction(&grid, i);
                    let mut r = lock(&results);
                    match outcome {
                        Ok(run) => {
                            r.tasks_retried += u64::from(run.plan.tasks_retried);
                            r.regenerated += u64::from(run.plan.regenerated);
                            r.resumed_tasks += u64::from(run.plan.resumed_tasks);
                            // Bit for bit: any difference at all is a mismatch.
                            if run.max_abs_error == 0.0 {
                                r.completed += 1;
                            } else {
                                r.mismatched += 1;
                                if r.errors.len() < 5 {
                                    r.errors.push(format!(
                                        "transaction {i} ({}): off by {:e}",
                                        kind(i),
                                        run.max_abs_error
                                    ));
                                }
                            }
                        }
                        Err(e) => {
                            r.lost += 1;
                            if r.errors.len() < 5 {
                                r.errors.push(format!("transaction {i}: {e}"));
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        let _ = worker.join();
    }
    let mut report = lock(&results).clone();
    let sent = report.completed + report.mismatched + report.lost;
    report.transactions = sent.max(quota.at_least);
    report
}

/// How many of `pids` are still running, after giving them up to 5 s to exit (executables of
/// a killed server notice their closed pipe and exit).
fn still_alive(pids: &[u32]) -> usize {
    let mut alive_now = pids.iter().filter(|&&p| alive(p)).count();
    for _ in 0..50 {
        if alive_now == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        alive_now = pids.iter().filter(|&&p| alive(p)).count();
    }
    alive_now
}

/// Sleeps `duration` in short steps; true if `done` was set meanwhile.
fn sleep_unless(done: &AtomicBool, duration: Duration) -> bool {
    let until = Instant::now() + duration;
    while Instant::now() < until {
        if done.load(Ordering::Relaxed) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done.load(Ordering::Relaxed)
}

/// Transaction `i` of the mix: pairs and cascades alternating, three sizes each, then a
/// matrix kept on the grid in [`KEPT_REPLICAS`] copies, factored there and read back. At
/// n = 380 a dgefa call carries 1.16 MB, so the proxy sends it to the bulk port of a server
/// that may be killed under it.
fn transaction(grid: &GridClient, i: usize) -> Result<workloads::WorkloadRun, ninf::CallError> {
    let seed = 1000 + i as u64;
    match i % 7 {
        0 => workloads::pairs(grid, 150, 5, seed),
        1 => workloads::cascade(grid, 80, seed),
        2 => workloads::pairs(grid, 250, 3, seed),
        3 => workloads::cascade(grid, 120, seed),
        4 => workloads::pairs(grid, 380, 2, seed),
        5 => workloads::cascade(grid, 160, seed),
        _ => workloads::kept_factor(grid, 200, KEPT_REPLICAS, seed),
    }
}

/// What transaction `i` of the mix is, for its errors.
fn kind(i: usize) -> &'static str {
    match i % 7 {
        0 | 2 | 4 => "pairs",
        1 | 3 | 5 => "cascade",
        _ => "kept factor",
    }
}

/// Copies of the mix's kept matrix: persistent data on two of the three servers.
const KEPT_REPLICAS: u32 = 2;

/// Waits until the active metaserver of the list lists `count` servers as up.
pub async fn wait_until_up(metaservers: &str, count: usize) -> anyhow::Result<()> {
    for _ in 0..600 {
        for address in ninf_proto::net::failover::addresses(metaservers) {
            if let Ok(status) = metaserver_status(&address, false).await
                && status.servers.iter().filter(|s| s.up).count() >= count
            {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the servers did not register with the metaserver in 30 s")
}

/// How many data handles the active metaserver of the list records, asked until one
/// answers (one may still be restarting after the last fault).
async fn recorded_handles(metaservers: &str) -> anyhow::Result<usize> {
    let addresses = ninf_proto::net::failover::addresses(metaservers);
    let mut last = anyhow::anyhow!("no metaserver listed in {metaservers:?}");
    for _ in 0..300 {
        for address in &addresses {
            match metaserver_status(address, true).await {
                Ok(status) => return Ok(status.data.len()),
                Err(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(last.context("cannot count the data handles left"))
}

/// A metaserver's status, with every data handle when `data`; a standby refuses.
async fn metaserver_status(address: &str, data: bool) -> anyhow::Result<v1::GridStatus> {
    let channel = ninf_proto::net::connect(
        address,
        None,
        ninf_proto::net::ConnectionSettings::default(),
    )
    .await?;
    let status = v1::scheduling_client::SchedulingClient::new(channel)
        .status(v1::StatusRequest {
            recent_graphs: 0,
            data,
            ..Default::default()
        })
        .await?;
    Ok(status.into_inner())
}

/// Which metaserver of the list is active (answers), if one is.
fn active_metaserver(addresses: &[String]) -> Option<usize> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        for (i, address) in addresses.iter().enumerate() {
            let answered =
                tokio::time::timeout(Duration::from_secs(2), metaserver_status(address, false))
                    .await;
            if matches!(answered, Ok(Ok(_))) {
                return Some(i);
            }
        }
        None
    })
}

/// Bytes each server reports in its storage, summed.
pub async fn stored_bytes(addresses: &[String]) -> anyhow::Result<u64> {
    let mut total = 0;
    for address in addresses {
        let channel = ninf_proto::net::endpoint(
            address,
            None,
            ninf_proto::net::ConnectionSettings::default(),
        )?;
        let mut attempt = 0;
        let sample = loop {
            attempt += 1;
            let result = async {
                let channel = channel.clone().connect().await?;
                let sample = v1::monitor_client::MonitorClient::new(channel)
                    .load(v1::LoadRequest {})
                    .await?;
                anyhow::Ok(sample.into_inner())
            }
            .await;
            match result {
                Ok(sample) => break sample,
                Err(e) if attempt >= 50 => {
                    return Err(e.context(format!("cannot read the storage of {address}")));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        total += sample.stored_bytes;
    }
    Ok(total)
}

/// Bytes of the files in `dir` (0 if it does not exist).
fn directory_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

/// The report as text.
pub fn render(report: &ChaosReport) -> String {
    let mut out = format!(
        "transactions     {}\ncompleted        {}\nfaults_injected  {} ({} of the active metaserver, of {}; {} of the proxy)\ntasks_retried    {}\nregenerated      {}\nresumed_tasks    {}\nlost             {}\nmismatched       {}\nleaked_bytes     {}\nhandles_left     {}\nleaked_processes {}\nseconds          {:.1}\n",
        report.transactions,
        report.completed,
        report.faults_injected,
        report.metaserver_restarts,
        report.metaservers,
        report.proxy_restarts,
        report.tasks_retried,
        report.regenerated,
        report.resumed_tasks,
        report.lost,
        report.mismatched,
        report.leaked_bytes,
        report.handles_left,
        report.leaked_processes,
        report.seconds
    );
    for e in &report.errors {
        out.push_str(&format!("error: {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::{FaultCycle, FaultTally, Quota};

    fn tally(servers: usize, metaservers: usize, proxies: usize) -> FaultTally {
        FaultTally {
            servers,
            metaservers,
            proxies,
        }
    }

    #[test]
    fn a_run_is_due_more_faults_until_each_kind_it_kills_was_killed_and_restarted() {
        let servers_and_metaserver = FaultCycle {
            metaserver_every: 2,
            proxy_every: 0,
        };
        assert!(servers_and_metaserver.still_due(&tally(0, 0, 0)));
        assert!(servers_and_metaserver.still_due(&tally(3, 0, 0)));
        assert!(servers_and_metaserver.still_due(&tally(0, 1, 0)));
        assert!(!servers_and_metaserver.still_due(&tally(1, 1, 0)));
        let servers_and_proxy = FaultCycle {
            metaserver_every: 0,
            proxy_every: 2,
        };
        assert!(servers_and_proxy.still_due(&tally(5, 0, 0)));
        assert!(!servers_and_proxy.still_due(&tally(1, 0, 1)));
        // Every fault kills the metaserver: no server is ever due.
        let metaserver_only = FaultCycle {
            metaserver_every: 1,
            proxy_every: 0,
        };
        assert!(!metaserver_only.still_due(&tally(0, 1, 0)));
        let servers_only = FaultCycle {
            metaserver_every: 0,
            proxy_every: 0,
        };
        assert!(servers_only.still_due(&tally(0, 0, 0)));
        assert!(!servers_only.still_due(&tally(1, 0, 0)));
    }

    #[test]
    fn a_metaserver_period_the_proxy_period_divides_is_refused_as_never_reached() {
        let never = FaultCycle {
            metaserver_every: 4,
            proxy_every: 2,
        }
        .unreachable()
        .expect("every 4th fault is a proxy fault");
        assert!(
            never.starts_with("the metaserver would never be killed: every 4th fault"),
            "{never}"
        );
        let both = FaultCycle {
            metaserver_every: 3,
            proxy_every: 2,
        };
        assert_eq!(both.unreachable(), None);
        let metaserver_only = FaultCycle {
            metaserver_every: 1,
            proxy_every: 0,
        };
        assert_eq!(metaserver_only.unreachable(), None);
    }

    #[test]
    fn a_quota_goes_past_its_count_only_while_faults_are_due_and_never_past_its_cap() {
        let exactly = Quota::exactly(3);
        assert!(exactly.allows(2));
        assert!(!exactly.allows(3));
        let due = Arc::new(AtomicBool::new(true));
        let quota = Quota {
            at_least: 3,
            at_most: 30,
            until: Some(due.clone()),
        };
        assert!(quota.allows(3));
        assert!(quota.allows(29));
        assert!(!quota.allows(30));
        due.store(false, Ordering::Relaxed);
        assert!(quota.allows(2), "the count asked for is always sent");
        assert!(!quota.allows(3));
    }
}
