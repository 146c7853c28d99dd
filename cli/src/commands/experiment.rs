//! `ninf experiment wan|tables|partition|kept-data|transfers`: the metaserver paper's
//! experiment on the testbed and its tables beside the metaserver paper's, partitions of a
//! site during a run, data kept on the grid against sent across the links, and the
//! predictor's transfer estimates against timed transfers; `experiment-client`,
//! `partition-client`, `kept-data-client` and `transfers-client` are their client sides, run
//! inside the client's site.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct ExperimentArgs {
    #[command(subcommand)]
    pub kind: ExperimentKind,
}

#[derive(Subcommand)]
pub enum ExperimentKind {
    /// The metaserver paper's Tables 2-5 next to ours, from the JSON lines `wan` wrote.
    Tables {
        /// A results.jsonl written by `ninf experiment wan --out`.
        results: PathBuf,
        /// The profile the results were measured on (for its speedup).
        #[arg(long, default_value = "paper")]
        profile: String,
    },
    /// The metaserver paper's experiment: the pairs and cascade workloads under each scheduler.
    Wan {
        #[arg(long, default_value = "paper")]
        profile: String,
        /// Schedulers to compare; `seed-simple` and `seed-flow` are the metaserver paper's own.
        #[arg(long, value_delimiter = ',', default_value = "seed-simple,seed-flow")]
        scheduler: Vec<String>,
        /// pairs, cascade or both.
        #[arg(long, value_delimiter = ',', default_value = "pairs,cascade")]
        workload: Vec<String>,
        /// Matrix orders for every workload; by default the metaserver paper's: pairs 100,300,500,700
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
        /// The metaserver's predictor: latest (the metaserver paper's), forecast, or capacity.
        #[arg(long, default_value = "latest")]
        predictor: String,
        /// The metaserver predicts with its model alone (`calibrate = false`), as the metaserver paper's
        /// did.
        #[arg(long)]
        no_calibrate: bool,
        #[arg(long)]
        json: bool,
    },
    /// Cuts a server site off (its traffic dropped by the router), again and again, while
    /// the chaos test's transactions run; fails unless all complete bit-exact with nothing
    /// left on the servers (needs root).
    Partition {
        #[arg(long, default_value = "lan")]
        profile: String,
        /// The site to cut off; default: the first server site.
        #[arg(long)]
        site: Option<String>,
        #[arg(long, default_value_t = 30)]
        transactions: usize,
        #[arg(long, default_value_t = 3)]
        concurrency: usize,
        /// Seconds of connectivity before each cut.
        #[arg(long, default_value_t = 4.0)]
        up_seconds: f64,
        /// Seconds each cut lasts.
        #[arg(long, default_value_t = 5.0)]
        cut_seconds: f64,
        /// A factor on the profile's processor slowdowns (calls last long enough to be cut).
        #[arg(long, default_value_t = 200.0)]
        slowdown: f64,
        #[arg(long, default_value = "ninf-pt")]
        prefix: String,
        #[arg(long)]
        json: bool,
    },
    /// Factor once, solve many across the testbed's links: dgefa on a matrix, then many
    /// dgesl at once, with the matrix kept on the grid and with the factors sent with every
    /// solve, in turn; every solution checked against the local run (needs root).
    KeptData {
        #[arg(long, default_value = "lan")]
        profile: String,
        /// The matrix's order.
        #[arg(long, default_value_t = 2000)]
        n: usize,
        #[arg(long, default_value_t = 50)]
        solves: usize,
        #[arg(long, default_value_t = 3)]
        trials: usize,
        #[arg(long, default_value = "ninf-kd")]
        prefix: String,
        #[arg(long)]
        json: bool,
    },
    /// The predictor's transfer estimates against transfers timed across the testbed's
    /// links: puts from the client's site to every server and copies between servers of
    /// different sites, each predicted from the samples the metaserver had (needs root).
    Transfers(TransfersArgs),
}

#[derive(Args)]
pub struct TransfersArgs {
    /// `sites` has three servers in each server site, so that some paths are never
    /// measured and are estimated from their sites' samples.
    #[arg(long, default_value = "sites")]
    profile: String,
    /// Bytes of each timed transfer.
    #[arg(long, value_delimiter = ',', default_value = "262144,1048576,4194304")]
    sizes: Vec<u64>,
    #[arg(long, default_value_t = 3)]
    trials: usize,
    #[arg(long, default_value = "ninf-tx")]
    prefix: String,
    #[arg(long)]
    json: bool,
}

pub fn run(args: ExperimentArgs) -> anyhow::Result<()> {
    super::end_children_on_signal()?;
    match args.kind {
        ExperimentKind::Tables { results, profile } => tables(results, &profile),
        ExperimentKind::Transfers(args) => transfers(args),
        ExperimentKind::KeptData {
            profile,
            n,
            solves,
            trials,
            prefix,
            json,
        } => kept_data(
            ninf_lab::kept_data::KeptDataOptions {
                bed: bed_options(profile, prefix)?,
                n,
                solves,
                trials: trials.max(1),
            },
            json,
        ),
        ExperimentKind::Partition {
            profile,
            site,
            transactions,
            concurrency,
            up_seconds,
            cut_seconds,
            slowdown,
            prefix,
            json,
        } => {
            let report = ninf_lab::partition::run(&ninf_lab::partition::PartitionOptions {
                profile,
                prefix,
                bin_dir: super::bin_dir()?,
                transactions,
                concurrency,
                site,
                up_seconds,
                cut_seconds,
                slowdown,
            })?;
            print_report(json, serde_json::to_string(&report)?, || {
                ninf_lab::partition::render(&report)
            });
            if !report.clean() {
                anyhow::bail!(
                    "the grid lost, corrupted or leaked something across partitions: {} lost, {} mismatched, {} bytes left",
                    report.counts.lost,
                    report.counts.mismatched,
                    report.counts.leaked_bytes
                );
            }
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
            no_calibrate,
            json,
        } => {
            predictor
                .parse::<ninf_scheduling::PredictorKind>()
                .map_err(anyhow::Error::msg)?;
            let bin_dir = super::bin_dir()?;
            let options = ninf_lab::experiment::WanOptions {
                predictor,
                calibrate: !no_calibrate,
                profile: profile.clone(),
                schedulers: scheduler,
                workloads: workload,
                sizes,
                trials,
                prefix,
                bin_dir,
                settle_seconds,
            };
            let results = ninf_lab::experiment::run(&options)?;
            if let Some(dir) = out {
                std::fs::create_dir_all(&dir)?;
                let lines: Vec<String> = results
                    .iter()
                    .map(serde_json::to_string)
                    .collect::<Result<_, _>>()?;
                std::fs::write(dir.join("results.jsonl"), lines.join("\n") + "\n")?;
                std::fs::write(
                    dir.join("results.md"),
                    ninf_lab::experiment::markdown(&results),
                )?;
                let speedup = ninf_lab::testbed::Profile::load(&profile)?.speedup;
                std::fs::write(
                    dir.join("paper-tables.md"),
                    ninf_lab::experiment::paper_tables(&results, speedup),
                )?;
                for path in ninf_lab::experiment::plot(&results, &dir)? {
                    eprintln!("wrote {}", path.display());
                }
            }
            if json {
                for r in &results {
                    println!("{}", serde_json::to_string(r)?);
                }
            } else {
                print!("{}", ninf_lab::experiment::markdown(&results));
            }
            Ok(())
        }
    }
}

/// A report as one JSON object (`as_json`), or as its text.
fn print_report(json: bool, as_json: String, as_text: impl FnOnce() -> String) {
    if json {
        println!("{as_json}");
    } else {
        print!("{}", as_text());
    }
}

fn tables(results: PathBuf, profile: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&results)
        .with_context(|| format!("cannot read {}", results.display()))?;
    let parsed: Vec<ninf_lab::experiment::WanResult> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a result line", results.display(), i + 1))
        })
        .collect::<anyhow::Result<_>>()?;
    let speedup = ninf_lab::testbed::Profile::load(profile)?.speedup;
    print!("{}", ninf_lab::experiment::paper_tables(&parsed, speedup));
    Ok(())
}

#[derive(Args)]
pub struct ClientArgs {
    #[command(flatten)]
    pub grid: GridAddresses,
    #[arg(long)]
    pub servers: usize,
    #[arg(long, value_delimiter = ',')]
    pub schedulers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    #[arg(long)]
    pub trials: usize,
    #[arg(long)]
    pub settle_seconds: f64,
    #[arg(long)]
    pub profile: String,
    /// site=address of each server.
    #[arg(long, value_delimiter = ',')]
    pub sites: Vec<String>,
}

pub fn run_client(args: ClientArgs) -> anyhow::Result<()> {
    let ClientArgs {
        grid: GridAddresses { proxy, metaserver },
        servers,
        schedulers,
        workloads,
        sizes,
        trials,
        settle_seconds,
        profile,
        sites,
    } = args;
    ninf_lab::experiment::client(&ninf_lab::experiment::ClientOptions {
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
    })
}

#[derive(Args)]
pub struct PartitionClientArgs {
    #[command(flatten)]
    pub grid: GridAddresses,
    /// The compute servers' addresses.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    #[arg(long)]
    pub transactions: usize,
    #[arg(long)]
    pub concurrency: usize,
}

pub fn run_partition_client(args: PartitionClientArgs) -> anyhow::Result<()> {
    ninf_lab::partition::client(
        &args.grid.proxy,
        &args.grid.metaserver,
        &args.servers,
        args.transactions,
        args.concurrency,
    )
}

fn kept_data(options: ninf_lab::kept_data::KeptDataOptions, json: bool) -> anyhow::Result<()> {
    let report = ninf_lab::kept_data::run(&options)?;
    print_report(json, serde_json::to_string(&report)?, || {
        ninf_lab::kept_data::render(&report)
    });
    // Bit for bit: the grid runs the same routines as the local check.
    if report.figures.max_abs_error != 0.0 {
        anyhow::bail!(
            "a solution differs from the local computation by {:e}",
            report.figures.max_abs_error
        );
    }
    Ok(())
}

/// The testbed of `profile` under `prefix`, running the programs beside this one.
fn bed_options(profile: String, prefix: String) -> anyhow::Result<ninf_lab::bed_grid::BedOptions> {
    Ok(ninf_lab::bed_grid::BedOptions {
        profile,
        prefix,
        bin_dir: super::bin_dir()?,
    })
}

fn transfers(args: TransfersArgs) -> anyhow::Result<()> {
    if args.sizes.contains(&0) {
        anyhow::bail!("--sizes: a transfer of 0 bytes has nothing to time");
    }
    let report = ninf_lab::transfers::run(&ninf_lab::transfers::TransfersOptions {
        bed: bed_options(args.profile, args.prefix)?,
        sizes: args.sizes,
        trials: args.trials.max(1),
    })?;
    print_report(args.json, serde_json::to_string(&report)?, || {
        ninf_lab::transfers::render(&report)
    });
    // A path nobody measured is predicted from its sites' samples: none may be left out.
    if !report.unpredicted.is_empty() {
        anyhow::bail!(
            "the predictor had no sample for {} transfer(s): {}",
            report.unpredicted.len(),
            report.unpredicted.join("; ")
        );
    }
    Ok(())
}

/// The grid an experiment's client part talks to, as its driver passes it.
#[derive(Args)]
pub struct GridAddresses {
    #[arg(long)]
    pub proxy: String,
    #[arg(long)]
    pub metaserver: String,
}

#[derive(Args)]
pub struct TransfersClientArgs {
    #[command(flatten)]
    pub grid: GridAddresses,
    /// The compute servers' addresses.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<String>,
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<u64>,
    #[arg(long)]
    pub trials: usize,
}

pub fn run_transfers_client(args: TransfersClientArgs) -> anyhow::Result<()> {
    ninf_lab::transfers::client(
        &args.grid.proxy,
        &args.grid.metaserver,
        &args.servers,
        &args.sizes,
        args.trials,
    )
}

#[derive(Args)]
pub struct KeptDataClientArgs {
    #[command(flatten)]
    pub grid: GridAddresses,
    /// How many compute servers to wait for.
    #[arg(long)]
    pub servers: usize,
    #[arg(long)]
    pub n: usize,
    #[arg(long)]
    pub solves: usize,
    #[arg(long)]
    pub trials: usize,
}

pub fn run_kept_data_client(args: KeptDataClientArgs) -> anyhow::Result<()> {
    ninf_lab::kept_data::client(
        &args.grid.proxy,
        &args.grid.metaserver,
        args.servers,
        (args.n, args.solves, args.trials),
    )
}
