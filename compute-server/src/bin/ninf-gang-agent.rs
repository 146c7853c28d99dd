//! `ninf-gang-agent`: the node agent of a compute server's gang scheduler (the time-sync paper). The
//! server starts one per node; it can as well run on another host and attach over the network.

use clap::Parser;
use ninf_compute_server::gang::agent::{self, AgentOptions};
use ninf_compute_server::gang::clock::AgentClock;
use ninf_compute_server::gang::node_broker::NodeBrokerOptions;

#[derive(Parser)]
#[command(
    name = "ninf-gang-agent",
    version,
    about = "Follows a compute server's gang time table on one node"
)]
struct Args {
    /// The server's gRPC address, host:port.
    #[arg(long)]
    server: String,
    /// This node's name.
    #[arg(long, default_value = "node-0")]
    node: String,
    /// The processors (table columns) of this node, e.g. `0,1`.
    #[arg(long, value_delimiter = ',', required = true)]
    columns: Vec<u32>,
    /// Do not pin processes to cores.
    #[arg(long)]
    no_pin: bool,
    /// The cores the columns are pinned to, e.g. `2,3`: column c on the (c mod count)-th.
    /// Default: the cores this process may run on.
    #[arg(long, value_delimiter = ',')]
    cores: Vec<u32>,
    /// Emulate a clock of another host: offset from the machine's clock.
    #[arg(long, default_value_t = 0.0)]
    clock_offset_ms: f64,
    /// Emulate a clock of another host: rate error in parts per million.
    #[arg(long, default_value_t = 0.0)]
    clock_rate_ppm: f64,
    #[arg(long, default_value_t = 0.5)]
    sync_min_interval: f64,
    #[arg(long, default_value_t = 3600.0)]
    sync_max_interval: f64,
    #[arg(long, default_value_t = 200.0)]
    drift_threshold_us: f64,
    /// Follow the time-sync paper exactly: no estimate of the clocks' rate difference.
    #[arg(long)]
    no_rate_estimate: bool,
    /// The grid's token file (mode 0600), when the server requires its token.
    #[arg(long)]
    token_file: Option<std::path::PathBuf>,
    /// The grid's certificate authority, when the server serves TLS.
    #[arg(long, requires_all = ["tls_certificate", "tls_key"])]
    tls_ca: Option<std::path::PathBuf>,
    /// This agent's certificate (the server's own will do).
    #[arg(long, requires = "tls_ca")]
    tls_certificate: Option<std::path::PathBuf>,
    /// Its private key (mode 0600).
    #[arg(long, requires = "tls_ca")]
    tls_key: Option<std::path::PathBuf>,
    /// Run this node's SPMD broker (the server's `broker = "nodes"`), listening for other
    /// nodes' brokers on this address (port 0: any free port).
    #[arg(long, value_name = "HOST:PORT")]
    broker_listen: Option<std::net::SocketAddr>,
    /// The address other nodes reach this node's broker at, when not the one it listens on.
    #[arg(long, requires = "broker_listen", value_name = "HOST:PORT")]
    broker_advertise: Option<String>,
    /// Hand messages to ranks at once, even outside their job's slots (no network preemption).
    #[arg(long, requires = "broker_listen")]
    no_network_preemption: bool,
    /// Where the ranks the server starts on this node (its `ranks = "nodes"`) find their
    /// executables: a directory holding them under the server's file names. Default: the
    /// server's own paths (one host, or the same installation on every host).
    #[arg(long, value_name = "DIR")]
    executables: Option<std::path::PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let _logging = ninf_telemetry::logging::init(&ninf_telemetry::logging::LogOptions {
        default_level: "warn",
        service_name: "ninf-gang-agent",
        otlp_endpoint: None,
    })?;
    let args = Args::parse();
    let token = ninf_proto::net::auth::load_configured(args.token_file.as_deref())?;
    let tls = match (args.tls_ca, args.tls_certificate, args.tls_key) {
        (Some(ca), Some(certificate), Some(key)) => Some(ninf_proto::net::tls::GridTls::load(
            &ninf_proto::net::tls::TlsFiles {
                ca,
                certificate,
                key,
                require_client_certificates: true,
            },
        )?),
        _ => None,
    };
    let options = AgentOptions {
        tls,
        token,
        server: args.server,
        node: args.node,
        columns: args.columns,
        pin: !args.no_pin,
        cores: args.cores,
        clock: AgentClock {
            offset: args.clock_offset_ms * 1e-3,
            rate_ppm: args.clock_rate_ppm,
        },
        sync: ninf_gang::SyncConfig {
            min_interval: args.sync_min_interval,
            max_interval: args.sync_max_interval,
            drift_threshold: args.drift_threshold_us * 1e-6,
            compensate_rate: !args.no_rate_estimate,
        },
        report_interval: std::time::Duration::from_secs(1),
        broker: args.broker_listen.map(|listen| NodeBrokerOptions {
            listen,
            advertise: args.broker_advertise,
            preempt: !args.no_network_preemption,
        }),
        executables: args.executables,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        agent::run(options, ninf_proto::shutdown::signal()).await?;
        Ok(())
    })
}
