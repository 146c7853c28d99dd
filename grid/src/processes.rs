//! The grid's components as child processes, for the commands that run a grid of real
//! processes (`experiment wan`, `chaos`, `load`): finding the binaries, starting one and
//! waiting until it listens, and killing it when its handle is dropped. Every child started
//! here is also on a list of this process's, so that a harness interrupted by SIGINT or
//! SIGTERM ends them all before it exits ([`end_children_on_signal`]): drops do not run when
//! a signal ends a process. What a harness set up outside its children (network namespaces)
//! it registers with [`undo_on_signal`], undone after the children end.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// A child process killed and reaped when dropped.
pub struct Started(pub Child);

/// The children this process started and has not reaped, with the signal that stops each.
static CHILDREN: Mutex<BTreeMap<u32, i32>> = Mutex::new(BTreeMap::new());

fn children() -> std::sync::MutexGuard<'static, BTreeMap<u32, i32>> {
    CHILDREN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Started {
    /// Starts `command` as a child that SIGTERM stops.
    pub fn spawn(command: &mut Command) -> std::io::Result<Started> {
        Started::spawn_stopped_by(command, libc::SIGTERM)
    }

    /// Starts `command` as a child that `signal` stops (PostgreSQL: SIGINT, its fast
    /// shutdown). The child is on the list before anyone can look: a signal's handler
    /// takes the list under the same lock, so it either ends this child or, having begun,
    /// keeps it from starting. A harness restarting a killed server while `ninf chaos` was
    /// interrupted once left that server running, its parent gone.
    pub fn spawn_stopped_by(command: &mut Command, signal: i32) -> std::io::Result<Started> {
        let mut list = children();
        if INTERRUPTED.load(Ordering::SeqCst) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Interrupted,
                "not starting a process: this one is ending on a signal",
            ));
        }
        let child = command.spawn()?;
        list.insert(child.id(), signal);
        Ok(Started(child))
    }
}

type Undo = Box<dyn FnOnce() + Send>;

/// What a signal must undo besides ending the children, by registration.
static UNDO: Mutex<BTreeMap<u64, Undo>> = Mutex::new(BTreeMap::new());
/// Set once a signal arrived: the handler is ending the children and will exit.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static NEXT_UNDO: AtomicU64 = AtomicU64::new(0);

fn undo_list() -> std::sync::MutexGuard<'static, BTreeMap<u64, Undo>> {
    UNDO.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A set-up that a signal undoes while this lives; dropping it forgets the undo (its owner
/// tore the set-up down itself, or keeps it on purpose).
#[derive(Debug)]
pub struct UndoOnSignal(u64);

/// Has `undo` run if SIGINT or SIGTERM ends this process (after its children have ended)
/// while the returned guard lives.
pub fn undo_on_signal(undo: impl FnOnce() + Send + 'static) -> UndoOnSignal {
    let key = NEXT_UNDO.fetch_add(1, Ordering::Relaxed);
    undo_list().insert(key, Box::new(undo));
    UndoOnSignal(key)
}

impl Drop for UndoOnSignal {
    fn drop(&mut self) {
        undo_list().remove(&self.0);
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        children().remove(&self.0.id());
    }
}

/// On SIGINT or SIGTERM, stops every child on the list (each with its own signal, then
/// SIGKILL for those still there after `grace`), runs what [`undo_on_signal`] registered,
/// and exits with 130, as a shell reports an
/// interrupted command. For the harnesses that start grids of processes; services stop on
/// the same signals gracefully instead.
pub fn end_children_on_signal(grace: Duration) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    // The handlers are installed before this returns, so no signal slips by in between.
    let signal = runtime.block_on(async { ninf_proto::shutdown::listen() })?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            runtime.block_on(signal);
            end_children(grace);
            let undo = std::mem::take(&mut *undo_list());
            for (_, action) in undo {
                action();
            }
            std::process::exit(130);
        })?;
    Ok(())
}

/// If a signal is being handled ([`end_children_on_signal`]), waits for its handler to end
/// the process with 130. A harness whose children the handler stopped fails at once; that
/// failure must not end the process first, with another status and before the undo runs.
pub fn yield_to_signal() {
    if INTERRUPTED.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
}

/// Stops every child on the list, waiting at most `grace` before killing the rest; from
/// then on no child starts ([`Started::spawn_stopped_by`]).
fn end_children(grace: Duration) {
    let list: Vec<(u32, i32)> = {
        let list = children();
        INTERRUPTED.store(true, Ordering::SeqCst);
        list.iter().map(|(&pid, &sig)| (pid, sig)).collect()
    };
    for &(pid, sig) in &list {
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }
    let deadline = Instant::now() + grace;
    let mut left: Vec<u32> = list.iter().map(|&(pid, _)| pid).collect();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&pid| !reaped(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in left {
        // SAFETY: as above.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        let _ = reaped_blocking(pid);
    }
}

/// Whether child `pid` has exited (and is now reaped).
fn reaped(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on our own child, with a valid place for its status.
    let got = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    got != 0
}

fn reaped_blocking(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: as above.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) == pid as libc::pid_t }
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
    let mut started =
        Started::spawn(&mut command).with_context(|| format!("cannot start the {what}"))?;
    let stdout = started.0.stdout.take().context("no stdout")?;
    match BufReader::new(stdout).lines().next() {
        Some(Ok(line)) if line.starts_with("listening on") => Ok(started),
        other => bail!("the {what} did not start (first line: {other:?})"),
    }
}

/// A free loopback `host:port` for a process started later to listen on (the listener is
/// closed again, so the port is free to bind). The port lies below the kernel's range for
/// the local ends of outgoing connections (`ip_local_port_range`): a port from that range,
/// free now, can be taken by any connection the grid opens before its owner binds it, and
/// under `ninf chaos` a proxy whose port was chosen before three servers started once
/// found it taken and did not start. Each port is handed out once per process, and each
/// process starts its search at a place of its own.
pub fn free_address() -> anyhow::Result<String> {
    let ephemeral = ephemeral_ports();
    let below: u16 = ephemeral.0.saturating_sub(1);
    if below <= FIRST_LISTEN_PORT {
        // No room below the kernel's range: its own choice is the best there is.
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        return Ok(format!("127.0.0.1:{port}"));
    }
    let span = u32::from(below - FIRST_LISTEN_PORT) + 1;
    let mut handed = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let start = std::process::id()
        .wrapping_mul(7919)
        .wrapping_add(handed.len() as u32);
    for step in 0..span {
        let offset = u16::try_from((start.wrapping_add(step)) % span).unwrap_or(0);
        let port = FIRST_LISTEN_PORT + offset;
        if handed.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            handed.insert(port);
            return Ok(format!("127.0.0.1:{port}"));
        }
    }
    bail!("no free loopback port between {FIRST_LISTEN_PORT} and {below}")
}

/// The lowest port [`free_address`] hands out: above the well-known and most registered
/// services' ports.
const FIRST_LISTEN_PORT: u16 = 20000;

/// Ports [`free_address`] has handed out in this process.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The kernel's range for the local ends of outgoing connections; Linux's default when it
/// cannot be read.
fn ephemeral_ports() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| {
            let mut parts = text.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((parts.next()??, parts.next()??))
        })
        .unwrap_or((32768, 60999))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_addresses_are_distinct_bindable_and_below_the_outgoing_ports() {
        let (first_outgoing, _) = ephemeral_ports();
        let mut ports = std::collections::BTreeSet::new();
        for _ in 0..50 {
            let address = free_address().unwrap();
            let port: u16 = address.rsplit(':').next().unwrap().parse().unwrap();
            assert!(port < first_outgoing, "{address} is in the outgoing range");
            assert!(ports.insert(port), "{address} handed out twice");
            // The owner can bind it.
            drop(std::net::TcpListener::bind(&address).unwrap());
        }
    }
}
