//! Solves A x = b on a Ninf server with `dgefa` + `dgesl` and prints the residual.
//!
//!     solve [ninf://host:port] [n]
//!
//! Without a URL it starts a local `ninf-server` from the same build folder (so
//! `cargo build --release --workspace --bins --examples && target/release/examples/solve`
//! runs the whole path on this machine) and stops it afterwards.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use ninf::{Arg, Client, ninf_call};

/// A server this program started; killed on drop.
struct LocalServer(Child);

impl Drop for LocalServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_local_server() -> anyhow::Result<(LocalServer, String)> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .context("cannot find the build folder")?;
    let server = dir.join("ninf-server");
    if !server.exists() {
        bail!(
            "{} not found: build it first (cargo build --workspace --bins)",
            server.display()
        );
    }
    let mut child = Command::new(&server)
        .args(["--listen", "127.0.0.1:0"])
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", server.display()))?;
    let stdout = child.stdout.take().context("server has no stdout")?;
    let child = LocalServer(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .with_context(|| format!("unexpected server output {line:?}"))?
        .to_string();
    Ok((child, address))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (url, n) = match args.as_slice() {
        [] => (None, 500),
        [one] if one.starts_with("ninf://") => (Some(one.clone()), 500),
        [one] => (None, one.parse().context("n must be a number")?),
        [url, n, ..] => (Some(url.clone()), n.parse().context("n must be a number")?),
    };
    let (_local, address) = match url {
        Some(url) => (None, ninf::remote::server_address(&url)?),
        None => {
            let (server, address) = start_local_server()?;
            println!("started a local ninf-server at {address}");
            (Some(server), address)
        }
    };

    // A reproducible, well-conditioned system with the exact solution x = (1, 2, ..., n) / n.
    let mut state = 2024u64;
    let mut random = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
    };
    let mut a: Vec<f64> = (0..n * n).map(|_| random()).collect();
    for i in 0..n {
        a[i + i * n] += n as f64 / 2.0;
    }
    let a0 = a.clone();
    let x_true: Vec<f64> = (1..=n).map(|i| i as f64 / n as f64).collect();
    let b0: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| a0[i + j * n] * x_true[j]).sum())
        .collect();

    let start = Instant::now();
    let mut ipvt = vec![0i32; n];
    let order = i32::try_from(n)?;
    let info = ninf_call(
        &format!("ninf://{address}/dgefa"),
        &mut [Arg::from(&mut a), Arg::from(order), Arg::from(&mut ipvt)],
    )?;
    if info.status != 0 {
        bail!("dgefa reports a singular matrix (info = {})", info.status);
    }
    let client = Client::connect(&address)?;
    let mut x = b0.clone();
    client.call(
        "dgesl",
        &mut [
            Arg::from(&a),
            Arg::from(order),
            Arg::from(&ipvt),
            Arg::from(&mut x),
        ],
    )?;
    let elapsed = start.elapsed();

    let residual = (0..n)
        .map(|i| ((0..n).map(|j| a0[i + j * n] * x[j]).sum::<f64>() - b0[i]).abs())
        .fold(0.0, f64::max);
    let norm_a = a0.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let norm_x = x.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let normalized = residual / (n as f64 * norm_a * norm_x * f64::EPSILON);
    let error = x
        .iter()
        .zip(&x_true)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!(
        "solved a {n}x{n} system on {address} with dgefa + dgesl in {:.3} s",
        elapsed.as_secs_f64()
    );
    println!(
        "max |Ax - b| = {residual:.3e}   normalized residual = {normalized:.3}   max |x - x_true| = {error:.3e}"
    );
    Ok(())
}
