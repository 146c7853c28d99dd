//! `ninf load`: many client programs at once through one proxy, on a grid of real processes;
//! fails unless every transaction completes bit-exact and the servers keep nothing after.

use anyhow::Context;
use clap::Args;

#[derive(Args)]
pub struct LoadArgs {
    /// Client programs at once, each its own identity at the proxy.
    #[arg(long, default_value_t = 100)]
    pub clients: usize,
    /// Transactions (cascades) each client runs, one after another.
    #[arg(long, default_value_t = 100)]
    pub transactions: usize,
    /// Order of the cascade's matrices.
    #[arg(long, default_value_t = 16)]
    pub n: usize,
    #[arg(long, default_value_t = 3)]
    pub servers: usize,
    /// Rounds of the whole load; the proxy's memory is read after each.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// The metaserver's resource DB (postgres://...); default SQLite.
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// The proxy's journal: a SQLite path, postgres://USER:PASSWORD@HOST/DB, or `off`
    /// (default: a SQLite file beside the proxy's configuration).
    #[arg(long, value_name = "PATH|URL|off")]
    pub proxy_journal: Option<String>,
    /// The metaserver predicts with its model alone (`calibrate = false`).
    #[arg(long)]
    pub no_calibrate: bool,
    /// The metaserver expects of each graph what its model predicts, not what like graphs
    /// took (`templates = false`).
    #[arg(long)]
    pub no_templates: bool,
    /// The metaserver's predictor: latest (the metaserver paper's), forecast (NWS-style) or capacity
    /// (docs/scheduling.md); default the metaserver's.
    #[arg(long, value_parser = super::PREDICTORS)]
    pub predictor: Option<String>,
    /// The proxy's run slots over all clients (`max_running_transactions`): graphs past it
    /// wait at the proxy before they are placed. 0: no limit.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_running: usize,
    /// Stop with an error naming any transaction still unanswered after this long, keeping
    /// the grid's files (its database and the proxy's journal) for a look.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    pub stall_seconds: f64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: LoadArgs) -> anyhow::Result<()> {
    super::end_children_on_signal()?;
    let report = ninf_grid::load::run(&ninf_grid::load::LoadOptions {
        bin_dir: super::bin_dir()?,
        clients: args.clients,
        transactions: args.transactions,
        n: args.n,
        servers: args.servers,
        rounds: args.rounds,
        database_url: args.database_url,
        proxy_journal: args.proxy_journal,
        calibrate: !args.no_calibrate,
        templates: !args.no_templates,
        predictor: args.predictor,
        max_running: args.max_running,
        stall: std::time::Duration::try_from_secs_f64(args.stall_seconds)
            .ok()
            .filter(|d| !d.is_zero())
            .with_context(|| {
                format!(
                    "--stall-seconds must be a positive number of seconds, not {}",
                    args.stall_seconds
                )
            })?,
    })?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", ninf_grid::load::render(&report));
    }
    if report.completed != report.transactions || report.leaked_bytes > 0 {
        anyhow::bail!(
            "under load the grid lost, corrupted or leaked something: {} failed, {} mismatched, {} bytes left",
            report.failed,
            report.mismatched,
            report.leaked_bytes
        );
    }
    Ok(())
}
