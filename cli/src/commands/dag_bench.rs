//! `ninf dag-bench`: the metaserver's schedulers on random layered task graphs (nothing runs).

use clap::Args;

#[derive(Args)]
pub struct DagBenchArgs {
    /// Graph sizes (tasks).
    #[arg(long, value_delimiter = ',', default_value = "50,100,200,500")]
    pub tasks: Vec<usize>,
    /// Communication-to-computation ratios.
    #[arg(long, value_delimiter = ',', default_value = "0.1,1,10")]
    pub ccr: Vec<f64>,
    /// Graphs (and platforms) per setting.
    #[arg(long, default_value_t = 10)]
    pub graphs: u64,
    /// Servers per platform.
    #[arg(long, default_value_t = 6)]
    pub servers: usize,
    #[arg(long, value_delimiter = ',', default_value = "simple,flow,heft,search")]
    pub schedulers: Vec<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: DagBenchArgs) -> anyhow::Result<()> {
    let DagBenchArgs {
        tasks,
        ccr,
        graphs,
        servers,
        schedulers,
        seed,
        json,
    } = args;
    let options = ninf_lab::dag_bench::DagBenchOptions {
        tasks,
        ccr,
        graphs,
        servers,
        schedulers,
        seed,
    };
    for r in ninf_lab::dag_bench::run(&options)? {
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
