//! A private one-node Slurm cluster for one run: `munged` (as the `munge` user, on its own
//! socket), `slurmctld` and `slurmd` in the foreground on free loopback ports, with their
//! state, spool and logs in a temporary directory; stopped and removed when dropped. Slurm's
//! commands reach it through `SLURM_CONF` ([`LocalSlurm::conf`]). It needs Debian's
//! `slurmctld`, `slurmd`, `slurm-client` and `munge` packages, and root (slurmd runs jobs
//! as their users).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::processes::Started;

/// A running private cluster.
pub struct LocalSlurm {
    /// Its `slurm.conf`: set `SLURM_CONF` to it for `sbatch`, `squeue`, `scancel`.
    pub conf: PathBuf,
    /// The partition every job goes to.
    pub partition: String,
    daemons: Vec<Started>,
    dir: tempfile::TempDir,
}

/// How long the cluster may take to take jobs.
const START_TIMEOUT: Duration = Duration::from_secs(30);

impl LocalSlurm {
    /// Starts a cluster of one node with this machine's CPUs, partition `debug`.
    pub fn start() -> anyhow::Result<LocalSlurm> {
        let dir = tempfile::Builder::new()
            .prefix("ninf-slurm")
            .tempdir()
            .context("cannot create the cluster's directory")?;
        // munged, as its own user, must reach its socket inside.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let munge_dir = dir.path().join("munge");
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(dir.path().join(sub))?;
        }
        std::fs::create_dir_all(&munge_dir)?;
        let socket = munge_dir.join("munge.socket");
        let mut daemons = vec![start_munge(&munge_dir, &socket)?];
        let conf = dir.path().join("slurm.conf");
        std::fs::write(&conf, slurm_conf(dir.path(), &socket)?)?;
        for (program, args) in [
            ("slurmctld", vec!["-D", "-i"]),
            ("slurmd", vec!["-D", "-N", "localhost"]),
        ] {
            let mut command = Command::new(program);
            command
                .args(&args)
                .arg("-f")
                .arg(&conf)
                .env("SLURM_CONF", &conf)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            daemons.push(Started::spawn(&mut command).with_context(|| {
                format!("cannot start {program} (apt-get install slurmctld slurmd)")
            })?);
        }
        let cluster = LocalSlurm {
            conf,
            partition: "debug".into(),
            daemons,
            dir,
        };
        cluster.wait_until_idle()?;
        Ok(cluster)
    }

    /// A Slurm command against this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// The ids of the jobs the cluster holds (`squeue -h -r -o %i`), array elements apart.
    pub fn jobs(&self) -> anyhow::Result<Vec<String>> {
        let output = self
            .command("squeue")
            .args(["-h", "-r", "-o", "%i"])
            .output()
            .context("cannot run squeue")?;
        if !output.status.success() {
            bail!("squeue: {}", String::from_utf8_lossy(&output.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// The daemons' logs, for a failing test to show.
    pub fn logs(&self) -> String {
        ["slurmctld.log", "slurmd.log"]
            .iter()
            .map(|name| {
                let path = self.dir.path().join("log").join(name);
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(20)..].join("\n");
                format!("== {name}\n{tail}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until the node is idle in `sinfo`: the cluster takes jobs.
    fn wait_until_idle(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Ok(output) = self.command("sinfo").args(["-h", "-o", "%T"]).output() {
                last = format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout).trim(),
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                if output.status.success() && last.starts_with("idle") {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        bail!(
            "the private Slurm cluster did not come up in {START_TIMEOUT:?} (sinfo: {last})\n{}",
            self.logs()
        )
    }
}

impl Drop for LocalSlurm {
    fn drop(&mut self) {
        // The jobs first, so that slurmd does not leave their processes behind.
        let _ = self
            .command("scancel")
            .args(["--full", "--user=root"])
            .output();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && self.jobs().is_ok_and(|j| !j.is_empty()) {
            std::thread::sleep(Duration::from_millis(100));
        }
        // Stopped in reverse: slurmd, slurmctld, then munged.
        while let Some(daemon) = self.daemons.pop() {
            drop(daemon);
        }
    }
}

/// `munged` in the foreground as the `munge` user, on `socket`, with the key Debian's
/// package made.
fn start_munge(dir: &Path, socket: &Path) -> anyhow::Result<Started> {
    let status = Command::new("chown")
        .arg("munge:munge")
        .arg(dir)
        .status()
        .context("cannot run chown")?;
    if !status.success() {
        bail!(
            "cannot give {} to the munge user (apt-get install munge)",
            dir.display()
        );
    }
    let mut command = Command::new("runuser");
    command
        .args([
            "-u",
            "munge",
            "--",
            "/usr/sbin/munged",
            "--foreground",
            "--force",
        ])
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--pid-file={}", dir.join("munged.pid").display()))
        .arg(format!("--log-file={}", dir.join("munged.log").display()))
        .arg(format!("--seed-file={}", dir.join("seed").display()))
        .arg("--key-file=/etc/munge/munge.key")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let munged = Started::spawn(&mut command).context("cannot start munged")?;
    let deadline = Instant::now() + START_TIMEOUT;
    while !socket.exists() {
        if Instant::now() > deadline {
            bail!("munged made no socket at {}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(munged)
}

/// The cluster's configuration: one node of this machine's CPUs, everything under `dir`.
fn slurm_conf(dir: &Path, socket: &Path) -> anyhow::Result<String> {
    let port = |address: String| address.rsplit(':').next().unwrap_or("0").to_string();
    let controller = port(crate::processes::free_address()?);
    let node = port(crate::processes::free_address()?);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let d = dir.display();
    Ok(format!(
        "ClusterName=ninf
SlurmctldHost=localhost
SlurmctldPort={controller}
SlurmdPort={node}
AuthType=auth/munge
AuthInfo=socket={socket}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
ReturnToService=2
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
KillWait=10
MinJobAge=2
InactiveLimit=0
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
",
        socket = socket.display()
    ))
}
