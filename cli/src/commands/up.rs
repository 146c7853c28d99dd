//! `ninf up`: an embedded grid on loopback until Ctrl-C, with its token (and TLS if asked).

use std::path::PathBuf;

use clap::Args;
use ninf_grid::embedded::{EmbeddedGrid, GridOptions, ModuleConfig};

#[derive(Args)]
pub struct UpArgs {
    #[arg(long, default_value_t = 2)]
    pub servers: usize,
    /// Relative speeds (processors offered), e.g. 2,1; default 1 each.
    #[arg(long, value_delimiter = ',')]
    pub speeds: Vec<u32>,
    #[arg(long, default_value = "flow")]
    pub scheduler: String,
    /// latest (the paper's predictor), forecast (NWS-style) or capacity (see docs/scheduling.md).
    #[arg(long, default_value = "latest")]
    pub predictor: String,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Run every connection over TLS, with a new certificate authority and certificates
    /// in DATA_DIR/tls.
    #[arg(long)]
    pub tls: bool,
    /// Serve the selftest module too (noop, echo, sleep_ms, fail, ...), for checking and
    /// benchmarking the grid.
    #[arg(long)]
    pub selftest: bool,
    /// Every server serves this module too (repeatable): IDL=EXECUTABLE, as `ninf-gen
    /// build` writes it (docs/authors.md).
    #[arg(long = "module", value_name = "IDL=EXECUTABLE")]
    pub modules: Vec<String>,
    /// The metaserver's resource DB: postgres://USER:PASSWORD@HOST/DB, or sqlite:PATH;
    /// default SQLite in the data directory (docs/metaserver.md).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Do not let the servers lend each other the cores they leave idle: every call then
    /// computes on its own server's core alone (docs/gang.md, "Cores lent between servers").
    #[arg(long)]
    pub no_lend_cores: bool,
    /// Issue every call of a transaction as soon as it is ready, instead of letting its long
    /// calls take turns on their server (docs/scheduling.md, "Turns").
    #[arg(long)]
    pub no_turns: bool,
}

pub fn run(args: UpArgs) -> anyhow::Result<()> {
    let options = grid_options(args)?;
    let data_dir = options.data_dir.clone();
    super::runtime()?.block_on(async move {
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
        for (service, address) in &grid.endpoints.metrics {
            println!("metrics    {service} http://{address}/metrics");
        }
        if let Some(link) = grid.endpoints.dashboard_link()? {
            println!("dashboard  {link}");
        }
        println!("grid is up; `ninf status` in another terminal; Ctrl-C stops it");
        ninf_proto::shutdown::signal().await;
        grid.stop().await;
        println!("stopped");
        anyhow::Ok(())
    })
}

/// The grid the flags ask for.
fn grid_options(args: UpArgs) -> anyhow::Result<GridOptions> {
    let UpArgs {
        servers,
        speeds,
        scheduler,
        predictor,
        data_dir,
        tls,
        selftest,
        modules,
        database_url,
        no_lend_cores,
        no_turns,
    } = args;
    let extra_modules = modules
        .iter()
        .map(|flag| ModuleConfig::from_flag(flag))
        .collect::<Result<Vec<_>, String>>()
        .map_err(anyhow::Error::msg)?;
    let data_dir = data_dir.unwrap_or_else(ninf_grid::default_data_dir);
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
    let mut options = GridOptions::new(processors, &data_dir);
    options.scheduler = scheduler;
    options.predictor = predictor;
    options.auth = true;
    options.tls = tls;
    if selftest {
        options.modules = ninf_grid::embedded::modules_with_selftest(&data_dir)?;
    }
    options.extra_modules = extra_modules;
    options.database_url = database_url;
    options.lend_cores = !no_lend_cores;
    options.turns = !no_turns;
    Ok(options)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clap::Parser;

    use super::{UpArgs, grid_options};

    #[derive(Parser)]
    struct Up {
        #[command(flatten)]
        args: UpArgs,
    }

    fn options(flags: &[&str]) -> anyhow::Result<ninf_grid::embedded::GridOptions> {
        let mut argv = vec!["up", "--data-dir", "/nonexistent/ninf-up-test"];
        argv.extend_from_slice(flags);
        grid_options(Up::try_parse_from(argv)?.args)
    }

    #[test]
    fn turns_and_lent_cores_are_on_unless_switched_off_by_their_flags() {
        let default = options(&[]).unwrap();
        assert!(default.turns && default.lend_cores);
        assert_eq!(default.processors, [1, 1]);
        let off = options(&["--no-turns", "--no-lend-cores"]).unwrap();
        assert!(!off.turns && !off.lend_cores);
        let speeds = options(&["--servers", "3", "--speeds", "2,1,1", "--no-turns"]).unwrap();
        assert_eq!(speeds.processors, [2, 1, 1]);
        assert!(!speeds.turns && speeds.lend_cores);
    }

    #[test]
    fn speeds_that_do_not_match_the_servers_are_refused_naming_both() {
        let error = options(&["--servers", "3", "--speeds", "2,1"]).unwrap_err();
        assert_eq!(error.to_string(), "--speeds gives 2 values for 3 servers");
    }
}
