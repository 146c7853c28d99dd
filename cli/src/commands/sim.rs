//! `ninf sim`: the scheduling simulator over the papers' workloads and policies.

use std::path::PathBuf;

use clap::Args;
use ninf_lab::simulate::{self, SimOptions, Workload};

#[derive(Args)]
pub struct SimArgs {
    /// cenju3 (the FPMPFS paper), dqt (the gang thesis Table 7.1), hetero-a, hetero-b or hetero-b-even (the migration paper), lublin
    /// (Lublin-Feitelson model) or swf:PATH.
    #[arg(long, default_value = "cenju3")]
    pub workload: String,
    /// One or more of fcfs, fpfs, fpmpfs, easy, conservative, gang, dqt-{max,min,apa,ff,ff-apa}, fair-dqt-{...}.
    #[arg(long, value_delimiter = ',', default_value = "fpfs")]
    pub policy: Vec<String>,
    /// Offered loads (generated workloads).
    #[arg(long, value_delimiter = ',', default_value = "0.8")]
    pub load: Vec<f64>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Seeds to average over (seed, seed+1, ...).
    #[arg(long, default_value_t = 1)]
    pub seeds: u64,
    #[arg(long, default_value_t = 600.0)]
    pub wait_limit: f64,
    #[arg(long)]
    pub processors: Option<u32>,
    /// Jobs of a generated workload.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Also write utilization.svg and response.svg (against load) into this folder.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Policies `gang` and `dqt-*`: slot length in seconds (default 1 for the `dqt`
    /// workload, 0.1 otherwise).
    #[arg(long)]
    pub quantum: Option<f64>,
    /// Policies `dqt-*`: children per node of the queue tree.
    #[arg(long, default_value_t = 2)]
    pub width: u32,
    /// Policies `mct*`: the migration cost the scheduler predicts, seconds per GB (at
    /// least the actual 24.7; 50 and 75 over-estimate 2x and 3x).
    #[arg(long, default_value_t = 25.0)]
    pub migration_cost: f64,
    /// Workloads `hetero-*`: `--load` is the load of the fast pool (`fast`: every job's work
    /// at fast speed over the fast pool) or of the whole system (`system`: both pools, a
    /// slow unit counted at its average share of a fast one's speed).
    #[arg(long, default_value = "fast")]
    pub load_basis: simulate::LoadBasis,
    /// Workload `cenju3`: how run times (mean 32 s) are drawn: `exponential` (CV 1),
    /// `fixed` (CV 0), `erlang:K` (CV 1/√K) or `hyper:CV` (CV above 1).
    #[arg(long, default_value = "exponential")]
    pub run_times: simulate::RunTimes,
    /// Policy `gang`: rows of the time table (multiprogramming level).
    #[arg(long, default_value_t = 4)]
    pub rows: usize,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let SimArgs {
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
        load_basis,
        run_times,
        rows,
        json,
    } = args;
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
        load_basis,
        run_times,
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
