//! `ninf`: start a local grid, look at it, call routines, and run the seed's demo.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ninf_cli::demo::{self, DemoOptions};
use ninf_cli::embedded::{EmbeddedGrid, Endpoints, GridOptions};
use ninf_cli::gang_bench::{self, AllocationOptions, OverheadOptions};
use ninf_cli::simulate::{self, SimOptions, Workload};
use ninf_proto::v1;

#[derive(Parser)]
#[command(name = "ninf", version, about = "The Ninf global computing system")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start an embedded grid (metaserver, proxy, N servers) on loopback until Ctrl-C.
    Up {
        #[arg(long, default_value_t = 2)]
        servers: usize,
        /// Relative speeds (processors offered), e.g. 2,1; default 1 each.
        #[arg(long, value_delimiter = ',')]
        speeds: Vec<u32>,
        #[arg(long, default_value = "flow")]
        scheduler: String,
        /// latest (the paper's predictor), forecast (NWS-style) or capacity (see docs/scheduling.md).
        #[arg(long, default_value = "latest")]
        predictor: String,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Run every connection over TLS, with a new certificate authority and certificates
        /// in DATA_DIR/tls.
        #[arg(long)]
        tls: bool,
    },
    /// Create a grid certificate authority and certificates for the metaserver, the proxy,
    /// the compute servers and the grid's tools (`[tls]` sections; docs/security.md).
    Certs {
        /// Where to write them (`ca.pem`, `NAME.pem`, `NAME-key.pem`; keys mode 0600).
        #[arg(long)]
        dir: PathBuf,
        /// Host names or IP addresses the certificates are valid for.
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
    },
    /// Servers, their load and state, the network matrix and recent graphs.
    Status {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Graphs to list.
        #[arg(long, default_value_t = 10)]
        graphs: u32,
    },
    /// Call a routine through the running grid: values for its IN/INOUT parameters in order
    /// (numbers, JSON lists, or `random`).
    Call {
        routine: String,
        values: Vec<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Start a grid of 3 servers and run the seed's workloads under SIMPLE and FLOW.
    Demo {
        #[arg(long)]
        json: bool,
        #[arg(long, value_delimiter = ',', default_value = "simple,flow")]
        schedulers: Vec<String>,
        /// Order of the dgefa/dgesl pairs.
        #[arg(long, default_value_t = 400)]
        pairs_n: usize,
        /// Order of the cascaded products.
        #[arg(long, default_value_t = 200)]
        cascade_n: usize,
        #[arg(long, default_value_t = 3)]
        trials: usize,
        /// Relative speeds of the 3 servers.
        #[arg(long, value_delimiter = ',', default_value = "2,1,1")]
        speeds: Vec<u32>,
    },
    /// Gang scheduling overhead: K CPU-bound jobs using every processor, one after another
    /// and time-shared; also switches, table messages, clock checks and switch skew.
    GangBench {
        #[arg(long, default_value_t = 100.0)]
        quantum_ms: f64,
        #[arg(long, default_value_t = 2)]
        jobs: usize,
        /// Seconds one job takes alone.
        #[arg(long, default_value_t = 2.0)]
        job_seconds: f64,
        /// Processors of the server (default: this machine's cores).
        #[arg(long)]
        processors: Option<u32>,
        /// Node agents (default: one per processor).
        #[arg(long)]
        nodes: Option<usize>,
        /// Alternating batch and gang runs; times are medians.
        #[arg(long, default_value_t = 1)]
        trials: usize,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Simulate a workload under scheduling policies (the live gang core's FCFS, FPFS,
    /// FPMPFS and time-sharing, and EASY backfilling) at one or more loads, averaged over
    /// seeds.
    Sim {
        /// cenju3 (seed 001), dqt (seed 000 Table 7.1), hetero-a or hetero-b (seed 002), lublin
        /// (Lublin-Feitelson model) or swf:PATH.
        #[arg(long, default_value = "cenju3")]
        workload: String,
        /// One or more of fcfs, fpfs, fpmpfs, easy, conservative, gang, dqt-{max,min,apa,ff,ff-apa}, fair-dqt-{...}.
        #[arg(long, value_delimiter = ',', default_value = "fpfs")]
        policy: Vec<String>,
        /// Offered loads (generated workloads).
        #[arg(long, value_delimiter = ',', default_value = "0.8")]
        load: Vec<f64>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Seeds to average over (seed, seed+1, ...).
        #[arg(long, default_value_t = 1)]
        seeds: u64,
        #[arg(long, default_value_t = 600.0)]
        wait_limit: f64,
        #[arg(long)]
        processors: Option<u32>,
        /// Jobs of a generated workload.
        #[arg(long)]
        jobs: Option<usize>,
        /// Also write utilization.svg and response.svg (against load) into this folder.
        #[arg(long)]
        plot: Option<PathBuf>,
        /// Policies `gang` and `dqt-*`: slot length in seconds (default 1 for the `dqt`
        /// workload, 0.1 otherwise).
        #[arg(long)]
        quantum: Option<f64>,
        /// Policies `dqt-*`: children per node of the queue tree.
        #[arg(long, default_value_t = 2)]
        width: u32,
        /// Policies `mct*`: the migration cost the scheduler predicts, seconds per GB (at
        /// least the actual 24.7; 50 and 75 over-estimate 2x and 3x).
        #[arg(long, default_value_t = 25.0)]
        migration_cost: f64,
        /// Policy `gang`: rows of the time table (multiprogramming level).
        #[arg(long, default_value_t = 4)]
        rows: usize,
        #[arg(long)]
        json: bool,
    },
    /// Fault injection: a grid of real processes runs a stream of transactions while its
    /// compute servers are killed with SIGKILL and restarted, one after another; fails unless
    /// every transaction completes with exact results and nothing is left behind.
    Chaos {
        #[arg(long, default_value_t = 50)]
        transactions: usize,
        /// Transactions in flight at once.
        #[arg(long, default_value_t = 3)]
        concurrency: usize,
        /// Seconds between kills.
        #[arg(long, default_value_t = 1.0)]
        kill_every: f64,
        /// Seconds a killed server stays down.
        #[arg(long, default_value_t = 0.5)]
        down: f64,
        /// Emulated processor slowdown of the servers (calls last long enough to be hit).
        #[arg(long, default_value_t = 400.0)]
        cpu_slowdown: f64,
        /// Every this many faults, kill the metaserver instead of a server (0: never).
        #[arg(long, default_value_t = 5)]
        metaserver_every: usize,
        /// How long the proxy avoids a server after it failed a call, for every graph
        /// (0: each graph learns of the failure by itself).
        #[arg(long, default_value_t = 30.0)]
        suspect_seconds: f64,
        #[arg(long)]
        json: bool,
    },
    /// The wide-area testbed: sites as network namespaces with shaped links (needs root).
    Testbed {
        #[command(subcommand)]
        action: TestbedAction,
    },
    /// Experiments on the testbed: `wan` reproduces seed 004's Tables 2-5.
    Experiment {
        #[command(subcommand)]
        kind: ExperimentKind,
    },
    /// The client side of `experiment wan`, run inside the client's site.
    #[command(hide = true)]
    ExperimentClient {
        #[arg(long)]
        proxy: String,
        #[arg(long)]
        metaserver: String,
        #[arg(long)]
        servers: usize,
        #[arg(long, value_delimiter = ',')]
        schedulers: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        workloads: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        sizes: Vec<usize>,
        #[arg(long)]
        trials: usize,
        #[arg(long)]
        settle_seconds: f64,
        #[arg(long)]
        profile: String,
        /// site=address of each server.
        #[arg(long, value_delimiter = ',')]
        sites: Vec<String>,
    },
    /// The metaserver's schedulers on random layered task graphs over a modelled platform
    /// (nothing runs): makespan over HEFT's, schedule length ratio, scheduling time.
    DagBench {
        /// Graph sizes (tasks).
        #[arg(long, value_delimiter = ',', default_value = "50,100,200,500")]
        tasks: Vec<usize>,
        /// Communication-to-computation ratios.
        #[arg(long, value_delimiter = ',', default_value = "0.1,1,10")]
        ccr: Vec<f64>,
        /// Graphs (and platforms) per setting.
        #[arg(long, default_value_t = 10)]
        graphs: u64,
        /// Servers per platform.
        #[arg(long, default_value_t = 6)]
        servers: usize,
        #[arg(long, value_delimiter = ',', default_value = "simple,flow,heft,search")]
        schedulers: Vec<String>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: bool,
    },
    /// Admission policies on a real run: short jobs of sizes 1..P with Poisson arrivals on a
    /// space-shared table; utilisation and mean response time.
    GangAlloc {
        /// fcfs, fpfs or fpmpfs.
        #[arg(long, default_value = "fpfs")]
        policy: String,
        #[arg(long, default_value_t = 200)]
        jobs: usize,
        #[arg(long, default_value_t = 0.8)]
        load: f64,
        /// Mean run time of a job, milliseconds.
        #[arg(long, default_value_t = 100.0)]
        mean_ms: f64,
        #[arg(long)]
        processors: Option<u32>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        json: bool,
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

/// The folder of this program, where the other grid binaries are installed beside it.
fn bin_dir() -> anyhow::Result<PathBuf> {
    Ok(std::env::current_exe()?
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn up(
    servers: usize,
    speeds: Vec<u32>,
    scheduler: String,
    predictor: String,
    data_dir: PathBuf,
    tls: bool,
) -> anyhow::Result<()> {
    let mut processors = speeds;
    if processors.is_empty() {
        processors = vec![1; servers];
    }
    if processors.len() != servers {
        anyhow::bail!(
            "--speeds gives {} values for {servers} servers",
            processors.len()
        );
    }
    runtime()?.block_on(async move {
        let mut options = GridOptions::new(processors, &data_dir);
        options.scheduler = scheduler;
        options.predictor = predictor;
        options.auth = true;
        options.tls = tls;
        let grid = EmbeddedGrid::start(options).await?;
        println!("metaserver {}", grid.endpoints.metaserver);
        println!("proxy      {}", grid.endpoints.proxy);
        for (i, s) in grid.endpoints.servers.iter().enumerate() {
            println!("server {i}   {s}");
        }
        println!("data       {}", data_dir.display());
        if let Some(token) = &grid.endpoints.token_file {
            println!(
                "token      {} (clients: NINF_TOKEN_FILE={})",
                token.display(),
                token.display()
            );
        }
        if let Some(dir) = &grid.endpoints.tls_dir {
            println!(
                "tls        {} (clients: NINF_TLS_CA={})",
                dir.display(),
                dir.join("ca.pem").display()
            );
        }
        println!("grid is up; `ninf status` in another terminal; Ctrl-C stops it");
        ninf_proto::shutdown::signal().await;
        grid.stop().await;
        println!("stopped");
        anyhow::Ok(())
    })
}

#[derive(Subcommand)]
enum TestbedAction {
    /// Builds the testbed of a profile (tearing down an earlier one first) and leaves it up.
    Up {
        /// `paper`, `lan` or a profile file.
        #[arg(long, default_value = "paper")]
        profile: String,
        #[arg(long, default_value = "ninf-tb")]
        prefix: String,
    },
    /// Kills everything in the testbed's sites and deletes them.
    Down {
        #[arg(long, default_value = "ninf-tb")]
        prefix: String,
    },
    /// The delay forwarder, run by the testbed inside its router namespace.
    #[command(hide = true)]
    Delay {
        /// The TUN device the router sends packets to.
        #[arg(long)]
        device: String,
        /// SITE:SITE:MICROSECONDS, the one-way delay of a pair of sites.
        #[arg(long = "pair")]
        pairs: Vec<ninf_cli::latency::PairDelay>,
    },
}

#[derive(Subcommand)]
enum ExperimentKind {
    /// Seed 004's Tables 2-5 next to ours, from the JSON lines `wan` wrote.
    Tables {
        /// A results.jsonl written by `ninf experiment wan --out`.
        results: PathBuf,
        /// The profile the results were measured on (for its speedup).
        #[arg(long, default_value = "paper")]
        profile: String,
    },
    /// Seed 004's experiment: the pairs and cascade workloads under each scheduler.
    Wan {
        #[arg(long, default_value = "paper")]
        profile: String,
        /// Schedulers to compare; `seed-simple` and `seed-flow` are the seed's own.
        #[arg(long, value_delimiter = ',', default_value = "seed-simple,seed-flow")]
        scheduler: Vec<String>,
        /// pairs, cascade or both.
        #[arg(long, value_delimiter = ',', default_value = "pairs,cascade")]
        workload: Vec<String>,
        /// Matrix orders for every workload; by default the seed's: pairs 100,300,500,700
        /// and cascade 100,200,300.
        #[arg(long, value_delimiter = ',')]
        sizes: Option<Vec<usize>>,
        #[arg(long, default_value_t = 10)]
        trials: usize,
        #[arg(long, default_value = "ninf-tb")]
        prefix: String,
        /// Also write results.jsonl, results.md and wan-*.svg here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Longest wait for the servers to register and measure the network.
        #[arg(long, default_value_t = 120.0)]
        settle_seconds: f64,
        /// The metaserver's predictor: latest (the seed's), forecast, or capacity.
        #[arg(long, default_value = "latest")]
        predictor: String,
        #[arg(long)]
        json: bool,
    },
}

fn status(data_dir: PathBuf, json: bool, graphs: u32) -> anyhow::Result<()> {
    let endpoints = Endpoints::read(&data_dir)?;
    let status = runtime()?.block_on(async {
        let tls = endpoints.tls()?;
        let channel = ninf_proto::net::connect(
            &endpoints.metaserver,
            tls.as_ref(),
            ninf_proto::net::ConnectionSettings::default(),
        )
        .await
        .with_context(|| format!("cannot reach the metaserver at {}", endpoints.metaserver))?;
        let token = ninf_proto::net::auth::AttachToken::new(endpoints.token()?.as_deref());
        let reply = v1::scheduling_client::SchedulingClient::with_interceptor(channel, token)
            .status(v1::StatusRequest {
                recent_graphs: graphs,
            })
            .await
            .map_err(|s| anyhow::anyhow!("metaserver: {}", s.message()))?;
        anyhow::Ok(reply.into_inner())
    })?;
    if json {
        let value = serde_json::json!({
            "metaserver": endpoints.metaserver,
            "proxy": endpoints.proxy,
            "scheduler": status.scheduler,
            "predictor": status.predictor,
            "servers": status.servers.iter().map(|s| serde_json::json!({
                "address": s.address, "up": s.up, "mflops": s.mflops,
                "processors": s.processors, "load": s.load, "stored_bytes": s.stored_bytes,
                "seconds_since_heartbeat": s.seconds_since_heartbeat,
                "routines": s.functions,
            })).collect::<Vec<_>>(),
            "network": status.network.iter().map(|n| serde_json::json!({
                "from": n.from, "to": n.to,
                "throughput_bytes_per_second": n.throughput_bytes_per_second,
                "latency_seconds": n.latency_seconds,
            })).collect::<Vec<_>>(),
            "graphs": status.graphs.iter().map(|g| serde_json::json!({
                "id": g.graph_id, "label": g.label, "scheduler": g.scheduler, "tasks": g.tasks,
                "state": g.state, "predicted_makespan_s": g.predicted_makespan,
                "actual_makespan_s": g.actual_makespan, "inter_server_ratio": g.inter_server_ratio,
                "error": g.error,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "metaserver {} (scheduler {}, predictor {}), proxy {}",
        endpoints.metaserver, status.scheduler, status.predictor, endpoints.proxy
    );
    println!(
        "\n{:<22} {:<5} {:>8} {:>5} {:>6} {:>12} {:>10}",
        "server", "state", "MFLOPS", "procs", "load", "stored (B)", "heartbeat"
    );
    for s in &status.servers {
        println!(
            "{:<22} {:<5} {:>8.0} {:>5} {:>6.1} {:>12} {:>9.1}s",
            s.address,
            if s.up { "up" } else { "down" },
            s.mflops,
            s.processors,
            s.load,
            s.stored_bytes,
            s.seconds_since_heartbeat
        );
    }
    println!("\nnetwork (latest samples)");
    for n in &status.network {
        println!(
            "  {:<22} -> {:<22} {:>10.1} MB/s {:>8.3} ms",
            n.from,
            n.to,
            n.throughput_bytes_per_second / 1e6,
            n.latency_seconds * 1e3
        );
    }
    println!("\nrecent graphs");
    for g in &status.graphs {
        println!(
            "  #{:<5} {:<20} {:<12} {:>5} tasks {:<8} predicted {:.3}s actual {:.3}s inter-server {:.0}% {}",
            g.graph_id,
            g.label,
            g.scheduler,
            g.tasks,
            g.state,
            g.predicted_makespan,
            g.actual_makespan,
            g.inter_server_ratio * 100.0,
            g.error
        );
    }
    Ok(())
}

fn run_demo(
    json: bool,
    schedulers: Vec<String>,
    pairs_n: usize,
    cascade_n: usize,
    trials: usize,
    speeds: Vec<u32>,
) -> anyhow::Result<()> {
    let data_dir = std::env::temp_dir().join(format!("ninf-demo-{}", std::process::id()));
    let runtime = runtime()?;
    let grid = runtime.block_on(async {
        let options = GridOptions::new(speeds, &data_dir);
        EmbeddedGrid::start(options).await
    })?;
    if !json {
        println!(
            "embedded grid: metaserver {}, proxy {}, servers {}",
            grid.endpoints.metaserver,
            grid.endpoints.proxy,
            grid.endpoints.servers.join(", ")
        );
    }
    let options = DemoOptions {
        schedulers,
        pairs_n,
        cascade_n,
        trials,
    };
    let proxy = grid.endpoints.proxy.clone();
    // The client library is synchronous: run it off the grid's runtime.
    let outcome = std::thread::scope(|s| {
        s.spawn(|| demo::run(&proxy, &options))
            .join()
            .map_err(|_| anyhow::anyhow!("the demo thread panicked"))?
    });
    let servers = grid.endpoints.servers.clone();
    let leftover = grid.stored_bytes();
    runtime.block_on(grid.stop());
    let _ = std::fs::remove_dir_all(&data_dir);
    let summaries = outcome?;
    if json {
        for s in &summaries {
            println!("{}", serde_json::to_string(s)?);
        }
    } else {
        println!("\n{}", demo::render(&summaries, &servers));
        println!(
            "bytes left in server storage after the runs: {}",
            leftover.iter().sum::<u64>()
        );
    }
    let worst = summaries
        .iter()
        .map(|s| s.max_abs_error)
        .fold(0.0, f64::max);
    if worst.is_nan() || worst >= 1e-6 {
        anyhow::bail!("results differ from the local computation by {worst}");
    }
    if leftover.iter().any(|&b| b > 0) {
        anyhow::bail!("intermediates were left on the servers: {leftover:?} bytes");
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Up {
            servers,
            speeds,
            scheduler,
            predictor,
            data_dir,
            tls,
        } => up(
            servers,
            speeds,
            scheduler,
            predictor,
            data_dir.unwrap_or_else(ninf_cli::default_data_dir),
            tls,
        ),
        Command::Certs { dir, hosts } => {
            ninf_proto::net::tls::generate(&dir, &ninf_cli::embedded::TLS_NAMES, &hosts)?;
            println!(
                "wrote a certificate authority and certificates for {} to {}",
                ninf_cli::embedded::TLS_NAMES.join(", "),
                dir.display()
            );
            Ok(())
        }
        Command::Status {
            json,
            data_dir,
            graphs,
        } => status(
            data_dir.unwrap_or_else(ninf_cli::default_data_dir),
            json,
            graphs,
        ),
        Command::Call {
            routine,
            values,
            data_dir,
        } => {
            let endpoints = Endpoints::read(&data_dir.unwrap_or_else(ninf_cli::default_data_dir))?;
            let token = endpoints.token()?;
            let tls = endpoints.tls()?;
            let result = ninf_cli::quick_call::call(
                &endpoints.proxy,
                token.as_deref(),
                tls.as_ref(),
                &routine,
                &values,
            )?;
            println!("{}", serde_json::to_string_pretty(&result)?);
            Ok(())
        }
        Command::Demo {
            json,
            schedulers,
            pairs_n,
            cascade_n,
            trials,
            speeds,
        } => run_demo(json, schedulers, pairs_n, cascade_n, trials, speeds),
        Command::GangBench {
            quantum_ms,
            jobs,
            job_seconds,
            processors,
            nodes,
            trials,
            json,
            data_dir,
        } => {
            let options = OverheadOptions {
                quantum_ms,
                jobs,
                job_seconds,
                processors,
                nodes,
                trials,
                data_dir: bench_dir(data_dir),
            };
            let result = runtime()?.block_on(gang_bench::overhead(options))?;
            if json {
                println!("{}", serde_json::to_string(&result)?);
            } else {
                println!(
                    "quantum {} ms, {} jobs on {} processors ({} agents): batch {:.3} s, gang {:.3} s, overhead {:.2}%, slowdown {:.2}x (last job {:.2}x)",
                    result.quantum_ms,
                    result.jobs,
                    result.processors,
                    result.nodes,
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
            }
            Ok(())
        }
        Command::Sim {
            workload,
            policy,
            load,
            seed,
            seeds,
            wait_limit,
            processors,
            jobs,
            plot,
            quantum,
            width,
            migration_cost,
            rows,
            json,
        } => {
            let workload: Workload = workload.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            let options = SimOptions {
                policies: policy,
                loads: load,
                seed,
                seeds,
                wait_limit,
                processors,
                jobs,
                quantum,
                rows,
                width,
                migration_cost,
            };
            let results = simulate::run(&workload, &options)?;
            if let Some(dir) = plot {
                for path in simulate::plot(&results, &dir)? {
                    eprintln!("wrote {}", path.display());
                }
            }
            for r in results {
                if json {
                    println!("{}", serde_json::to_string(&r)?);
                } else {
                    println!(
                        "{} {:<7} load {:<5} {} jobs on {} processors, {} seeds: utilisation {:.1}% ± {:.1}, mean response {:.1} s ± {:.1}, wait {:.1} s, bounded slowdown {:.2} ({:.3} s)",
                        r.workload,
                        r.policy,
                        r.load.map_or("-".to_string(), |l| l.to_string()),
                        r.jobs,
                        r.processors,
                        r.seeds,
                        r.utilization * 100.0,
                        r.utilization_ci95 * 100.0,
                        r.mean_response_s,
                        r.mean_response_ci95,
                        r.mean_wait_s,
                        r.mean_bounded_slowdown,
                        r.sim_wall_s
                    );
                }
            }
            Ok(())
        }
        Command::Testbed { action } => {
            use ninf_cli::testbed::{Profile, Testbed};
            match action {
                TestbedAction::Up { profile, prefix } => {
                    let ninf = std::env::current_exe()
                        .context("cannot find this program to run the delay forwarder")?;
                    let bed = Testbed::new(&prefix, Profile::load(&profile)?)
                        .with_forwarder(&ninf)
                        .up()?;
                    for (site, address) in bed.addresses() {
                        println!("{site}: {address} (namespace {})", bed.namespace(&site));
                    }
                    bed.disarm();
                }
                TestbedAction::Down { prefix } => {
                    let bed = Testbed::new(&prefix, Profile::load("lan")?);
                    let existing = bed.existing();
                    bed.down()?;
                    println!("removed {} namespaces", existing.len());
                }
                TestbedAction::Delay { device, pairs } => {
                    // The testbed reads one line: `ready`, or why it could not start.
                    let mut started = false;
                    let result = ninf_cli::latency::run_forwarder(&device, &pairs, || {
                        use std::io::Write;
                        println!("ready");
                        let _ = std::io::stdout().flush();
                        started = true;
                    });
                    if let Err(e) = &result
                        && !started
                    {
                        println!("{e:#}");
                    }
                    result?;
                }
            }
            Ok(())
        }
        Command::Experiment { kind } => match kind {
            ExperimentKind::Tables { results, profile } => {
                let text = std::fs::read_to_string(&results)
                    .with_context(|| format!("cannot read {}", results.display()))?;
                let parsed: Vec<ninf_cli::experiment::WanResult> = text
                    .lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim().is_empty())
                    .map(|(i, l)| {
                        serde_json::from_str(l).with_context(|| {
                            format!("{}:{}: not a result line", results.display(), i + 1)
                        })
                    })
                    .collect::<anyhow::Result<_>>()?;
                let speedup = ninf_cli::testbed::Profile::load(&profile)?.speedup;
                print!("{}", ninf_cli::experiment::paper_tables(&parsed, speedup));
                Ok(())
            }
            ExperimentKind::Wan {
                profile,
                scheduler,
                workload,
                sizes,
                trials,
                prefix,
                out,
                settle_seconds,
                predictor,
                json,
            } => {
                predictor
                    .parse::<ninf_scheduling::PredictorKind>()
                    .map_err(anyhow::Error::msg)?;
                let bin_dir = bin_dir()?;
                let options = ninf_cli::experiment::WanOptions {
                    predictor,
                    profile: profile.clone(),
                    schedulers: scheduler,
                    workloads: workload,
                    sizes,
                    trials,
                    prefix,
                    bin_dir,
                    settle_seconds,
                };
                let results = ninf_cli::experiment::run(&options)?;
                if let Some(dir) = out {
                    std::fs::create_dir_all(&dir)?;
                    let lines: Vec<String> = results
                        .iter()
                        .map(serde_json::to_string)
                        .collect::<Result<_, _>>()?;
                    std::fs::write(dir.join("results.jsonl"), lines.join("\n") + "\n")?;
                    std::fs::write(
                        dir.join("results.md"),
                        ninf_cli::experiment::markdown(&results),
                    )?;
                    let speedup = ninf_cli::testbed::Profile::load(&profile)?.speedup;
                    std::fs::write(
                        dir.join("paper-tables.md"),
                        ninf_cli::experiment::paper_tables(&results, speedup),
                    )?;
                    for path in ninf_cli::experiment::plot(&results, &dir)? {
                        eprintln!("wrote {}", path.display());
                    }
                }
                if json {
                    for r in &results {
                        println!("{}", serde_json::to_string(r)?);
                    }
                } else {
                    print!("{}", ninf_cli::experiment::markdown(&results));
                }
                Ok(())
            }
        },
        Command::Chaos {
            transactions,
            concurrency,
            kill_every,
            down,
            cpu_slowdown,
            metaserver_every,
            suspect_seconds,
            json,
        } => {
            let bin_dir = bin_dir()?;
            let report = ninf_cli::chaos::run(&ninf_cli::chaos::ChaosOptions {
                bin_dir,
                transactions,
                concurrency,
                kill_every_seconds: kill_every,
                down_seconds: down,
                cpu_slowdown,
                metaserver_every,
                suspect_seconds,
            })?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                print!("{}", ninf_cli::chaos::render(&report));
            }
            if !report.clean() {
                anyhow::bail!(
                    "the grid lost, corrupted or leaked something under faults: {} lost, {} mismatched, {} bytes and {} processes left",
                    report.lost,
                    report.mismatched,
                    report.leaked_bytes,
                    report.leaked_processes
                );
            }
            Ok(())
        }
        Command::ExperimentClient {
            proxy,
            metaserver,
            servers,
            schedulers,
            workloads,
            sizes,
            trials,
            settle_seconds,
            profile,
            sites,
        } => ninf_cli::experiment::client(&ninf_cli::experiment::ClientOptions {
            proxy,
            metaserver,
            servers,
            schedulers,
            workloads,
            sizes,
            trials,
            settle_seconds,
            profile,
            sites: sites
                .iter()
                .filter_map(|s| {
                    s.split_once('=')
                        .map(|(a, b)| (a.to_string(), b.to_string()))
                })
                .collect(),
        }),
        Command::DagBench {
            tasks,
            ccr,
            graphs,
            servers,
            schedulers,
            seed,
            json,
        } => {
            let options = ninf_cli::dag_bench::DagBenchOptions {
                tasks,
                ccr,
                graphs,
                servers,
                schedulers,
                seed,
            };
            for r in ninf_cli::dag_bench::run(&options)? {
                if json {
                    println!("{}", serde_json::to_string(&r)?);
                } else {
                    println!(
                        "{:>4} tasks, CCR {:<4} {:<7} makespan/HEFT {:.3}  SLR {:.2}  best in {}/{}  {:.1} ms",
                        r.tasks,
                        r.ccr,
                        r.scheduler,
                        r.makespan_over_heft,
                        r.slr,
                        r.best,
                        r.graphs,
                        r.schedule_ms
                    );
                }
            }
            Ok(())
        }
        Command::GangAlloc {
            policy,
            jobs,
            load,
            mean_ms,
            processors,
            seed,
            json,
            data_dir,
        } => {
            let policy: ninf_gang::Policy =
                policy.parse().map_err(|e: String| anyhow::anyhow!(e))?;
            let options = AllocationOptions {
                policy,
                jobs,
                load,
                mean_seconds: mean_ms / 1000.0,
                processors,
                seed,
                data_dir: bench_dir(data_dir),
            };
            let result = runtime()?.block_on(gang_bench::allocation(options))?;
            if json {
                println!("{}", serde_json::to_string(&result)?);
            } else {
                println!(
                    "{}: {} jobs on {} processors at load {}: utilisation {:.1}%, mean response {:.3} s, mean wait {:.3} s, makespan {:.1} s; simulated: utilisation {:.1}%, mean response {:.3} s ({:+.1}%)",
                    result.policy,
                    result.jobs,
                    result.processors,
                    result.load,
                    result.utilization * 100.0,
                    result.mean_response_s,
                    result.mean_wait_s,
                    result.makespan_s,
                    result.sim_utilization * 100.0,
                    result.sim_mean_response_s,
                    result.response_gap * 100.0
                );
            }
            Ok(())
        }
    }
}

fn bench_dir(data_dir: Option<PathBuf>) -> PathBuf {
    data_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("ninf-bench-{}", std::process::id())))
}
