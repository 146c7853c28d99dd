//! `ninf chaos`: transactions on a grid of real processes while its servers and metaserver are
//! killed and restarted; fails unless everything completes bit-exact with nothing left behind.

use clap::Args;

/// What a chaos run kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Victim {
    /// A compute server, each in turn.
    Server,
    /// The metaserver (with --metaservers 2 or more, the active one).
    Metaserver,
}

#[derive(Args)]
pub struct ChaosArgs {
    #[arg(long, default_value_t = 50)]
    pub transactions: usize,
    /// Transactions in flight at once.
    #[arg(long, default_value_t = 3)]
    pub concurrency: usize,
    /// Seconds between kills.
    #[arg(long, default_value_t = 1.0)]
    pub kill_every: f64,
    /// Seconds a killed server stays down.
    #[arg(long, default_value_t = 0.5)]
    pub down: f64,
    /// Emulated processor slowdown of the servers (calls last long enough to be hit).
    #[arg(long, default_value_t = 400.0)]
    pub cpu_slowdown: f64,
    /// Every this many faults, kill the (active) metaserver instead of a server (0: never).
    #[arg(long, default_value_t = 5)]
    pub metaserver_every: usize,
    /// What to kill: `server` and `metaserver` (the default, one metaserver in
    /// --metaserver-every faults), or only one of them.
    #[arg(long, value_delimiter = ',', default_value = "server,metaserver")]
    pub kill: Vec<Victim>,
    /// Metaservers: 1 on SQLite; 2 or more share one PostgreSQL (a private cluster unless
    /// --database-url is given) and each metaserver fault kills the active one.
    #[arg(long, default_value_t = 1)]
    pub metaservers: usize,
    /// The PostgreSQL the metaservers share (postgres://USER:PASSWORD@HOST/DB).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// How long the proxy avoids a server after it failed a call, for every graph
    /// (0: each graph learns of the failure by itself).
    #[arg(long, default_value_t = 30.0)]
    pub suspect_seconds: f64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let ChaosArgs {
        transactions,
        concurrency,
        kill_every,
        down,
        cpu_slowdown,
        metaserver_every,
        kill,
        metaservers,
        database_url,
        suspect_seconds,
        json,
    } = args;
    let metaserver_every = match (
        kill.contains(&Victim::Server),
        kill.contains(&Victim::Metaserver),
    ) {
        (true, true) => metaserver_every,
        (true, false) => 0,
        (false, true) => 1,
        (false, false) => anyhow::bail!("--kill names nothing to kill"),
    };
    let bin_dir = super::bin_dir()?;
    let report = ninf_grid::chaos::run(&ninf_grid::chaos::ChaosOptions {
        bin_dir,
        transactions,
        concurrency,
        kill_every_seconds: kill_every,
        down_seconds: down,
        cpu_slowdown,
        metaserver_every,
        metaservers,
        database_url,
        suspect_seconds,
    })?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", ninf_grid::chaos::render(&report));
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
