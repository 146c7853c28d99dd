//! `ninf gang-alloc`: the admission policies on a real run of short jobs.

use std::path::PathBuf;

use clap::Args;
use ninf_lab::gang_bench::{self, AllocationOptions, AllocationPolicy};

#[derive(Args)]
pub struct GangAllocArgs {
    /// fcfs, fpfs or fpmpfs (space sharing, one row), or dqt-ALLOCATION / fair-dqt-ALLOCATION
    /// (the gang thesis's Distributed Queue Tree; ALLOCATION is max, min, apa, ff or ff-apa).
    #[arg(long, default_value = "fpfs")]
    pub policy: String,
    /// Slot length with a DQT policy, milliseconds.
    #[arg(long, default_value_t = 100.0)]
    pub quantum_ms: f64,
    #[arg(long, default_value_t = 200)]
    pub jobs: usize,
    #[arg(long, default_value_t = 0.8)]
    pub load: f64,
    /// Mean run time of a job, milliseconds.
    #[arg(long, default_value_t = 100.0)]
    pub mean_ms: f64,
    #[arg(long)]
    pub processors: Option<u32>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

pub fn run(args: GangAllocArgs) -> anyhow::Result<()> {
    let GangAllocArgs {
        policy,
        quantum_ms,
        jobs,
        load,
        mean_ms,
        processors,
        seed,
        json,
        data_dir,
    } = args;
    let policy: AllocationPolicy = policy.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let options = AllocationOptions {
        policy,
        quantum: quantum_ms / 1000.0,
        jobs,
        load,
        mean_seconds: mean_ms / 1000.0,
        processors,
        seed,
        data_dir: super::bench_dir(data_dir),
    };
    let result = super::runtime()?.block_on(gang_bench::allocation(options))?;
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
