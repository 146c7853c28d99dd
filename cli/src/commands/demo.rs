//! `ninf demo`: a grid of 3 servers runs the metaserver paper's workloads under each scheduler, checked
//! against the same routines run locally.

use clap::Args;
use ninf_grid::demo::{self, DemoOptions};
use ninf_grid::embedded::{EmbeddedGrid, GridOptions};

#[derive(Args)]
pub struct DemoArgs {
    #[arg(long)]
    pub json: bool,
    #[arg(long, value_delimiter = ',', default_value = "simple,flow")]
    pub schedulers: Vec<String>,
    /// Order of the dgefa/dgesl pairs.
    #[arg(long, default_value_t = 400)]
    pub pairs_n: usize,
    /// Order of the cascaded products.
    #[arg(long, default_value_t = 200)]
    pub cascade_n: usize,
    #[arg(long, default_value_t = 3)]
    pub trials: usize,
    /// Relative speeds of the 3 servers.
    #[arg(long, value_delimiter = ',', default_value = "2,1,1")]
    pub speeds: Vec<u32>,
    /// The metaserver's resource DB: postgres://USER:PASSWORD@HOST/DB, or sqlite:PATH;
    /// default SQLite in the data directory (docs/metaserver.md).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Predict with the model alone: the metaserver does not learn routines' speeds and
    /// per-call costs from the graphs that ran (its `calibrate = false`).
    #[arg(long)]
    pub no_calibrate: bool,
    /// The metaserver expects of each graph what its model predicts, not what like graphs
    /// took (its `templates = false`).
    #[arg(long)]
    pub no_templates: bool,
    /// The metaserver's predictor: latest (the metaserver paper's), forecast (NWS-style) or capacity
    /// (docs/scheduling.md); default the metaserver's.
    #[arg(long, value_parser = super::PREDICTORS)]
    pub predictor: Option<String>,
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let DemoArgs {
        json,
        schedulers,
        pairs_n,
        cascade_n,
        trials,
        speeds,
        database_url,
        no_calibrate,
        no_templates,
        predictor,
    } = args;
    let data_dir = std::env::temp_dir().join(format!("ninf-demo-{}", std::process::id()));
    let runtime = super::runtime()?;
    let grid = runtime.block_on(async {
        let mut options = GridOptions::new(speeds, &data_dir);
        options.database_url = database_url;
        options.calibrate = !no_calibrate;
        options.templates = !no_templates;
        if let Some(predictor) = predictor {
            options.predictor = predictor;
        }
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
    let worst = ninf_grid::workloads::worst_error(summaries.iter().map(|s| s.max_abs_error));
    if worst.is_nan() || worst >= 1e-6 {
        anyhow::bail!("results differ from the local computation by {worst}");
    }
    if leftover.iter().any(|&b| b > 0) {
        anyhow::bail!("intermediates were left on the servers: {leftover:?} bytes");
    }
    Ok(())
}
