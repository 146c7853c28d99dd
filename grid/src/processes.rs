//! The grid's components as child processes, for the commands that run a grid of real
//! processes (`experiment wan`, `chaos`): finding the binaries, starting one and waiting
//! until it listens, and killing it when its handle is dropped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, bail};

/// A child process killed and reaped when dropped.
pub struct Started(pub Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` and waits for its "listening on" line. Its log (stderr) is dropped
/// unless `NINF_DEBUG_STDERR` is set, when it goes to this process's stderr.
pub fn start(mut command: Command, what: &str) -> anyhow::Result<Started> {
    command
        .stdout(Stdio::piped())
        .stderr(if std::env::var_os("NINF_DEBUG_STDERR").is_some() {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start the {what}"))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let started = Started(child);
    match BufReader::new(stdout).lines().next() {
        Some(Ok(line)) if line.starts_with("listening on") => Ok(started),
        other => bail!("the {what} did not start (first line: {other:?})"),
    }
}

/// A free loopback `host:port` (the listener is closed again, so the port is free to bind).
pub fn free_address() -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

/// Writes a configuration file.
pub fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The path of the built binary `name` in `bin_dir`, or an error saying how to build it.
pub fn binary(bin_dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir.join(name);
    if !path.exists() {
        bail!(
            "{} is missing; build the binaries first (cargo build --release --workspace --bins)",
            path.display()
        );
    }
    Ok(path)
}
