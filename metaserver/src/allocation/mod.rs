//! Allocation queues (docs/slurm.md): compute servers started as batch jobs. A queue is the
//! settings of `ninf alloc add` ([`QueueSpec`]) and the jobs it submitted; the metaserver
//! keeps both in the resource DB ([`store`]), so a restarted or promoted metaserver carries
//! on with them. What to do when is pure ([`policy`]); the batch system is behind a trait
//! ([`batch::BatchSystem`]), Slurm's commands the real one; [`run`] is the loop between.

pub mod batch;
pub mod policy;
pub mod run;
pub mod script;
pub mod store;

use ninf_proto::v1;

/// A job's state as the queue tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Submitted, waiting in the batch system's queue.
    Pending,
    Running,
    /// Gone from the batch system after its servers registered (its time ran out, or it
    /// was let go).
    Ended,
    /// Gone from the batch system before any of its servers registered.
    Failed,
    /// Cancelled by the queue (idle, or the queue removed).
    Cancelled,
}

impl JobState {
    pub fn name(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Running => "running",
            JobState::Ended => "ended",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(name: &str) -> Option<JobState> {
        [
            JobState::Pending,
            JobState::Running,
            JobState::Ended,
            JobState::Failed,
            JobState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// Whether the batch system still holds it.
    pub fn live(self) -> bool {
        matches!(self, JobState::Pending | JobState::Running)
    }
}

/// A queue's settings, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSpec {
    pub name: String,
    pub time_limit_minutes: u32,
    pub servers_per_job: u32,
    pub max_servers: u32,
    pub backlog: u32,
    pub idle_timeout_seconds: f64,
    pub data_dir: String,
    pub grid_file: String,
    pub batch_args: Vec<String>,
}

/// Why a queue's settings are refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("allocation queue: {0}")]
    Invalid(String),
}

impl QueueSpec {
    /// Checks the settings `ninf alloc add` sent.
    pub fn from_proto(spec: &v1::AllocQueueSpec) -> Result<QueueSpec, SpecError> {
        let invalid = |m: String| Err(SpecError::Invalid(m));
        if spec.manager != "slurm" {
            return invalid(format!(
                "unknown batch system `{}` (known: slurm)",
                spec.manager
            ));
        }
        let name_ok = !spec.name.is_empty()
            && spec.name.len() <= 64
            && spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return invalid(format!(
                "name `{}`: 1 to 64 letters, digits, `-` or `_`",
                spec.name
            ));
        }
        if spec.time_limit_minutes == 0 {
            return invalid("--time-limit must be at least 1 minute".into());
        }
        if spec.servers_per_job == 0 || spec.max_servers == 0 {
            return invalid("--servers-per-job and --max-servers must be at least 1".into());
        }
        if spec.max_servers < spec.servers_per_job {
            return invalid(format!(
                "--max-servers ({}) is less than --servers-per-job ({})",
                spec.max_servers, spec.servers_per_job
            ));
        }
        if !(spec.idle_timeout_seconds.is_finite() && spec.idle_timeout_seconds >= 0.0) {
            return invalid(format!(
                "--idle-timeout must be 0 or more seconds, not {}",
                spec.idle_timeout_seconds
            ));
        }
        Ok(QueueSpec {
            name: spec.name.clone(),
            time_limit_minutes: spec.time_limit_minutes,
            servers_per_job: spec.servers_per_job,
            max_servers: spec.max_servers,
            backlog: spec.backlog.max(1),
            idle_timeout_seconds: spec.idle_timeout_seconds,
            data_dir: spec.data_dir.clone(),
            grid_file: spec.grid_file.clone(),
            batch_args: spec.batch_args.clone(),
        })
    }

    pub fn to_proto(&self) -> v1::AllocQueueSpec {
        v1::AllocQueueSpec {
            name: self.name.clone(),
            manager: "slurm".into(),
            time_limit_minutes: self.time_limit_minutes,
            servers_per_job: self.servers_per_job,
            max_servers: self.max_servers,
            backlog: self.backlog,
            idle_timeout_seconds: self.idle_timeout_seconds,
            data_dir: self.data_dir.clone(),
            grid_file: self.grid_file.clone(),
            batch_args: self.batch_args.clone(),
        }
    }
}

/// One job of a queue, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: String,
    pub state: JobState,
    pub submitted_at: f64,
    pub script: String,
    pub output: String,
    pub reason: String,
}

/// A queue as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Queue {
    pub spec: QueueSpec,
    pub paused: bool,
    pub failures: u32,
    pub last_error: String,
    pub jobs: Vec<Job>,
}

impl Queue {
    /// The queue for `ninf alloc list` and `ninf status`; `servers` counts each job's
    /// registered servers.
    pub fn to_proto(&self, servers: impl Fn(&str) -> u32) -> v1::AllocQueue {
        v1::AllocQueue {
            spec: Some(self.spec.to_proto()),
            state: if self.paused { "paused" } else { "active" }.into(),
            failures: self.failures,
            last_error: self.last_error.clone(),
            jobs: self
                .jobs
                .iter()
                .map(|j| v1::AllocJob {
                    job_id: j.id.clone(),
                    state: j.state.name().into(),
                    submitted_unix: j.submitted_at,
                    servers: servers(&j.id),
                    script: j.script.clone(),
                    output: j.output.clone(),
                    reason: j.reason.clone(),
                })
                .collect(),
        }
    }
}
