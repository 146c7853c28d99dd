//! The batch system behind a trait: submit a job script (a dry run, or for real, several as
//! an array), list a queue's jobs, cancel jobs. [`Slurm`] runs Slurm's commands (`sbatch`,
//! `squeue`, `scancel`); tests drive the queue with a fake.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::JobState;

/// A batch command that failed, with its own message.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{command}: {message}")]
pub struct BatchError {
    pub command: String,
    pub message: String,
}

/// What the queue asks of a batch system.
#[tonic::async_trait]
pub trait BatchSystem: Send + Sync + 'static {
    /// Checks that `script` with `args` would be accepted, without submitting it.
    async fn test_submit(&self, script: &Path, args: &[String]) -> Result<(), BatchError>;
    /// Submits `count` jobs of `script` as one array; their ids (`ARRAY_INDEX`).
    async fn submit(
        &self,
        script: &Path,
        args: &[String],
        count: u32,
    ) -> Result<Vec<String>, BatchError>;
    /// The jobs named `name` the batch system still holds, by id. A job not listed has
    /// ended.
    async fn jobs(&self, name: &str) -> Result<HashMap<String, JobState>, BatchError>;
    async fn cancel(&self, jobs: &[String]) -> Result<(), BatchError>;
}

/// Slurm, through its commands (found in `bin_dir`, or on the `PATH`), with `SLURM_CONF`
/// set to `conf` when given. Jobs inherit the environment, so servers' own `squeue` finds
/// the same cluster.
#[derive(Debug, Clone, Default)]
pub struct Slurm {
    pub bin_dir: Option<PathBuf>,
    pub conf: Option<PathBuf>,
}

impl Slurm {
    fn command(&self, name: &str) -> tokio::process::Command {
        let program = match &self.bin_dir {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        };
        let mut command = tokio::process::Command::new(program);
        command.kill_on_drop(true);
        if let Some(conf) = &self.conf {
            command.env("SLURM_CONF", conf);
        }
        command
    }

    /// Runs a command to its end; its standard output, or its standard error as the error.
    async fn output(
        &self,
        name: &str,
        mut command: tokio::process::Command,
    ) -> Result<String, BatchError> {
        let failed = |message: String| BatchError {
            command: name.to_string(),
            message,
        };
        let output = command
            .output()
            .await
            .map_err(|e| failed(format!("cannot run it: {e}")))?;
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if !output.status.success() {
            let message = if stderr.is_empty() {
                format!("exited with {}", output.status)
            } else {
                stderr
            };
            return Err(failed(message));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// The elements of the array whose id `sbatch --parsable` printed (`123`, or
/// `123;cluster`): `123_0`, `123_1`, ...
pub fn submitted_ids(printed: &str, count: u32) -> Option<Vec<String>> {
    let id = printed.trim().split(';').next()?.trim();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((0..count).map(|i| format!("{id}_{i}")).collect())
}

/// `squeue -h -r -o %i|%T` lines as job states; jobs on their way out count as gone.
pub fn parse_squeue(printed: &str) -> HashMap<String, JobState> {
    printed
        .lines()
        .filter_map(|line| {
            let (id, state) = line.trim().split_once('|')?;
            let state = match state {
                "PENDING" | "CONFIGURING" | "REQUEUED" | "RESIZING" => JobState::Pending,
                "RUNNING" | "COMPLETING" | "SUSPENDED" | "SIGNALING" | "STAGE_OUT" => {
                    JobState::Running
                }
                _ => return None,
            };
            Some((id.to_string(), state))
        })
        .collect()
}

#[tonic::async_trait]
impl BatchSystem for Slurm {
    async fn test_submit(&self, script: &Path, args: &[String]) -> Result<(), BatchError> {
        let mut command = self.command("sbatch");
        command.arg("--test-only").args(args).arg(script);
        self.output("sbatch --test-only", command).await.map(|_| ())
    }

    async fn submit(
        &self,
        script: &Path,
        args: &[String],
        count: u32,
    ) -> Result<Vec<String>, BatchError> {
        let mut command = self.command("sbatch");
        command
            .arg("--parsable")
            .args(args)
            .arg(format!("--array=0-{}", count.max(1) - 1))
            .arg(script);
        let printed = self.output("sbatch", command).await?;
        submitted_ids(&printed, count).ok_or_else(|| BatchError {
            command: "sbatch".into(),
            message: format!("printed no job id: {printed:?}"),
        })
    }

    async fn jobs(&self, name: &str) -> Result<HashMap<String, JobState>, BatchError> {
        let mut command = self.command("squeue");
        command.args(["-h", "-r", "-o", "%i|%T", "--name", name]);
        Ok(parse_squeue(&self.output("squeue", command).await?))
    }

    async fn cancel(&self, jobs: &[String]) -> Result<(), BatchError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let mut command = self.command("scancel");
        command.args(jobs);
        self.output("scancel", command).await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_from_sbatch_and_states_from_squeue() {
        assert_eq!(submitted_ids("42\n", 1), Some(vec!["42_0".to_string()]));
        assert_eq!(
            submitted_ids("42;ninf\n", 2),
            Some(vec!["42_0".to_string(), "42_1".to_string()])
        );
        assert_eq!(submitted_ids("Submitted batch job 42", 1), None);
        let states = parse_squeue("7|PENDING\n8_1|RUNNING\n9|COMPLETED\nbad\n");
        assert_eq!(states.get("7"), Some(&JobState::Pending));
        assert_eq!(states.get("8_1"), Some(&JobState::Running));
        assert_eq!(states.len(), 2);
    }
}
