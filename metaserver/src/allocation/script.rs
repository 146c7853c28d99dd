//! The job script a queue submits: Slurm's settings as `#SBATCH` lines, then `ninf-server`
//! with the grid's address and credentials (from a grid file, or the metaserver's address),
//! told its queue's name. Pure text, kept under the queue's folder with each job's output.

use std::path::Path;

use super::QueueSpec;

/// Seconds before the time limit at which the servers drain: they take no new calls and
/// finish the ones they run (docs/slurm.md). Slurm warns them then with SIGUSR1.
pub fn drain_seconds(spec: &QueueSpec) -> u32 {
    // A tenth of the time limit, between 20 s and 5 minutes.
    (spec.time_limit_minutes.saturating_mul(6)).clamp(20, 300)
}

/// The batch system's name of a queue's jobs.
pub fn job_name(spec: &QueueSpec) -> String {
    format!("ninf-{}", spec.name)
}

/// Where the servers come from and how they reach the grid.
#[derive(Debug, Clone)]
pub struct ScriptSettings<'a> {
    pub server_program: &'a Path,
    /// The grid file the servers read (`ninf-server --grid`); without one, `metaserver`.
    pub grid_file: Option<&'a str>,
    pub metaserver: &'a str,
    /// The host the servers listen on and advertise; `None`: all interfaces, advertised
    /// by the node's host name.
    pub host: Option<&'a str>,
    /// The folder the script and the jobs' output are in.
    pub dir: &'a Path,
}

/// Quotes `text` for the shell.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The script's text.
pub fn job_script(spec: &QueueSpec, settings: &ScriptSettings) -> String {
    // Every submission is an array (of one, often): its elements are `JOB_INDEX`.
    let output = settings.dir.join("job-%A_%a.out");
    let many = spec.servers_per_job > 1;
    let mut lines = vec![
        "#!/bin/bash".to_string(),
        format!(
            "# Submitted by the Ninf metaserver for allocation queue {} (docs/slurm.md).",
            spec.name
        ),
        format!("#SBATCH --job-name={}", job_name(spec)),
        format!("#SBATCH --time={}", spec.time_limit_minutes),
        format!("#SBATCH --output={}", output.display()),
        // One server per job is the batch shell itself (exec); several are job steps.
        format!(
            "#SBATCH --signal={}USR1@{}",
            if many { "" } else { "B:" },
            drain_seconds(spec)
        ),
    ];
    if many {
        lines.push(format!("#SBATCH --ntasks={}", spec.servers_per_job));
    }
    let mut server = vec![quoted(&settings.server_program.display().to_string())];
    match settings.grid_file {
        Some(file) => server.extend(["--grid".into(), quoted(file)]),
        None => server.extend(["--metaserver".into(), quoted(settings.metaserver)]),
    }
    match settings.host {
        Some(host) => server.extend(["--listen".into(), quoted(&format!("{host}:0"))]),
        None => server.extend([
            "--listen".into(),
            "0.0.0.0:0".into(),
            "--advertise-host".into(),
            "\"$(hostname)\"".into(),
        ]),
    }
    server.extend([
        "--allocation".into(),
        quoted(&spec.name),
        // It drains by itself then too, should the signal not come.
        "--drain-before-end".into(),
        drain_seconds(spec).to_string(),
    ]);
    lines.push("set -u".into());
    // An error that stops the server ends its output in a line or two, so that the queue
    // can show it, not in a backtrace (panics still print theirs).
    lines.push("export RUST_LIB_BACKTRACE=0".into());
    let server = server.join(" ");
    lines.push(if many {
        format!("srun --kill-on-bad-exit=0 {server}")
    } else {
        format!("exec {server}")
    });
    lines.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(servers_per_job: u32) -> QueueSpec {
        QueueSpec {
            name: "q1".into(),
            time_limit_minutes: 60,
            servers_per_job,
            max_servers: 4,
            backlog: 1,
            idle_timeout_seconds: 0.0,
            data_dir: String::new(),
            grid_file: String::new(),
            batch_args: vec!["--partition=debug".into()],
        }
    }

    #[test]
    fn one_server_is_the_batch_shell_and_several_are_steps() {
        let dir = Path::new("/var/ninf/allocations/q1");
        let settings = ScriptSettings {
            server_program: Path::new("/opt/ninf/bin/ninf-server"),
            grid_file: Some("/var/ninf/grid.toml"),
            metaserver: "10.0.0.1:7000",
            host: None,
            dir,
        };
        let one = job_script(&spec(1), &settings);
        assert!(one.contains("#SBATCH --signal=B:USR1@300\n"), "{one}");
        assert!(one.contains("#SBATCH --output=/var/ninf/allocations/q1/job-%A_%a.out\n"));
        assert!(one.ends_with(
            "exec '/opt/ninf/bin/ninf-server' --grid '/var/ninf/grid.toml' --listen 0.0.0.0:0 \
             --advertise-host \"$(hostname)\" --allocation 'q1' --drain-before-end 300\n"
        ));
        let settings = ScriptSettings {
            grid_file: None,
            host: Some("127.0.0.1"),
            ..settings
        };
        let two = job_script(&spec(2), &settings);
        assert!(
            two.contains("#SBATCH --signal=USR1@300\n#SBATCH --ntasks=2\n"),
            "{two}"
        );
        assert!(two.contains("srun --kill-on-bad-exit=0 '/opt/ninf/bin/ninf-server' --metaserver '10.0.0.1:7000' --listen '127.0.0.1:0'"));
    }
}
