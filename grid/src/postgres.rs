//! A private PostgreSQL cluster for one run: `initdb` into a temporary directory, the server
//! on a free loopback port, removed when dropped. It lets `ninf chaos --kill metaserver`
//! (two metaservers sharing one PostgreSQL) and the tests run on any machine with Debian's
//! `postgresql` package, without touching a cluster of the system's.
//!
//! PostgreSQL refuses to run as root; as root the cluster belongs to the `postgres` user the
//! package creates, and its commands run as that user (`setpriv`, which execs them directly,
//! so the server is this process's own child).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::processes::Started;

/// A running private cluster.
pub struct LocalPostgres {
    /// `postgres://ninf@127.0.0.1:PORT/ninf`: no password (trust on loopback).
    pub url: String,
    server: Option<Started>,
    _dir: tempfile::TempDir,
}

/// How long the server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl LocalPostgres {
    /// Creates and starts a cluster, with a database `ninf` owned by the role `ninf`.
    pub fn start() -> anyhow::Result<LocalPostgres> {
        let bin = bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("ninf-postgres")
            .tempdir()
            .context("cannot create the cluster's directory")?;
        let owner = Owner::for_this_process()?;
        owner.give(dir.path())?;
        let data = dir.path().join("data");
        let initdb = owner
            .command(&bin.join("initdb"))
            .args([
                "-U",
                "ninf",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "-D",
            ])
            .arg(&data)
            .output()
            .context("cannot run initdb")?;
        if !initdb.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&initdb.stderr).trim()
            );
        }
        let address = crate::processes::free_address()?;
        let port = address.rsplit(':').next().unwrap_or("5432").to_string();
        let mut server = owner.command(&bin.join("postgres"));
        server
            .arg("-D")
            .arg(&data)
            .args(["-p", &port, "-k"])
            .arg(dir.path())
            // A throwaway cluster: durability against power cuts buys nothing here.
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let server = Started::spawn_stopped_by(&mut server, libc::SIGINT)
            .context("cannot start postgres")?;
        wait_for(&address)?;
        // The server accepts connections a moment before it accepts sessions: ask again
        // while it says it is starting up.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let created = owner
                .command(&bin.join("createdb"))
                .args(["-h", "127.0.0.1", "-p", &port, "-U", "ninf", "ninf"])
                .output()
                .context("cannot run createdb")?;
            if created.status.success() {
                break;
            }
            let error = String::from_utf8_lossy(&created.stderr).trim().to_string();
            if !error.contains("starting up") || Instant::now() > deadline {
                bail!("createdb failed: {error}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(LocalPostgres {
            url: format!("postgres://ninf@{address}/ninf"),
            server: Some(server),
            _dir: dir,
        })
    }
}

impl Drop for LocalPostgres {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            // SIGINT: a fast shutdown (sessions ended at once), then the directory goes.
            let pid = server.0.id() as libc::pid_t;
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(pid, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if matches!(server.0.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Where the server's programs are: the newest `/usr/lib/postgresql/N/bin` (Debian), or the
/// folder of an `initdb` on the PATH.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| dir.join("initdb").exists() && dir.join("postgres").exists())
        .context(
            "PostgreSQL's server programs (initdb, postgres) are not installed: \
             apt-get install postgresql",
        )
}

/// Whom the cluster belongs to: this process, or `postgres` when this process is root.
enum Owner {
    Me,
    Postgres { uid: u32, gid: u32 },
}

impl Owner {
    fn for_this_process() -> anyhow::Result<Owner> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(Owner::Me);
        }
        let passwd = std::fs::read_to_string("/etc/passwd").context("cannot read /etc/passwd")?;
        let entry = passwd
            .lines()
            .find(|line| line.starts_with("postgres:"))
            .context("running as root, and there is no `postgres` user to run PostgreSQL as")?;
        let fields: Vec<&str> = entry.split(':').collect();
        let id = |i: usize| -> anyhow::Result<u32> {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .context("a malformed `postgres` line in /etc/passwd")
        };
        Ok(Owner::Postgres {
            uid: id(2)?,
            gid: id(3)?,
        })
    }

    /// Hands `dir` to the owner.
    fn give(&self, dir: &Path) -> anyhow::Result<()> {
        if let Owner::Postgres { uid, gid } = self {
            std::os::unix::fs::chown(dir, Some(*uid), Some(*gid))
                .with_context(|| format!("cannot give {} to postgres", dir.display()))?;
        }
        Ok(())
    }

    /// `program` run as the owner.
    fn command(&self, program: &Path) -> Command {
        match self {
            Owner::Me => Command::new(program),
            Owner::Postgres { uid, gid } => {
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg(program)
                    // The server refuses a working directory it cannot read.
                    .current_dir("/");
                command
            }
        }
    }
}

/// Waits until the server accepts TCP connections at `address`.
fn wait_for(address: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if TcpStream::connect(address).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("PostgreSQL did not accept connections at {address} within {START_TIMEOUT:?}")
}
