//! `ninf gang-bench`: gang scheduling's overhead, switches, table messages and switch skew on
//! this machine, with CPU-bound or communicating jobs, on one host or on nodes in network
//! namespaces (`--namespaces`), and what the nodes' brokers handed over outside a job's slots.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use ninf_lab::gang_bench::{
    self, BrokerPlacement, OverheadOptions, OverheadResult, RankPlacement, Workload,
};
use ninf_lab::gang_nodes::NodeBed;

#[derive(Args)]
pub struct GangBenchArgs {
    #[arg(long, default_value_t = 100.0)]
    pub quantum_ms: f64,
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Seconds one job takes alone.
    #[arg(long, default_value_t = 2.0)]
    pub job_seconds: f64,
    /// Processors of the server (default: this machine's cores).
    #[arg(long)]
    pub processors: Option<u32>,
    /// Node agents (default: one per processor).
    #[arg(long)]
    pub nodes: Option<usize>,
    /// Alternating batch and gang runs; times are medians.
    #[arg(long, default_value_t = 1)]
    pub trials: usize,
    /// What each job does: `spin` (CPU only) or `exchange` (computes, then passes a message
    /// round the ranks, every round; every message checked).
    #[arg(long, value_enum, default_value_t = WorkloadArg::Spin)]
    pub workload: WorkloadArg,
    /// Bytes of each message of the `exchange` workload.
    #[arg(long, default_value_t = 65536)]
    pub message_bytes: u32,
    /// Rounds per second of solo run time of the `exchange` workload.
    #[arg(long, default_value_t = 200.0)]
    pub rounds_per_second: f64,
    /// Where ranks' messages go: the server's broker, or each node's (over TCP between nodes).
    #[arg(long, value_enum, default_value_t = BrokerArg::Server)]
    pub broker: BrokerArg,
    /// With node brokers, hand messages over at once even outside their job's slots.
    #[arg(long)]
    pub no_network_preemption: bool,
    /// Who starts a job's ranks: the server, or each node's agent (with node brokers).
    /// Default: the agents with --namespaces, where nodes stand for separate hosts; the
    /// server otherwise.
    #[arg(long, value_enum)]
    pub ranks: Option<BrokerArg>,
    /// Node k's agent clock runs (k + 1) × this many milliseconds ahead of the machine's.
    #[arg(long, default_value_t = 0.0)]
    pub clock_offset_ms: f64,
    /// Run each node's agent in a network namespace of its own, as on separate hosts, and the
    /// server in another, joined over shaped links through a router namespace (root only;
    /// implies `--broker nodes`).
    #[arg(long)]
    pub namespaces: bool,
    /// The links' rate with --namespaces, Mbit/s.
    #[arg(long, default_value_t = 1000.0)]
    pub link_mbit: f64,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum WorkloadArg {
    Spin,
    Exchange,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum BrokerArg {
    Server,
    Nodes,
}

pub fn run(args: GangBenchArgs) -> anyhow::Result<()> {
    let processors = args
        .processors
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()) as u32);
    let options = OverheadOptions {
        quantum_ms: args.quantum_ms,
        jobs: args.jobs,
        job_seconds: args.job_seconds,
        processors: Some(processors),
        nodes: args.nodes,
        trials: args.trials,
        data_dir: super::bench_dir(args.data_dir),
        workload: match args.workload {
            WorkloadArg::Spin => Workload::Spin,
            WorkloadArg::Exchange => Workload::Exchange {
                bytes: args.message_bytes,
                rounds_per_second: args.rounds_per_second,
            },
        },
        broker: match (args.broker, args.namespaces) {
            (BrokerArg::Nodes, _) | (_, true) => BrokerPlacement::Nodes,
            (BrokerArg::Server, false) => BrokerPlacement::Server,
        },
        ranks: match (args.ranks, args.namespaces) {
            (Some(BrokerArg::Nodes), _) | (None, true) => RankPlacement::Nodes,
            (Some(BrokerArg::Server), _) | (None, false) => RankPlacement::Server,
        },
        network_preemption: !args.no_network_preemption,
        clock_offset_ms: args.clock_offset_ms,
    };
    if options.ranks == RankPlacement::Nodes && options.broker != BrokerPlacement::Nodes {
        anyhow::bail!("--ranks nodes needs --broker nodes (or --namespaces)");
    }
    let result = if args.namespaces {
        let nodes = args.nodes.unwrap_or(processors as usize);
        let bed = Arc::new(NodeBed::up(nodes, args.link_mbit)?);
        let inside = bed.clone();
        bed.in_server_namespace(move || {
            super::runtime()?.block_on(gang_bench::overhead(options, Some(inside)))
        })?
    } else {
        super::runtime()?.block_on(gang_bench::overhead(options, None))?
    };
    if args.json {
        println!("{}", serde_json::to_string(&result)?);
    } else {
        print_result(&result);
    }
    Ok(())
}

fn print_result(result: &OverheadResult) {
    println!(
        "quantum {} ms, {} jobs on {} processors ({} agents{}, ranks started by the {}): batch {:.3} s, gang {:.3} s, overhead {:.2}%, slowdown {:.2}x (last job {:.2}x)",
        result.quantum_ms,
        result.jobs,
        result.processors,
        result.nodes,
        if result.namespaces {
            ", each in its own namespace"
        } else {
            ""
        },
        if result.ranks == "nodes" {
            "nodes' agents"
        } else {
            "server"
        },
        result.t_batch_s,
        result.t_gang_s,
        result.overhead * 100.0,
        result.slowdown,
        result.slowdown_max
    );
    println!(
        "switches {}, table messages {} ({:.4} per switch; one message per switch would be {}), clock checks {} ({:.0}/hour)",
        result.switches,
        result.table_messages,
        result.table_messages_per_switch,
        result.centralised_messages,
        result.clock_checks,
        result.clock_checks_per_hour
    );
    println!(
        "switch skew over {} boundaries: p50 {:.1} us, p99 {:.1} us, max {:.1} us; at {} table installs: p99 {:.1} us",
        result.skew_samples,
        result.skew_p50_us,
        result.skew_p99_us,
        result.skew_max_us,
        result.install_skew_samples,
        result.install_skew_p99_us
    );
    if result.messages_checked > 0 {
        let n = result.network;
        println!(
            "{} broker: {} messages checked; node brokers handed over {} messages ({} bytes), {} outside their job's slot ({} bytes), {} held for their slot (at most {} at once){}",
            result.broker,
            result.messages_checked,
            n.messages,
            n.bytes,
            n.messages_outside_slot,
            n.bytes_outside_slot,
            n.messages_held,
            n.most_held,
            if n.preempts {
                ""
            } else {
                " (no network preemption)"
            }
        );
    }
    if result.namespaces {
        println!(
            "the router carried {} bytes into the nodes' namespaces",
            result.routed_bytes
        );
    }
}
