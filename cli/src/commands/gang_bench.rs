//! `ninf gang-bench`: gang scheduling's overhead, switches, table messages and switch skew on
//! this machine.

use std::path::PathBuf;

use clap::Args;
use ninf_lab::gang_bench::{self, OverheadOptions};

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
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

pub fn run(args: GangBenchArgs) -> anyhow::Result<()> {
    let GangBenchArgs {
        quantum_ms,
        jobs,
        job_seconds,
        processors,
        nodes,
        trials,
        json,
        data_dir,
    } = args;
    let options = OverheadOptions {
        quantum_ms,
        jobs,
        job_seconds,
        processors,
        nodes,
        trials,
        data_dir: super::bench_dir(data_dir),
    };
    let result = super::runtime()?.block_on(gang_bench::overhead(options))?;
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
