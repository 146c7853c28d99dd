//! `ninf-metaserver`: the Ninf metaserver.

use std::path::PathBuf;

use clap::Parser;
use ninf_metaserver::MetaserverConfig;

#[derive(Parser)]
#[command(name = "ninf-metaserver", version, about = "The Ninf metaserver")]
struct Cli {
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (overrides the configuration), e.g. 127.0.0.1:7000.
    #[arg(long)]
    listen: Option<String>,
    /// Folder of the resource DB (overrides the configuration).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The resource DB instead of SQLite in the data folder: postgres://USER:PASSWORD@HOST/DB
    /// (several metaservers may share one; one is active at a time) or sqlite:PATH.
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// Scheduler, one of ninf_scheduling::SCHEDULERS (see docs/scheduling.md; overrides the
    /// configuration).
    #[arg(long)]
    scheduler: Option<String>,
    /// Predictor: latest or forecast (overrides the configuration).
    #[arg(long)]
    predictor: Option<String>,
    /// Serve the dashboard here, e.g. 127.0.0.1:7080 (overrides the configuration).
    #[arg(long)]
    dashboard_listen: Option<String>,
    /// Export this process's spans to an OpenTelemetry collector (OTLP over gRPC), e.g.
    /// http://127.0.0.1:4317; off by default (docs/observability.md).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

async fn shutdown_signal() {
    ninf_proto::shutdown::signal().await;
    tracing::info!("shutting down");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _logging = ninf_telemetry::logging::init(&ninf_telemetry::logging::LogOptions {
        default_level: "info",
        service_name: "ninf-metaserver",
        otlp_endpoint: cli.otlp_endpoint.as_deref(),
    })?;
    let mut config = match &cli.config {
        Some(path) => MetaserverConfig::load(path)?,
        None => MetaserverConfig::default(),
    };
    if let Some(listen) = cli.listen {
        config.listen = listen;
    }
    if let Some(dir) = cli.data_dir {
        config.data_dir = dir;
    }
    if let Some(url) = cli.database_url {
        config.database_url = Some(url);
    }
    if let Some(s) = cli.scheduler {
        config.scheduler = s;
    }
    if let Some(p) = cli.predictor {
        config.predictor = p;
    }
    if let Some(listen) = cli.dashboard_listen {
        config.dashboard_listen = Some(listen);
    }
    let metaserver = ninf_metaserver::bind(config).await?;
    // The first line on stdout tells scripts and tests where the metaserver is.
    println!("listening on {}", metaserver.address);
    if let Some(metrics) = &metaserver.metrics {
        println!("metrics {}/metrics", metrics.url());
    }
    if let Some(dashboard) = &metaserver.dashboard {
        println!("dashboard {}/", dashboard.url());
    }
    metaserver.until(shutdown_signal()).await?;
    Ok(())
}
