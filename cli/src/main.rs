//! `ninf`: start a local grid, look at it, call routines, run the metaserver paper's demo, and measure
//! the grid (benchmarks, the simulator, the wide-area testbed and its experiment, chaos).
//! Each subcommand lives in its own module under [`commands`].

mod commands;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use commands::*;

#[derive(Parser)]
#[command(name = "ninf", version, about = "The Ninf global computing system")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Export spans to an OpenTelemetry collector (OTLP over gRPC), e.g.
    /// http://127.0.0.1:4317: the client's transactions, and with `up` or `demo` every
    /// service of the embedded grid (docs/observability.md). Off by default.
    #[arg(long, global = true, value_name = "URL")]
    otlp_endpoint: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Start an embedded grid (metaserver, proxy, N servers) on loopback until Ctrl-C.
    Up(up::UpArgs),
    /// Create a grid certificate authority and certificates for the metaserver, the proxy,
    /// the compute servers and the grid's tools (`[tls]` sections; docs/security.md).
    Certs(certs::CertsArgs),
    /// Servers, their load and state, the network matrix and recent graphs.
    Status(status::StatusArgs),
    /// Allocation queues: compute servers started as batch jobs (Slurm), with a backlog,
    /// a maximum, an idle timeout (docs/slurm.md).
    Alloc(alloc::AllocArgs),
    /// Call a routine through the running grid: values for its IN/INOUT parameters in order
    /// (numbers, JSON lists, or `random`).
    Call(call::CallArgs),
    /// Start a grid of 3 servers and run the metaserver paper's workloads under SIMPLE and FLOW.
    Demo(demo::DemoArgs),
    /// Gang scheduling overhead: K CPU-bound jobs using every processor, one after another
    /// and time-shared; also switches, table messages, clock checks and switch skew.
    GangBench(gang_bench::GangBenchArgs),
    /// Simulate a workload under scheduling policies (the live gang core's FCFS, FPFS,
    /// FPMPFS and time-sharing, and EASY backfilling) at one or more loads, averaged over
    /// seeds.
    Sim(sim::SimArgs),
    /// Fault injection: a grid of real processes runs a stream of transactions while its
    /// compute servers are killed with SIGKILL and restarted, one after another; fails unless
    /// every transaction completes with exact results and nothing is left behind.
    Chaos(chaos::ChaosArgs),
    /// Load: many client programs at once (each its own identity) run cascades through one
    /// proxy; latency percentiles, throughput and the proxy's memory before and after.
    Load(load::LoadArgs),
    /// A real metaserver and proxy against N emulated compute servers (registrations,
    /// heartbeats, network reports, calls with no compute) while M clients send small graphs:
    /// registrations, heartbeats missed, placement times, the metaserver's memory and DB size.
    Scale(scale::ScaleArgs),
    /// One process of emulated servers for `scale`.
    #[command(hide = true)]
    ScaleServers(scale::ScaleServersArgs),
    /// The wide-area testbed: sites as network namespaces with shaped links (needs root).
    Testbed(testbed::TestbedArgs),
    /// Experiments on the testbed: `wan` reproduces the metaserver paper's Tables 2-5; `partition` cuts
    /// a site off while transactions run; `kept-data` times data kept on the grid against sent.
    Experiment(experiment::ExperimentArgs),
    /// The client side of `experiment wan`, run inside the client's site.
    #[command(hide = true)]
    ExperimentClient(experiment::ClientArgs),
    /// The client side of `experiment partition`, run inside the client's site.
    #[command(hide = true)]
    PartitionClient(experiment::PartitionClientArgs),
    /// The client side of `experiment kept-data`, run inside the client's site.
    #[command(hide = true)]
    KeptDataClient(experiment::KeptDataClientArgs),
    /// The client side of `experiment transfers`, run inside the client's site.
    #[command(hide = true)]
    TransfersClient(experiment::TransfersClientArgs),
    /// The metaserver's schedulers on random layered task graphs over a modelled platform
    /// (nothing runs): makespan over HEFT's, schedule length ratio, scheduling time.
    DagBench(dag_bench::DagBenchArgs),
    /// Admission policies on a real run: short jobs of sizes 1..P with Poisson arrivals on a
    /// space-shared table; utilisation and mean response time.
    GangAlloc(gang_alloc::GangAllocArgs),
}

fn main() -> anyhow::Result<()> {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Spans are exported as the subcommand's service (`ninf-up`, `ninf-call`, ...).
    let service = format!("ninf-{}", matches.subcommand_name().unwrap_or("cli"));
    let _logging = ninf_telemetry::logging::init(&ninf_telemetry::logging::LogOptions {
        default_level: "warn",
        service_name: &service,
        otlp_endpoint: cli.otlp_endpoint.as_deref(),
    })?;
    let result = match cli.command {
        Command::Up(args) => up::run(args),
        Command::Certs(args) => certs::run(args),
        Command::Status(args) => status::run(args),
        Command::Alloc(args) => alloc::run(args),
        Command::Call(args) => call::run(args),
        Command::Demo(args) => demo::run(args),
        Command::GangBench(args) => gang_bench::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Chaos(args) => chaos::run(args),
        Command::Load(args) => load::run(args),
        Command::Scale(args) => scale::run(args),
        Command::ScaleServers(args) => scale::run_servers(args),
        Command::Testbed(args) => testbed::run(args),
        Command::Experiment(args) => experiment::run(args),
        Command::ExperimentClient(args) => experiment::run_client(args),
        Command::PartitionClient(args) => experiment::run_partition_client(args),
        Command::KeptDataClient(args) => experiment::run_kept_data_client(args),
        Command::TransfersClient(args) => experiment::run_transfers_client(args),
        Command::DagBench(args) => dag_bench::run(args),
        Command::GangAlloc(args) => gang_alloc::run(args),
    };
    if result.is_err() {
        ninf_grid::processes::yield_to_signal();
    }
    result
}
