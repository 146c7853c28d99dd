//! `ninf testbed up|down`: the wide-area testbed's sites as network namespaces with shaped
//! links (root); `delay` is the forwarder it runs in its router namespace.

use anyhow::Context;
use clap::{Args, Subcommand};
use ninf_lab::testbed::{Profile, Testbed};

#[derive(Args)]
pub struct TestbedArgs {
    #[command(subcommand)]
    pub action: TestbedAction,
}

#[derive(Subcommand)]
pub enum TestbedAction {
    /// Builds the testbed of a profile (tearing down an earlier one first) and leaves it up.
    Up {
        /// `paper`, `lan` or a profile file.
        #[arg(long, default_value = "paper")]
        profile: String,
        #[arg(long, default_value = "ninf-tb")]
        prefix: String,
    },
    /// Kills everything in the testbed's sites and deletes them.
    Down {
        #[arg(long, default_value = "ninf-tb")]
        prefix: String,
    },
    /// The delay forwarder, run by the testbed inside its router namespace.
    #[command(hide = true)]
    Delay {
        /// The TUN device the router sends packets to.
        #[arg(long)]
        device: String,
        /// SITE:SITE:MICROSECONDS, the one-way delay of a pair of sites.
        #[arg(long = "pair")]
        pairs: Vec<ninf_lab::latency::PairDelay>,
    },
}

pub fn run(args: TestbedArgs) -> anyhow::Result<()> {
    let action = args.action;
    match action {
        TestbedAction::Up { profile, prefix } => {
            let ninf = std::env::current_exe()
                .context("cannot find this program to run the delay forwarder")?;
            let bed = Testbed::new(&prefix, Profile::load(&profile)?)
                .with_forwarder(&ninf)
                .up()?;
            for (site, address) in bed.addresses() {
                println!("{site}: {address} (namespace {})", bed.namespace(&site));
            }
            bed.disarm();
        }
        TestbedAction::Down { prefix } => {
            let bed = Testbed::new(&prefix, Profile::load("lan")?);
            let existing = bed.existing();
            bed.down()?;
            println!("removed {} namespaces", existing.len());
        }
        TestbedAction::Delay { device, pairs } => {
            // The testbed reads one line: `ready`, or why it could not start.
            let mut started = false;
            let result = ninf_lab::latency::run_forwarder(&device, &pairs, || {
                use std::io::Write;
                println!("ready");
                let _ = std::io::stdout().flush();
                started = true;
            });
            if let Err(e) = &result
                && !started
            {
                println!("{e:#}");
            }
            result?;
        }
    }
    Ok(())
}
