//! `ninf certs`: a grid certificate authority and certificates for its components.

use std::path::PathBuf;

use clap::Args;
use ninf_grid::embedded::TLS_NAMES;

#[derive(Args)]
pub struct CertsArgs {
    /// Where to write them (`ca.pem`, `NAME.pem`, `NAME-key.pem`; keys mode 0600).
    #[arg(long)]
    pub dir: PathBuf,
    /// Host names or IP addresses the certificates are valid for.
    #[arg(long = "host", required = true)]
    pub hosts: Vec<String>,
}

pub fn run(args: CertsArgs) -> anyhow::Result<()> {
    ninf_proto::net::tls::generate(&args.dir, &TLS_NAMES, &args.hosts)?;
    println!(
        "wrote a certificate authority and certificates for {} to {}",
        TLS_NAMES.join(", "),
        args.dir.display()
    );
    Ok(())
}
