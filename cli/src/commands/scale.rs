//! `ninf scale`: a real metaserver and proxy against N emulated compute servers, M clients
//! sending small graphs for S seconds; prints what the metaserver sustained. `ninf
//! scale-servers` (hidden) is one emulator process it starts.

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub struct ScaleArgs {
    /// Emulated compute servers.
    #[arg(long, default_value_t = 1000)]
    pub servers: usize,
    /// Clients sending graphs through the proxies at once (client i through proxy i mod P).
    #[arg(long, default_value_t = 4)]
    pub clients: usize,
    /// Proxies, each a process of its own asking the metaserver for its clients' graphs.
    #[arg(long, default_value_t = 1)]
    pub proxies: usize,
    /// How long the clients send graphs, once every server has registered.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// The metaserver's resource DB (postgres://...); default SQLite.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Without --database-url: start a private PostgreSQL cluster for the run (Debian's
    /// `postgresql` package) and use it as the resource DB.
    #[arg(long)]
    pub postgres: bool,
    /// Plan every graph on the whole grid, not on its shortlist (a baseline to measure the
    /// shortlist against).
    #[arg(long)]
    pub whole_grid: bool,
    /// How often each server sends a heartbeat.
    #[arg(long, default_value_t = 5.0)]
    pub heartbeat_seconds: f64,
    /// Emulated servers per emulator process.
    #[arg(long, default_value_t = 2500)]
    pub servers_per_process: usize,
    /// Calls in each graph (independent `noop`s).
    #[arg(long, default_value_t = 10)]
    pub tasks: usize,
    /// How long an emulated call takes, in milliseconds (0: answered at once).
    #[arg(long, default_value_t = 0)]
    pub call_ms: u64,
    /// How often the proxy measures its paths to the servers, a few of each site
    /// (`probe_per_site`), with 64 KiB probes, and measures unmeasured ones for up to a
    /// second before a graph's placement (0: it measures none, and what is measured is the
    /// metaserver alone).
    #[arg(long, default_value_t = 0.0)]
    pub probe_seconds: f64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ScaleArgs) -> anyhow::Result<()> {
    super::end_children_on_signal()?;
    let report = ninf_lab::scale::run(&ninf_lab::scale::ScaleOptions {
        bin_dir: super::bin_dir()?,
        servers: args.servers,
        clients: args.clients,
        proxies: args.proxies,
        seconds: args.seconds,
        database_url: args.database_url,
        postgres: args.postgres,
        whole_grid: args.whole_grid,
        heartbeat_seconds: args.heartbeat_seconds,
        servers_per_process: args.servers_per_process,
        tasks: args.tasks,
        call_ms: args.call_ms,
        probe_seconds: args.probe_seconds,
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", ninf_lab::scale::render(&report));
    }
    if report.servers_registered < report.servers || report.graphs_failed > 0 {
        anyhow::bail!(
            "{} of {} servers registered, {} graphs failed: {:?}",
            report.servers_registered,
            report.servers,
            report.graphs_failed,
            report.errors
        );
    }
    Ok(())
}

#[derive(Args)]
pub struct ScaleServersArgs {
    #[arg(long)]
    pub metaserver: String,
    #[arg(long)]
    pub first: usize,
    #[arg(long)]
    pub count: usize,
    #[arg(long)]
    pub port: u16,
    #[arg(long)]
    pub heartbeat_seconds: f64,
    #[arg(long)]
    pub network_seconds: f64,
    #[arg(long, default_value_t = 0)]
    pub call_ms: u64,
    /// Where to write what it saw (JSON) when SIGTERM stops it.
    #[arg(long)]
    pub report: std::path::PathBuf,
}

pub fn run_servers(args: ScaleServersArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let stop = tokio_util::sync::CancellationToken::new();
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let stopping = stop.clone();
        tokio::spawn(async move {
            terminate.recv().await;
            stopping.cancel();
        });
        println!("listening on 0.0.0.0:{}", args.port);
        let options = ninf_lab::scale::EmulatorOptions {
            metaserver: args.metaserver,
            first: args.first,
            count: args.count,
            port: args.port,
            heartbeat_seconds: args.heartbeat_seconds,
            network_seconds: args.network_seconds,
            call_ms: args.call_ms,
        };
        let report = ninf_lab::scale::emulator::run(options, stop).await?;
        std::fs::write(&args.report, serde_json::to_string(&report)?)
            .with_context(|| format!("cannot write {}", args.report.display()))
    })
}
