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
    let config = load_config(&cli)?;
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
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let server = ninf_compute_server::bind(&config, info).await?;
        // The first line on stdout tells scripts and tests where the server is.
        println!("listening on {}", server.address);
        tracing::info!(address = %server.address, modules = server.state.catalog().modules.len(), "serving");
        let reloads = tokio::spawn(reload_on_hangup(cli, server.state.clone()));
        server.until(shutdown_signal()).await?;
        reloads.abort();
        anyhow::Ok(())
    })
}
