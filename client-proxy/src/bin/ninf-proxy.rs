//! `ninf-proxy`: a Ninf client proxy for the clients of one site.

use std::path::PathBuf;

use clap::Parser;
use ninf_client_proxy::ProxyConfig;

#[derive(Parser)]
#[command(name = "ninf-proxy", version, about = "A Ninf client proxy")]
struct Cli {
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (overrides the configuration), e.g. 127.0.0.1:7100.
    #[arg(long)]
    listen: Option<String>,
    /// The metaserver, host:port (overrides the configuration).
    #[arg(long)]
    metaserver: Option<String>,
    /// Export this process's spans to an OpenTelemetry collector (OTLP over gRPC), e.g.
    /// http://127.0.0.1:4317; off by default (docs/observability.md).
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

async fn shutdown_signal() {
    ninf_proto::shutdown::signal().await;
    tracing::info!("shutting down");
}

fn main() -> anyhow::Result<()> {
    // Before the runtime's threads start: this may run the program again.
    ninf_client_proxy::memory::prepare_allocator();
    tokio::runtime::Runtime::new()?.block_on(serve())
}

async fn serve() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let _logging = ninf_telemetry::logging::init(&ninf_telemetry::logging::LogOptions {
        default_level: "info",
        service_name: "ninf-proxy",
        otlp_endpoint: cli.otlp_endpoint.as_deref(),
    })?;
    let mut config = match (&cli.config, &cli.metaserver) {
        (Some(path), _) => ProxyConfig::load(path).map_err(anyhow::Error::msg)?,
        (None, Some(metaserver)) => ProxyConfig::new(metaserver.clone()),
        (None, None) => anyhow::bail!("give --metaserver HOST:PORT or --config FILE"),
    };
    if let Some(metaserver) = cli.metaserver {
        config.metaserver = metaserver;
    }
    if let Some(listen) = cli.listen {
        config.listen = listen;
    }
    if config.journal.is_none() {
        // Beside the configuration, so that the proxy restarted with it finds its journal.
        let folder = cli
            .config
            .as_deref()
            .and_then(|c| c.parent())
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), PathBuf::from);
        config.journal = Some(
            folder
                .join("ninf-proxy-journal.sqlite")
                .display()
                .to_string(),
        );
    }
    let proxy = ninf_client_proxy::bind(config).await?;
    println!("listening on {}", proxy.address);
    proxy.until(shutdown_signal()).await?;
    Ok(())
}
