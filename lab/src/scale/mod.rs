//! `ninf scale`: one real metaserver (SQLite, or PostgreSQL by URL or in a private cluster)
//! and one or more real proxies, then
//! N emulated compute servers in a few processes ([`emulator`]): each registers with the
//! self-test module's routines, heartbeats with load samples, reports network samples and
//! answers calls with no compute. M clients send graphs of independent `noop` calls through
//! the proxies (client i through proxy i mod P) for S seconds. What it measures is the metaserver: how fast servers register,
//! whether every heartbeat is recorded within its interval, how long a graph waits for its
//! placement, its memory and its database's size (docs/performance.md, "A metaserver for
//! many servers").

pub mod emulator;
pub mod services;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use ninf::grid::GridClient;
use ninf_grid::load::{percentile, resident_bytes};
use ninf_grid::processes::{Started, binary, free_address, start, write};
use serde::Serialize;

pub use emulator::{EmulatorOptions, EmulatorReport};

#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub bin_dir: PathBuf,
    pub servers: usize,
    pub clients: usize,
    /// Proxies the clients send their graphs through, each asking the metaserver on its own.
    pub proxies: usize,
    pub seconds: f64,
    pub database_url: Option<String>,
    /// Without a URL, start a private PostgreSQL cluster for the run and use it.
    pub postgres: bool,
    /// Plan every graph on the whole grid, as before the shortlist (a baseline).
    pub whole_grid: bool,
    pub heartbeat_seconds: f64,
    /// Emulated servers per emulator process.
    pub servers_per_process: usize,
    /// Calls in each client's graphs.
    pub tasks: usize,
    /// How long an emulated call takes (0: answered at once).
    pub call_ms: u64,
    /// How often the proxy measures its paths, by sites (0: never).
    pub probe_seconds: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct ScaleReport {
    pub servers: usize,
    pub clients: usize,
    pub proxies: usize,
    pub seconds: f64,
    pub database: String,
    pub emulator_processes: usize,
    pub heartbeat_seconds: f64,
    pub tasks_per_graph: usize,
    /// Servers the metaserver listed as up once every emulator had registered its own.
    pub servers_registered: usize,
    /// Servers registered per second, from the emulators' start until the metaserver listed
    /// them all.
    pub registrations_per_s: f64,
    pub heartbeats_sent: u64,
    pub heartbeats_per_s: f64,
    /// Heartbeats not answered as recorded within their interval (late or failed).
    pub heartbeats_missed: u64,
    pub network_reports: u64,
    pub graphs: usize,
    /// Graphs placed through each proxy, in order.
    pub graphs_per_proxy: Vec<usize>,
    pub graphs_failed: usize,
    pub graphs_per_s: f64,
    /// Seconds each graph waited for the metaserver's placement, as the proxy measured.
    pub schedule_p50_ms: f64,
    pub schedule_p99_ms: f64,
    pub metaserver_rss_mib: f64,
    pub db_bytes: u64,
    pub errors: Vec<String>,
}

/// Runs the measurement in a folder of its own, removed afterwards.
pub fn run(options: &ScaleOptions) -> anyhow::Result<ScaleReport> {
    let work = tempfile::tempdir()?;
    let cluster = match (&options.database_url, options.postgres) {
        (None, true) => Some(ninf_grid::postgres::LocalPostgres::start()?),
        _ => None,
    };
    let options = ScaleOptions {
        database_url: cluster
            .as_ref()
            .map(|c| c.url.clone())
            .or_else(|| options.database_url.clone()),
        ..options.clone()
    };
    run_in(&options, work.path())
}

fn run_in(options: &ScaleOptions, work: &Path) -> anyhow::Result<ScaleReport> {
    let mut report = ScaleReport {
        servers: options.servers,
        clients: options.clients,
        proxies: options.proxies.max(1),
        seconds: options.seconds,
        database: options
            .database_url
            .as_ref()
            .map_or("sqlite".into(), |_| "postgresql".into()),
        heartbeat_seconds: options.heartbeat_seconds,
        tasks_per_graph: options.tasks,
        ..ScaleReport::default()
    };
    let (metaserver_address, metaserver) = start_metaserver(options, work)?;
    let (proxy_addresses, _proxies) = start_proxies(options, work, &metaserver_address)?;

    let spawned = Instant::now();
    let emulators = start_emulators(options, work, &metaserver_address)?;
    report.emulator_processes = emulators.len();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let wait = Duration::from_secs_f64(60.0 + options.servers as f64 / 20.0);
    report.servers_registered =
        runtime.block_on(wait_until_up(&metaserver_address, options.servers, wait))?;
    report.registrations_per_s =
        report.servers_registered as f64 / spawned.elapsed().as_secs_f64().max(1e-9);

    let placements = run_clients(options, &proxy_addresses, &mut report)?;
    report.schedule_p50_ms = percentile(&placements, 0.50) * 1000.0;
    report.schedule_p99_ms = percentile(&placements, 0.99) * 1000.0;
    report.metaserver_rss_mib = resident_bytes(metaserver.0.id())? as f64 / (1 << 20) as f64;
    report.db_bytes = runtime.block_on(database_bytes(options, work))?;
    for (emulator, path) in emulators {
        let seen = stop_emulator(emulator, &path)?;
        report.heartbeats_sent += seen.heartbeats_sent;
        report.heartbeats_missed += seen.heartbeats_missed;
        report.network_reports += seen.network_reports;
        report.heartbeats_per_s += seen.heartbeats_sent as f64 / seen.beating_seconds.max(1e-9);
    }
    Ok(report)
}

/// Starts `options.proxies` proxies (at least one) of the metaserver at `metaserver`; their
/// addresses, and the processes, which end when dropped.
fn start_proxies(
    options: &ScaleOptions,
    work: &Path,
    metaserver: &str,
) -> anyhow::Result<(Vec<String>, Vec<Started>)> {
    let (mut addresses, mut started) = (Vec::new(), Vec::new());
    for index in 0..options.proxies.max(1) {
        let address = free_address()?;
        let config = work.join(format!("proxy-{index}.toml"));
        write(
            &config,
            &format!(
                "listen = \"{address}\"\nmetaserver = \"{metaserver}\"\n\
                 journal = \"off\"\n{}",
                proxy_probes(options.probe_seconds)
            ),
        )?;
        let mut command = Command::new(binary(&options.bin_dir, "ninf-proxy")?);
        command.arg("--config").arg(&config);
        started.push(start(command, &format!("proxy {index}"))?);
        addresses.push(address);
    }
    Ok((addresses, started))
}

/// The proxy's probe settings: by default none (measuring 10,000 servers' paths one after
/// another, before graphs and between them, held both cores before the proxy measured a few
/// of each site; docs/performance.md), so that what is measured is the metaserver.
fn proxy_probes(probe_seconds: f64) -> String {
    if probe_seconds > 0.0 {
        format!(
            "probe_seconds = {probe_seconds:?}\nprobe_bytes = 65536\nprobe_before_placement_seconds = 1.0\n"
        )
    } else {
        "probe_seconds = 3600.0\nprobe_before_placement_seconds = 0.0\n".to_string()
    }
}

fn start_metaserver(options: &ScaleOptions, work: &Path) -> anyhow::Result<(String, Started)> {
    let address = free_address()?;
    let database = options
        .database_url
        .as_ref()
        .map(|url| format!("database_url = \"{url}\"\n"))
        .unwrap_or_default();
    let heartbeat = options.heartbeat_seconds;
    let shortlist = if options.whole_grid {
        format!("[shortlist]\nwhole_grid_up_to = {}\n", u32::MAX)
    } else {
        String::new()
    };
    write(
        &work.join("metaserver.toml"),
        &format!(
            "listen = \"{address}\"\ndata_dir = \"{}\"\nheartbeat_seconds = {heartbeat:?}\n\
             heartbeat_timeout_seconds = {:?}\nnetwork_seconds = {:?}\n{database}{shortlist}",
            work.join("metaserver").display(),
            heartbeat * 3.0,
            heartbeat * 6.0,
        ),
    )?;
    let mut command = Command::new(binary(&options.bin_dir, "ninf-metaserver")?);
    command.arg("--config").arg(work.join("metaserver.toml"));
    Ok((address, start(command, "metaserver")?))
}

/// The emulator processes, each with the file it writes its report to when it stops.
fn start_emulators(
    options: &ScaleOptions,
    work: &Path,
    metaserver: &str,
) -> anyhow::Result<Vec<(Started, PathBuf)>> {
    let per = options.servers_per_process.max(1);
    let mut emulators = Vec::new();
    for (k, first) in (0..options.servers).step_by(per).enumerate() {
        let count = per.min(options.servers - first);
        let port = free_address()?
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .context("a free port")?;
        let path = work.join(format!("emulator-{k}.json"));
        let mut command = Command::new(binary(&options.bin_dir, "ninf")?);
        command
            .arg("scale-servers")
            .args(["--metaserver", metaserver])
            .args(["--first", &first.to_string(), "--count", &count.to_string()])
            .args(["--port", &port.to_string()])
            .args([
                "--heartbeat-seconds",
                &options.heartbeat_seconds.to_string(),
            ])
            .args([
                "--network-seconds",
                &(options.heartbeat_seconds * 6.0).to_string(),
            ])
            .args(["--call-ms", &options.call_ms.to_string()])
            .arg("--report")
            .arg(&path);
        emulators.push((start(command, &format!("emulator {k}"))?, path));
    }
    Ok(emulators)
}

/// Waits until the metaserver lists `count` servers as up; how many it lists then.
async fn wait_until_up(metaserver: &str, count: usize, wait: Duration) -> anyhow::Result<usize> {
    let channel = ninf_proto::net::connect(metaserver, None, Default::default()).await?;
    let mut client = ninf_proto::v1::scheduling_client::SchedulingClient::new(channel)
        .max_decoding_message_size(1 << 30);
    let until = Instant::now() + wait;
    let mut up = 0;
    loop {
        let asked = client
            .status(ninf_proto::v1::StatusRequest {
                recent_graphs: 0,
                data: false,
                ..Default::default()
            })
            .await;
        // A metaserver too busy to answer now is asked again until the wait is over.
        match asked {
            Ok(status) => {
                up = status.into_inner().servers.iter().filter(|s| s.up).count();
                if up >= count {
                    return Ok(up);
                }
            }
            Err(status) => tracing::warn!(error = %status.message(), "the metaserver's status"),
        }
        if Instant::now() >= until {
            anyhow::bail!("only {up} of {count} emulated servers registered within {wait:?}");
        }
        // Each status lists every server: asked rarely, it costs the metaserver little.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// The clients, each a thread sending graphs of `options.tasks` independent `noop` calls for
/// `options.seconds`; each graph's placement time, sorted.
fn run_clients(
    options: &ScaleOptions,
    proxies: &[String],
    report: &mut ScaleReport,
) -> anyhow::Result<Vec<f64>> {
    let placements: Arc<Mutex<Vec<f64>>> = Arc::default();
    let per_proxy: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(vec![0; proxies.len()]));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs_f64(options.seconds.max(0.1));
    let started = Instant::now();
    let threads: Vec<_> = (0..options.clients.max(1))
        .map(|client| {
            let (placements, failures) = (placements.clone(), failures.clone());
            let per_proxy = per_proxy.clone();
            let through = client % proxies.len().max(1);
            let proxy = proxies.get(through).cloned().unwrap_or_default();
            let tasks = options.tasks.max(1);
            std::thread::spawn(move || -> anyhow::Result<()> {
                let grid = GridClient::connect(&proxy)?;
                while Instant::now() < until {
                    match noops(&grid, tasks) {
                        Ok(seconds) => {
                            ninf_proto::sync::lock(&placements).push(seconds);
                            ninf_proto::sync::lock(&per_proxy)[through] += 1;
                        }
                        Err(e) => ninf_proto::sync::lock(&failures).push(e.to_string()),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for thread in threads {
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => ninf_proto::sync::lock(&failures).push(format!("{e:#}")),
            Err(_) => anyhow::bail!("a client thread panicked"),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut placements = std::mem::take(&mut *ninf_proto::sync::lock(&placements));
    let failures = std::mem::take(&mut *ninf_proto::sync::lock(&failures));
    placements.sort_by(f64::total_cmp);
    report.graphs = placements.len();
    report.graphs_per_proxy = std::mem::take(&mut *ninf_proto::sync::lock(&per_proxy));
    report.graphs_failed = failures.len();
    report.graphs_per_s = placements.len() as f64 / seconds.max(1e-9);
    report.errors = failures.into_iter().take(5).collect();
    Ok(placements)
}

/// One graph of `tasks` independent `noop` calls; the seconds it waited for its placement.
fn noops(grid: &GridClient, tasks: usize) -> Result<f64, ninf::CallError> {
    let plan = grid.transaction(|tx| {
        for _ in 0..tasks {
            tx.call("noop", &[0i32.into()])?;
        }
        Ok(())
    })?;
    Ok(plan.schedule_seconds)
}

/// Stops an emulator (SIGTERM) and reads what it saw.
fn stop_emulator(emulator: Started, report: &Path) -> anyhow::Result<EmulatorReport> {
    let pid = i32::try_from(emulator.0.id()).context("a process id")?;
    // SAFETY: signalling a child this process started and has not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let mut emulator = emulator;
    emulator.0.wait()?;
    let text = std::fs::read_to_string(report)
        .with_context(|| format!("the emulator wrote no report to {}", report.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// The resource DB's size: the SQLite file with its write-ahead log, or the PostgreSQL
/// database's.
async fn database_bytes(options: &ScaleOptions, work: &Path) -> anyhow::Result<u64> {
    if let Some(url) = &options.database_url {
        let out = tokio::process::Command::new("psql")
            .args([
                url.as_str(),
                "-Atc",
                "SELECT pg_database_size(current_database())",
            ])
            .output()
            .await
            .context("cannot run psql for the database's size")?;
        let text = String::from_utf8_lossy(&out.stdout);
        return text
            .trim()
            .parse()
            .with_context(|| format!("psql gave no size: {text:?}"));
    }
    let dir = work.join("metaserver");
    let mut bytes = 0;
    for entry in std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))? {
        let entry = entry?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("metaserver.db")
        {
            bytes += entry.metadata()?.len();
        }
    }
    Ok(bytes)
}

/// The report as text.
pub fn render(r: &ScaleReport) -> String {
    format!(
        "{} emulated servers in {} processes, {} clients through {} proxies for {} s, {} database\n\
         registered: {} ({:.0} /s)\n\
         heartbeats: {} sent ({:.0} /s), {} missed; network reports: {}\n\
         graphs of {} calls: {} ({:.1} /s), {} failed; placement p50 {:.2} ms, p99 {:.2} ms\n\
         metaserver: {:.1} MiB resident, database {} bytes\n",
        r.servers,
        r.emulator_processes,
        r.clients,
        r.proxies,
        r.seconds,
        r.database,
        r.servers_registered,
        r.registrations_per_s,
        r.heartbeats_sent,
        r.heartbeats_per_s,
        r.heartbeats_missed,
        r.network_reports,
        r.tasks_per_graph,
        r.graphs,
        r.graphs_per_s,
        r.graphs_failed,
        r.schedule_p50_ms,
        r.schedule_p99_ms,
        r.metaserver_rss_mib,
        r.db_bytes,
    )
}
