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
    /// The proxy, restarted on its journal.
    Proxy,
}

#[derive(Args)]
pub struct ChaosArgs {
    /// Transactions to send; more (up to ten times as many) while a kind of fault asked for
    /// has not yet happened.
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
    /// With servers, kill the proxy every this many faults instead (it comes first when
    /// both are due).
    #[arg(long, default_value_t = 5)]
    pub proxy_every: usize,
    /// What to kill: any of `server`, `metaserver`, `proxy` (default `server,metaserver`: one
    /// metaserver in --metaserver-every faults; with `proxy`, one proxy in
    /// --proxy-every). Without `server`, the others take turns.
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
    /// Whether the proxy sends large calls through the servers' same-host sockets
    /// (`same_host_calls` in its configuration); `false`: their TCP bulk ports.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub same_host_calls: bool,
    #[arg(long)]
    pub json: bool,
}

/// Every how many faults the metaserver and the proxy are killed (0: never), for the victims
/// named: with servers, as the flags say; without, the others take every fault in turn.
fn fault_cycle(
    kill: &[Victim],
    metaserver_every: usize,
    proxy_every: usize,
) -> anyhow::Result<(usize, usize)> {
    let metaserver = kill.contains(&Victim::Metaserver);
    let proxy = kill.contains(&Victim::Proxy);
    Ok(match (kill.contains(&Victim::Server), metaserver, proxy) {
        (true, m, p) => (
            if m { metaserver_every } else { 0 },
            if p { proxy_every } else { 0 },
        ),
        (false, true, true) => (1, 2),
        (false, true, false) => (1, 0),
        (false, false, true) => (0, 1),
        (false, false, false) => anyhow::bail!("--kill names nothing to kill"),
    })
}

pub fn run(args: ChaosArgs) -> anyhow::Result<()> {
    super::end_children_on_signal()?;
    let ChaosArgs {
        transactions,
        concurrency,
        kill_every,
        down,
        cpu_slowdown,
        metaserver_every,
        proxy_every,
        kill,
        metaservers,
        database_url,
        suspect_seconds,
        same_host_calls,
        json,
    } = args;
    let (metaserver_every, proxy_every) = fault_cycle(&kill, metaserver_every, proxy_every)?;
    let cycle = ninf_grid::chaos::FaultCycle {
        metaserver_every,
        proxy_every,
    };
    if let Some(never) = cycle.unreachable() {
        anyhow::bail!("{never}: choose a --metaserver-every that --proxy-every does not divide");
    }
    let bin_dir = super::bin_dir()?;
    let report = ninf_grid::chaos::run(&ninf_grid::chaos::ChaosOptions {
        bin_dir,
        transactions,
        concurrency,
        kill_every_seconds: kill_every,
        down_seconds: down,
        cpu_slowdown,
        metaserver_every,
        proxy_every,
        metaservers,
        database_url,
        suspect_seconds,
        same_host_calls,
    })?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", ninf_grid::chaos::render(&report));
    }
    if !report.clean() {
        anyhow::bail!(
            "the grid lost, corrupted or leaked something under faults: {} lost, {} mismatched, {} bytes, {} data handles and {} processes left",
            report.lost,
            report.mismatched,
            report.leaked_bytes,
            report.handles_left,
            report.leaked_processes
        );
    }
    if let Some(missing) = fault_missing((metaserver_every, proxy_every), &report) {
        anyhow::bail!(missing);
    }
    Ok(())
}

/// Why a run asked to kill the metaserver or the proxy proves nothing about it: it ended
/// before its first such fault (a fast machine, or too few transactions for the cycle).
fn fault_missing(
    (metaserver_every, proxy_every): (usize, usize),
    report: &ninf_grid::chaos::ChaosReport,
) -> Option<String> {
    let missing = |what: &str, every: usize, killed: usize| {
        (every > 0 && killed == 0).then(|| {
            format!(
                "the {what} was to be killed every {every} faults, but the run ended after {} \
                 faults in {:.1} s and {} transactions without killing it: give it more --transactions or a shorter --kill-every",
                report.faults_injected, report.seconds, report.transactions
            )
        })
    };
    missing("proxy", proxy_every, report.proxy_restarts)
        .or_else(|| missing("metaserver", metaserver_every, report.metaserver_restarts))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::Parser;

    use super::ChaosArgs;

    #[derive(Parser)]
    struct Chaos {
        #[command(flatten)]
        args: ChaosArgs,
    }

    #[test]
    fn same_host_calls_follows_the_proxy_default_and_takes_false_as_documented() {
        assert!(
            Chaos::try_parse_from(["chaos"])
                .unwrap()
                .args
                .same_host_calls
        );
        let off = Chaos::try_parse_from(["chaos", "--same-host-calls", "false"]).unwrap();
        assert!(!off.args.same_host_calls);
        let error = Chaos::try_parse_from(["chaos", "--same-host-calls", "maybe"])
            .err()
            .expect("not a boolean")
            .to_string();
        assert!(error.contains("invalid value 'maybe'"), "{error}");
        assert!(error.contains("--same-host-calls"), "{error}");
    }

    #[test]
    fn a_run_asked_to_kill_the_proxy_or_the_metaserver_that_never_did_fails_saying_so() {
        let report = |metaserver_restarts, proxy_restarts| ninf_grid::chaos::ChaosReport {
            transactions: 400,
            faults_injected: 2,
            metaserver_restarts,
            proxy_restarts,
            seconds: 4.5,
            ..Default::default()
        };
        let missing = super::fault_missing((0, 3), &report(0, 0)).expect("no proxy fault");
        assert!(
            missing.starts_with(
                "the proxy was to be killed every 3 faults, but the run ended after 2 faults in 4.5 s and 400 transactions"
            ),
            "{missing}"
        );
        let missing = super::fault_missing((5, 0), &report(0, 0)).expect("no metaserver fault");
        assert!(
            missing.starts_with("the metaserver was to be killed every 5"),
            "{missing}"
        );
        assert_eq!(super::fault_missing((5, 3), &report(1, 1)), None);
        assert_eq!(
            super::fault_missing((0, 0), &report(0, 0)),
            None,
            "not asked"
        );
    }
}
