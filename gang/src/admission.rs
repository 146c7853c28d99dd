//! Which queued jobs enter the time table, in the FPMPFS paper's terms (Aida, Kasahara, Narita):
//! - `fcfs`: only the head of the queue may start; if it does not fit, everything waits;
//! - `fpfs` (Fit Processors First Served): scan from the head, start every job that fits,
//!   skip the others, while processors remain;
//! - `fpmpfs` (Fit Processors Most Processors First Served): the queue is kept sorted by
//!   non-increasing demand by the paper's insertion routine, then scanned as FPFS.
//!
//! WaitLimit bounds starvation: a job that does not fit and has waited at least WaitLimit
//! stops the scan (nobody behind it may start), and FPMPFS never inserts a new job ahead of it.
//! "Fits" means the time table has a row with enough free columns (or may open a new row), so
//! with a multiprogramming level of 1 this is exactly the paper's space-sharing scheduler.

use serde::{Deserialize, Serialize};

use crate::matrix::{GangMatrix, JobId};

/// An allocation policy, chosen by configuration by its lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    Fcfs,
    Fpfs,
    Fpmpfs,
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Policy, String> {
        match s {
            "fcfs" => Ok(Policy::Fcfs),
            "fpfs" => Ok(Policy::Fpfs),
            "fpmpfs" => Ok(Policy::Fpmpfs),
            other => Err(format!(
                "unknown allocation policy `{other}` (known: fcfs, fpfs, fpmpfs)"
            )),
        }
    }
}

/// A job waiting to enter the table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct QueuedJob {
    pub id: JobId,
    pub processors: u32,
    /// When it arrived.
    pub arrival: f64,
}

impl QueuedJob {
    fn waited(&self, now: f64) -> f64 {
        now - self.arrival
    }
}

/// The admission queue.
#[derive(Debug, Clone)]
pub struct AdmissionQueue {
    pub policy: Policy,
    /// Seconds after which a job that does not fit stops the scan (600 s in the paper).
    pub wait_limit: f64,
    queue: Vec<QueuedJob>,
}

impl AdmissionQueue {
    pub fn new(policy: Policy, wait_limit: f64) -> AdmissionQueue {
        AdmissionQueue {
            policy,
            wait_limit,
            queue: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The queue, head first.
    pub fn jobs(&self) -> &[QueuedJob] {
        &self.queue
    }

    /// Adds an arriving job: at the tail, or for FPMPFS by the paper's spooler routine (walk
    /// from the tail towards the head past jobs demanding fewer processors, but never past a
    /// job that has reached its WaitLimit).
    pub fn push(&mut self, job: QueuedJob, now: f64) {
        if self.policy != Policy::Fpmpfs {
            self.queue.push(job);
            return;
        }
        let mut i = self.queue.len();
        while i > 0 {
            let ahead = &self.queue[i - 1];
            if ahead.waited(now) >= self.wait_limit {
                break;
            }
            if ahead.processors < job.processors {
                i -= 1;
            } else {
                break;
            }
        }
        self.queue.insert(i, job);
    }

    /// Removes a queued job (cancelled before it started); `false` if it was not queued.
    pub fn cancel(&mut self, id: JobId) -> bool {
        let before = self.queue.len();
        self.queue.retain(|j| j.id != id);
        self.queue.len() != before
    }

    /// Scans the queue as the policy says, placing every job that may start into `matrix`;
    /// returns them in the order they started.
    pub fn admit(&mut self, matrix: &mut GangMatrix, now: f64) -> Vec<QueuedJob> {
        let mut started = Vec::new();
        let mut i = 0;
        while i < self.queue.len() && matrix.has_room() {
            let job = self.queue[i];
            if matrix.fits(job.processors) {
                // Errors (duplicate id, impossible size) were refused at submission.
                if let Ok(Some(_)) = matrix.place(job.id, job.processors) {
                    self.queue.remove(i);
                    started.push(job);
                    continue;
                }
            }
            if self.policy == Policy::Fcfs || job.waited(now) >= self.wait_limit {
                break;
            }
            i += 1;
        }
        started
    }
}
