//! `ninf-server`: a Ninf compute server.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ninf_compute_server::config::ModuleConfig;
use ninf_compute_server::{ServerConfig, benchmark};
use ninf_proto::v1;

#[derive(Parser)]
#[command(name = "ninf-server", version, about = "A Ninf compute server")]
struct Cli {
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (overrides the configuration), e.g. 127.0.0.1:7001.
    #[arg(long)]
    listen: Option<String>,
    /// Processors offered to jobs (overrides the configuration).
    #[arg(long)]
    processors: Option<usize>,
    /// Metaserver to register with, `host:port` (overrides the configuration).
    #[arg(long)]
    metaserver: Option<String>,
    /// Join the grid this grid file describes (`DATA_DIR/grid.toml`): its metaserver, token
    /// and TLS material (overrides the configuration; `--metaserver` overrides it).
    #[arg(long, value_name = "FILE")]
    grid: Option<PathBuf>,
    /// Advertise this host name with the port bound (e.g. the node's name when listening on
    /// 0.0.0.0:0).
    #[arg(long, value_name = "HOST")]
    advertise_host: Option<String>,
    /// The allocation queue that started this server (docs/slurm.md).
    #[arg(long, value_name = "NAME")]
    allocation: Option<String>,
    /// When this server must be gone (Unix seconds); by default, in a Slurm job, its job's
    /// end as `squeue` tells it.
    #[arg(long, value_name = "UNIX_SECONDS")]
    walltime_end: Option<f64>,
    /// Seconds before the walltime end at which the server drains by itself, in case the
    /// batch system's warning signal does not come.
    #[arg(long, default_value_t = 10.0)]
    drain_before_end: f64,
    /// Emulate processors this many times slower than the host's (overrides the
    /// configuration).
    #[arg(long)]
    cpu_slowdown: Option<f64>,
    /// Run the start-up benchmark, print it as JSON and exit.
    #[arg(long)]
    benchmark_only: bool,
    /// Skip the start-up benchmark (report 0 MFLOPS); for tests.
    #[arg(long)]
    no_benchmark: bool,
    /// Serve this module too, beside the configured ones (repeatable): IDL=EXECUTABLE, as
    /// `ninf-gen build` writes it (docs/authors.md).
    #[arg(long = "module", value_name = "IDL=EXECUTABLE")]
    modules: Vec<String>,
    /// Export this process's spans to an OpenTelemetry collector (OTLP over gRPC), e.g.
    /// http://127.0.0.1:4317; off by default (docs/observability.md).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

async fn shutdown_signal() {
    ninf_proto::shutdown::signal().await;
    tracing::info!("shutting down");
}

/// Large arrays pass through the server on every call; keep freed memory for reuse.
fn ninf_executable_memory() {
    ninf_compute_server::keep_freed_memory();
}

/// The configuration file with the flags over it; read again on SIGHUP.
fn load_config(cli: &Cli) -> anyhow::Result<ServerConfig> {
    let mut config = match &cli.config {
        Some(path) => ServerConfig::load(path)?,
        None => ServerConfig::default(),
    };
    if let Some(listen) = &cli.listen {
        config.listen = listen.clone();
    }
    if let Some(grid) = &cli.grid {
        config.join_grid(grid)?;
    }
    if cli.advertise_host.is_some() {
        config.advertise_host = cli.advertise_host.clone();
    }
    if cli.metaserver.is_some() {
        config.metaserver = cli.metaserver.clone();
    }
    if cli.processors.is_some() {
        config.processors = cli.processors;
    }
    if let Some(slowdown) = cli.cpu_slowdown {
        config.cpu_slowdown = slowdown;
    }
    for flag in &cli.modules {
        config
            .extra_modules
            .push(ModuleConfig::from_flag(flag).map_err(anyhow::Error::msg)?);
    }
    config.check().map_err(anyhow::Error::msg)?;
    Ok(config)
}

/// On every SIGHUP, reads the configuration again and serves the modules it names (other
/// settings take a restart). A configuration that cannot be read or served changes nothing.
async fn reload_on_hangup(cli: Cli, state: std::sync::Arc<ninf_compute_server::ServerState>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; modules will not be reloaded");
        return;
    };
    while hangups.recv().await.is_some() {
        let reloaded = match load_config(&cli) {
            Ok(config) => state.reload(&config).await.map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        match reloaded {
            Ok(catalog) => {
                let modules: Vec<&str> = catalog
                    .modules
                    .iter()
                    .map(|m| m.interface.module.as_str())
                    .collect();
                tracing::info!(?modules, failed = catalog.failed.len(), "modules reloaded");
            }
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "reload refused; still serving the modules as they were")
            }
        }
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _logging = ninf_telemetry::logging::init(&ninf_telemetry::logging::LogOptions {
        default_level: "info",
        service_name: "ninf-server",
        otlp_endpoint: cli.otlp_endpoint.as_deref(),
    })?;
    ninf_executable_memory();
    if cli.benchmark_only {
        let report = benchmark::run_adaptive(Duration::from_millis(250), 3000)?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    let mut config = load_config(&cli)?;
    let job = ninf_compute_server::batch_job::from_env(&std::env::vars().collect());
    if let Some(cpus) = job.as_ref().and_then(|j| j.cpus)
        && config.processors.is_none()
    {
        config.processors = Some(cpus);
    }
    let info = if cli.no_benchmark {
        v1::ServerInfo {
            cpus: std::thread::available_parallelism().map_or(1, |p| p.get()) as u32,
            memory_bytes: benchmark::total_memory_bytes().unwrap_or(0),
            ..Default::default()
        }
    } else {
        let report = benchmark::run_adaptive(Duration::from_millis(250), 3000)?;
        // The emulated processor is `cpu_slowdown` times slower than the one measured.
        let mflops = report.mflops / config.cpu_slowdown;
        tracing::info!(
            mflops,
            host_mflops = report.mflops,
            n = report.benchmark_n,
            "benchmark"
        );
        v1::ServerInfo {
            mflops,
            cpus: report.cpus as u32,
            memory_bytes: report.memory_bytes,
            benchmark_n: report.benchmark_n as u32,
            ..Default::default()
        }
    };
    let info = with_batch_job(info, &cli, job.as_ref());
    let walltime_end = (info.walltime_end > 0.0).then_some(info.walltime_end);
    let drain_before_end = cli.drain_before_end.max(0.0);
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let server = ninf_compute_server::bind(&config, info).await?;
        // The first line on stdout tells scripts and tests where the server is.
        println!("listening on {}", server.address);
        tracing::info!(address = %server.address, modules = server.state.catalog().modules.len(), ?walltime_end, "serving");
        let reloads = tokio::spawn(reload_on_hangup(cli, server.state.clone()));
        // SIGTERM or SIGINT: leave now (a `scancel`, the time limit, an operator). SIGUSR1 is
        // Slurm's warning (`--signal=B:USR1@S`, which may come up to a minute early): the
        // server drains at its drain time, or at once if it does not know its end.
        let (reason, limit) = tokio::select! {
            () = shutdown_signal() => ("signal", drain_limit(walltime_end).min(SIGNALLED_DRAIN)),
            () = until_drain_time(walltime_end, drain_before_end) => ("walltime", drain_limit(walltime_end)),
            () = slurm_warning(walltime_end) => ("batch system's warning", drain_limit(walltime_end)),
        };
        server.drain_and_stop(reason, limit).await?;
        reloads.abort();
        anyhow::Ok(())
    })
}

/// The server's registration with its batch job: the job, its queue, when it ends.
fn with_batch_job(
    info: v1::ServerInfo,
    cli: &Cli,
    job: Option<&ninf_compute_server::batch_job::BatchJob>,
) -> v1::ServerInfo {
    let now = unix_seconds();
    let walltime_end = cli.walltime_end.or_else(|| {
        let job = job?;
        let left = ninf_compute_server::batch_job::remaining_from_squeue(&job.slurm_id)?;
        Some(now + left)
    });
    if let Some(job) = job {
        tracing::info!(job = %job.id, ?walltime_end, "running in a Slurm job");
    }
    v1::ServerInfo {
        walltime_end: walltime_end.unwrap_or(0.0),
        batch_job: job.map(|j| j.id.clone()).unwrap_or_default(),
        allocation: cli.allocation.clone().unwrap_or_default(),
        drain_seconds: if walltime_end.is_some() {
            cli.drain_before_end.max(0.0)
        } else {
            0.0
        },
        ..info
    }
}

/// How long a server told to stop (SIGTERM) drains at most: less than Slurm's default
/// KillWait (30 s) before its SIGKILL, so that it says it is gone.
const SIGNALLED_DRAIN: Duration = Duration::from_secs(20);

/// Completes on SIGUSR1 when the server does not know its end (when it does, its drain
/// time comes anyway); never otherwise.
async fn slurm_warning(walltime_end: Option<f64>) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut warnings) = signal(SignalKind::user_defined1()) else {
        return std::future::pending().await;
    };
    while warnings.recv().await.is_some() {
        tracing::info!(?walltime_end, "the batch system's warning (SIGUSR1)");
        if walltime_end.is_none() {
            return;
        }
    }
    std::future::pending().await
}

/// Completes `before` seconds ahead of the walltime end; never without one.
async fn until_drain_time(walltime_end: Option<f64>, before: f64) {
    match walltime_end {
        Some(end) => {
            let wait = (end - before - unix_seconds()).max(0.0);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        None => std::future::pending().await,
    }
}

/// How long a drain may take: up to a few seconds before the walltime end, else 30 s.
fn drain_limit(walltime_end: Option<f64>) -> Duration {
    let seconds = match walltime_end {
        Some(end) => (end - 3.0 - unix_seconds()).clamp(1.0, 300.0),
        None => 30.0,
    };
    Duration::from_secs_f64(seconds)
}

use ninf_proto::clock::unix_now as unix_seconds;
