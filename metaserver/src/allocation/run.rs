//! The allocation loop: every `[allocation] interval_seconds`, on the active metaserver,
//! each queue's jobs are read back from the batch system, jobs that ended before a server
//! registered count as failures (pausing the queue after a few), and [`policy::decide`]'s
//! decisions are carried out. Requests that no live server can take wait here for a queue's
//! servers ([`Metaserver::wait_for_capacity`]), and their number is the demand.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::batch::{BatchError, BatchSystem};
use super::policy::{self, Decision, Demand, JobView, ServerView};
use super::script::{ScriptSettings, job_name, job_script};
use super::{Job, JobState, Queue, QueueSpec};
use crate::{Metaserver, MetaserverError, unix_now};

/// Lines of a failed job's output shown with its failure.
const OUTPUT_TAIL_LINES: usize = 10;

/// The queues as the metaserver holds them (the resource DB's copy), and what the loop
/// reads of the grid's demand.
pub struct Allocations {
    queues: std::sync::Mutex<Vec<Queue>>,
    /// Requests waiting for capacity now.
    waiting: AtomicUsize,
    /// Told of every registration, so that waiting requests look again.
    pub(crate) registered: tokio::sync::Notify,
    /// When a graph was last scheduled (Unix seconds).
    last_work: std::sync::Mutex<f64>,
    /// One change to the queues at a time: the loop's pass, or a request.
    pub(crate) changing: tokio::sync::Mutex<()>,
    pub(crate) batch: Arc<dyn BatchSystem>,
}

impl Allocations {
    pub fn new(batch: Arc<dyn BatchSystem>) -> Allocations {
        Allocations {
            queues: std::sync::Mutex::new(Vec::new()),
            waiting: AtomicUsize::new(0),
            registered: tokio::sync::Notify::new(),
            last_work: std::sync::Mutex::new(f64::NEG_INFINITY),
            changing: tokio::sync::Mutex::new(()),
            batch,
        }
    }

    /// The queues now.
    pub fn queues(&self) -> Vec<Queue> {
        ninf_proto::sync::lock(&self.queues).clone()
    }

    pub(crate) fn set_queues(&self, queues: Vec<Queue>) {
        *ninf_proto::sync::lock(&self.queues) = queues;
    }

    /// Whether some queue may still bring servers (one is active).
    pub fn capacity_coming(&self) -> bool {
        ninf_proto::sync::lock(&self.queues)
            .iter()
            .any(|q| !q.paused)
    }

    /// Notes that a graph was scheduled at `now`.
    pub fn worked(&self, now: f64) {
        let mut last = ninf_proto::sync::lock(&self.last_work);
        *last = last.max(now);
    }

    fn demand(&self, spec: &QueueSpec, now: f64) -> Demand {
        let last = *ninf_proto::sync::lock(&self.last_work);
        Demand {
            waiting: self.waiting.load(Ordering::SeqCst),
            busy: now - last <= spec.idle_timeout_seconds.max(60.0),
        }
    }
}

/// Counts one request as waiting for as long as it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The last lines of a job's output file, or why there are none.
fn output_tail(path: &str) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(OUTPUT_TAIL_LINES);
            lines[from..].join("\n")
        }
        Err(e) => format!("(no output at {path}: {e})"),
    }
}

/// Runs the loop until the task is aborted.
pub fn spawn(metaserver: Arc<Metaserver>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let period = Duration::from_secs_f64(metaserver.config.allocation.interval_seconds);
        let mut ticker = tokio::time::interval(period);
        loop {
            ticker.tick().await;
            if !metaserver.is_active() {
                continue;
            }
            if let Err(e) = metaserver.allocation_pass(unix_now()).await {
                tracing::error!(error = %e, "allocation queues: pass failed");
            }
        }
    })
}

impl Metaserver {
    /// Waits (up to a second) for a registration while a queue may bring servers; `false`
    /// when none will, or the request has waited `[allocation] wait_seconds` since `since`.
    pub async fn wait_for_capacity(&self, since: Instant) -> bool {
        let patience = Duration::from_secs_f64(self.config.allocation.wait_seconds);
        if !self.alloc.capacity_coming() || since.elapsed() >= patience {
            return false;
        }
        let _waiting = Waiting::new(&self.alloc.waiting);
        let _ =
            tokio::time::timeout(Duration::from_secs(1), self.alloc.registered.notified()).await;
        true
    }

    /// Reads the queues back from the resource DB (at start-up and on promotion).
    pub(crate) async fn restore_queues(&self) -> Result<(), MetaserverError> {
        let queues = self.db.queues().await?;
        self.alloc.set_queues(queues);
        Ok(())
    }

    /// One pass over every queue at `now`.
    pub async fn allocation_pass(&self, now: f64) -> Result<(), MetaserverError> {
        let _one = self.alloc.changing.lock().await;
        let mut queues = self.alloc.queues();
        let mut result = Ok(());
        for queue in &mut queues {
            if let Err(e) = self.queue_pass(queue, now).await {
                result = Err(e);
            }
        }
        self.alloc.set_queues(queues);
        result
    }

    async fn queue_pass(&self, queue: &mut Queue, now: f64) -> Result<(), MetaserverError> {
        let before = (queue.paused, queue.failures, queue.last_error.clone());
        match self.alloc.batch.jobs(&job_name(&queue.spec)).await {
            Ok(listed) => self.follow_jobs(queue, &listed).await?,
            Err(e) => queue.last_error = e.to_string(),
        }
        self.pause_on_failures(queue);
        let views = self.job_views(queue, now);
        let demand = self.alloc.demand(&queue.spec, now);
        for decision in policy::decide(&queue.spec, queue.paused, &views, demand, now) {
            self.carry_out(queue, decision, now).await?;
        }
        self.pause_on_failures(queue);
        if (queue.paused, queue.failures, queue.last_error.clone()) != before {
            self.db
                .set_queue_state(
                    &queue.spec.name,
                    queue.paused,
                    queue.failures,
                    &queue.last_error,
                )
                .await?;
        }
        Ok(())
    }

    /// Pauses the queue once its failures in a row reach [`policy::PAUSE_AFTER_FAILURES`].
    fn pause_on_failures(&self, queue: &mut Queue) {
        if queue.paused || !policy::pauses(queue.failures) {
            return;
        }
        queue.paused = true;
        let message = format!(
            "paused after {} failures in a row: {}",
            queue.failures, queue.last_error
        );
        tracing::warn!(queue = %queue.spec.name, %message, "allocation queue paused");
        self.log_event("paused", &queue.spec.name, None, message);
    }

    /// Brings the queue's live jobs up to what the batch system lists.
    async fn follow_jobs(
        &self,
        queue: &mut Queue,
        listed: &HashMap<String, JobState>,
    ) -> Result<(), MetaserverError> {
        let registered = self.jobs_with_servers();
        for job in queue.jobs.iter_mut().filter(|j| j.state.live()) {
            let has_server = registered.contains_key(&job.id);
            let state = match listed.get(&job.id) {
                Some(state) => *state,
                None if has_server => JobState::Ended,
                None => JobState::Failed,
            };
            if has_server {
                queue.failures = 0;
            }
            if state == job.state {
                continue;
            }
            job.state = state;
            if state == JobState::Failed {
                job.reason = format!(
                    "job {} ended before its server registered; its output ends:\n{}",
                    job.id,
                    output_tail(&job.output)
                );
                queue.failures += 1;
                queue.last_error = job.reason.clone();
                self.log_event("job-failed", &queue.spec.name, None, job.reason.clone());
            }
            self.db.save_job(&queue.spec.name, job).await?;
        }
        Ok(())
    }

    /// Jobs that have had a server register, by job id: whether one is up now.
    fn jobs_with_servers(&self) -> HashMap<String, bool> {
        let now = unix_now();
        let state = self.state();
        let mut jobs = HashMap::new();
        for server in state.registry.servers() {
            if !server.info.batch_job.is_empty() {
                let up = state.registry.is_up(server, now) && !server.draining;
                *jobs.entry(server.info.batch_job.clone()).or_insert(false) |= up;
            }
        }
        jobs
    }

    /// The queue's live jobs as the policy sees them.
    fn job_views(&self, queue: &Queue, now: f64) -> Vec<JobView> {
        let state = self.state();
        queue
            .jobs
            .iter()
            .filter(|j| j.state.live())
            .map(|job| {
                let mut registered = false;
                let mut servers = Vec::new();
                for s in state.registry.servers() {
                    if s.info.batch_job != job.id {
                        continue;
                    }
                    registered = true;
                    if state.registry.is_up(s, now) && !s.draining {
                        servers.push(ServerView {
                            idle_since: (s.busy_until <= now).then_some(s.busy_until),
                            walltime_end: (s.info.walltime_end > 0.0)
                                .then_some(s.info.walltime_end),
                        });
                    }
                }
                JobView {
                    id: job.id.clone(),
                    state: job.state,
                    registered,
                    servers,
                }
            })
            .collect()
    }

    async fn carry_out(
        &self,
        queue: &mut Queue,
        decision: Decision,
        now: f64,
    ) -> Result<(), MetaserverError> {
        match decision {
            Decision::Submit(count) => self.submit(queue, count, now).await,
            Decision::Cancel { job, reason } => {
                if let Err(e) = self.alloc.batch.cancel(std::slice::from_ref(&job)).await {
                    queue.last_error = e.to_string();
                    return Ok(());
                }
                tracing::info!(queue = %queue.spec.name, %job, %reason, "job-cancelled");
                self.log_event(
                    "job-cancelled",
                    &queue.spec.name,
                    None,
                    format!("{job}: {reason}"),
                );
                if let Some(stored) = queue.jobs.iter_mut().find(|j| j.id == job) {
                    stored.state = JobState::Cancelled;
                    stored.reason = reason;
                    self.db.save_job(&queue.spec.name, stored).await?;
                }
                Ok(())
            }
        }
    }

    /// Submits `count` jobs as one array; a refusal is a failure of the queue.
    async fn submit(&self, queue: &mut Queue, count: u32, now: f64) -> Result<(), MetaserverError> {
        let script = self.write_script(&queue.spec)?;
        let submitted = self
            .alloc
            .batch
            .submit(&script, &queue.spec.batch_args, count)
            .await;
        let ids = match submitted {
            Ok(ids) => ids,
            Err(e) => {
                queue.failures += 1;
                queue.last_error = e.to_string();
                tracing::warn!(queue = %queue.spec.name, error = %e, "submission refused");
                self.log_event("submit-failed", &queue.spec.name, None, e.to_string());
                return Ok(());
            }
        };
        let dir = self.queue_dir(&queue.spec);
        tracing::info!(queue = %queue.spec.name, jobs = ?ids, "jobs submitted");
        self.log_event("submitted", &queue.spec.name, None, ids.join(", "));
        for id in ids {
            let job = Job {
                output: dir.join(format!("job-{id}.out")).display().to_string(),
                id,
                state: JobState::Pending,
                submitted_at: now,
                script: script.display().to_string(),
                reason: String::new(),
            };
            self.db.save_job(&queue.spec.name, &job).await?;
            queue.jobs.push(job);
        }
        Ok(())
    }

    /// The folder of a queue's script and its jobs' output.
    pub(crate) fn queue_dir(&self, spec: &QueueSpec) -> PathBuf {
        let base = if spec.data_dir.is_empty() {
            self.config.data_dir.join("allocations")
        } else {
            PathBuf::from(&spec.data_dir)
        };
        base.join(&spec.name)
    }

    /// Writes the queue's job script (again: the settings may have changed); its path.
    pub(crate) fn write_script(&self, spec: &QueueSpec) -> Result<PathBuf, MetaserverError> {
        let dir = self.queue_dir(spec);
        let failed = |e: std::io::Error| {
            MetaserverError::Allocation(format!(
                "cannot write the job script in {}: {e}",
                dir.display()
            ))
        };
        std::fs::create_dir_all(&dir).map_err(failed)?;
        let settings = &self.config.allocation;
        let program = settings.server_program.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(|d| d.join("ninf-server")))
                .unwrap_or_else(|| PathBuf::from("ninf-server"))
        });
        let grid_file = if spec.grid_file.is_empty() {
            settings.grid_file.as_ref().map(|p| p.display().to_string())
        } else {
            Some(spec.grid_file.clone())
        };
        let text = job_script(
            spec,
            &ScriptSettings {
                server_program: &program,
                grid_file: grid_file.as_deref(),
                metaserver: &self.advertised(),
                host: settings.server_host.as_deref(),
                dir: &dir,
            },
        );
        let path = dir.join("job.sh");
        std::fs::write(&path, text).map_err(failed)?;
        Ok(path)
    }

    /// The metaserver's address for servers without a grid file.
    fn advertised(&self) -> String {
        ninf_proto::sync::lock(&self.address).clone()
    }
}

/// A batch error as the queue's refusal.
pub fn refused(e: BatchError) -> MetaserverError {
    MetaserverError::Allocation(e.to_string())
}
