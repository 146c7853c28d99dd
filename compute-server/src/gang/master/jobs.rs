//! A call's job through the gang master: queued until the gang core admits it, attached to
//! its processes, started at its first slot, stopped while deadlocked, killed past its grace,
//! and finished when its ticket drops. Each change that alters the table issues a new one.

use std::sync::Arc;

use ninf_gang::{JobId, JobState};

use super::links::MasterClock;
use super::records::JobRecord;
use super::table::{GangError, GangMaster};
use crate::gang::clock::MachineClock;

/// A call's job, from admission to its end; dropping it takes the job out of the table (or
/// the queue) and lets the next ones in.
pub struct JobTicket<C: MasterClock = MachineClock> {
    master: Arc<GangMaster<C>>,
    pub id: JobId,
}

impl<C: MasterClock> JobTicket<C> {
    /// Tells the agents which processes run the job (rank order) and whether it can run now
    /// or still waits for its input. A runnable job then waits for its first slot: its
    /// processes have no input yet, so withholding the input until the slot keeps them from
    /// running outside it without any signal; from then on the agents stop and continue them.
    pub async fn attach(&self, processes: Vec<u32>, runnable: bool) {
        // The next call of a batch on the process the last one used: the agents already
        // hold it under this job. A new table here would wake every job waiting for its
        // slot, twice per tiny call.
        if runnable && self.master.runs_on(self.id, &processes) {
            return;
        }
        self.master.attach(self.id, processes, runnable);
        if runnable {
            self.wait_for_slot().await;
        }
    }

    /// Waits for the job's slot, and from then on has the agents stop and continue its
    /// processes (the caller sends the input right after).
    pub async fn wait_for_slot(&self) {
        self.master.wait_for_slot(self.id).await;
        self.master.mark_started(self.id);
    }

    /// The job's input arrived (runnable) or it waits for input again (idle).
    pub fn set_runnable(&self, runnable: bool) {
        self.master.set_state(self.id, runnable_state(runnable));
    }

    /// Seconds the job has run so far by the tables issued since it entered: its time in
    /// the table less the time it stood stopped outside its slots.
    pub fn running_seconds(&self) -> f64 {
        self.master.running_seconds(self.id)
    }

    /// Why the server killed the job, if it did.
    pub fn killed(&self) -> Option<String> {
        let inner = self.master.lock();
        inner.jobs.get(&self.id)?.killed().map(str::to_string)
    }
}

impl<C: MasterClock> Drop for JobTicket<C> {
    fn drop(&mut self) {
        self.master.finish(self.id);
    }
}

fn runnable_state(runnable: bool) -> JobState {
    if runnable {
        JobState::Runnable
    } else {
        JobState::Idle
    }
}

impl<C: MasterClock> GangMaster<C> {
    /// Queues a job of `processors` for `function` and waits until it enters the table.
    pub async fn admit(
        self: &Arc<Self>,
        function: &str,
        processors: u32,
    ) -> Result<JobTicket<C>, GangError> {
        let (ticket, admitted) = {
            let mut inner = self.lock();
            let id = inner.next_job;
            inner.next_job += 1;
            let entered = inner.scheduler.submit(id, processors)?;
            let (record, admitted) = JobRecord::queued(function);
            inner.jobs.insert(id, record);
            inner.admit(&entered, self.clock.now());
            let ticket = JobTicket {
                master: self.clone(),
                id,
            };
            (ticket, admitted)
        };
        // If this future is dropped while waiting, the ticket's drop cancels the job.
        admitted.await.map_err(|_| GangError::Closed)?;
        Ok(ticket)
    }

    fn attach(&self, id: JobId, processes: Vec<u32>, runnable: bool) {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.get_mut(&id) {
            job.processes = processes;
        }
        inner.scheduler.set_state(id, runnable_state(runnable));
        self.issue(&mut inner);
    }

    /// Whether job `id` has started, is runnable, and runs on exactly `processes`.
    fn runs_on(&self, id: JobId, processes: &[u32]) -> bool {
        let inner = self.lock();
        let attached = inner
            .jobs
            .get(&id)
            .is_some_and(|job| job.started() && job.processes == processes);
        attached
            && inner
                .scheduler
                .matrix()
                .placement(id)
                .is_some_and(|p| p.state.is_runnable())
    }

    fn mark_started(&self, id: JobId) {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.get_mut(&id) {
            job.start();
        }
        // A new version even if the matrix did not change: the agents' view did.
        self.issue(&mut inner);
    }

    pub(super) fn set_state(&self, id: JobId, state: JobState) {
        let mut inner = self.lock();
        let current = inner.scheduler.matrix().placement(id).map(|p| p.state);
        let same = match (current, state) {
            (Some(JobState::Stopped { .. }), JobState::Stopped { .. }) => true,
            (Some(a), b) => a == b,
            (None, _) => true,
        };
        if !same {
            inner.scheduler.set_state(id, state);
            self.issue(&mut inner);
        }
    }

    /// A parallel job's ranks all wait with nothing in flight (`true`), or one got a message
    /// (`false`).
    pub fn set_deadlocked(&self, id: JobId, deadlocked: bool) {
        let state = if deadlocked {
            tracing::warn!(
                job = id,
                "every rank waits to receive with nothing in flight: deadlock"
            );
            JobState::Stopped {
                since: self.clock.now(),
            }
        } else {
            JobState::Runnable
        };
        self.set_state(id, state);
    }

    fn finish(&self, id: JobId) {
        let mut inner = self.lock();
        let now = self.clock.now();
        if let Some(since) = inner.jobs.remove(&id).and_then(|j| j.in_table_since()) {
            inner.record_residence((now - since).max(0.0));
        }
        inner.close_spread(id, "");
        let entered = inner.scheduler.finish(id);
        inner.admit(&entered, now);
        if inner.scheduler.needs_table() {
            self.issue(&mut inner);
        }
    }

    /// Kills the processes of jobs deadlocked past their grace; returns how many.
    pub fn kill_deadlocked(&self) -> usize {
        let mut inner = self.lock();
        let grace = inner.scheduler.config.stop_grace;
        let doomed: Vec<(JobId, String)> = inner
            .scheduler
            .stopped_beyond_grace()
            .into_iter()
            .filter_map(|id| {
                let job = inner.jobs.get(&id)?;
                if job.killed().is_some() {
                    return None;
                }
                tracing::warn!(job = id, function = %job.function, "killed a deadlocked job");
                Some((id, deadlock_reason(job, grace)))
            })
            .collect();
        for (id, reason) in &doomed {
            self.kill(&mut inner, *id, reason.clone());
        }
        inner.deadlocks_killed += doomed.len() as u64;
        doomed.len()
    }

    /// Jobs in the table, jobs queued, rows in use, and the expected wait of a new job.
    pub fn load(&self) -> (usize, usize, usize, f64) {
        let inner = self.lock();
        let running = inner.scheduler.matrix().jobs().count();
        let queued = inner.scheduler.queue().len();
        let rows = inner.scheduler.matrix().rows();
        (running, queued, rows, inner.expected_wait())
    }

    /// Jobs in the table and in the queue.
    pub fn jobs(&self) -> usize {
        let inner = self.lock();
        inner.scheduler.matrix().jobs().count() + inner.scheduler.queue().len()
    }
}

fn deadlock_reason(job: &JobRecord, grace: f64) -> String {
    format!(
        "all {} ranks of `{}` waited to receive with no message in flight (deadlock); killed after the {grace} s grace",
        job.processes.len(),
        job.function
    )
}
