//! Space-sharing policies the simulator runs. FCFS, FPFS and FPMPFS are the live gang core's
//! own admission queue over its own time table with one row (seed 001: space sharing), so the
//! simulated and the live servers make the same decisions. EASY backfilling is the standard
//! baseline: the first waiting job gets a reservation at the earliest time enough processors
//! will be free (by the running jobs' requested times), and later jobs may start now if they
//! do not delay it.

use std::collections::VecDeque;

use ninf_gang::{AdmissionQueue, GangMatrix, QueuedJob};

use crate::workload::Job;

/// A job in progress, as a policy sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Running {
    pub id: u64,
    pub processors: u32,
    /// Its start plus its requested time.
    pub expected_end: f64,
}

/// A space-sharing scheduling policy, as event handlers.
pub trait Policy {
    fn name(&self) -> String;
    /// A job arrived.
    fn arrive(&mut self, job: &Job, now: f64);
    /// A job ended; its processors are free.
    fn finish(&mut self, id: u64, now: f64);
    /// Which waiting jobs start now, with `free` processors idle and `running` in progress.
    fn schedule(&mut self, now: f64, free: u32, running: &[Running]) -> Vec<u64>;
    /// Jobs waiting.
    fn waiting(&self) -> usize;
}

/// FCFS, FPFS or FPMPFS: the gang core's admission over a one-row time table.
pub struct GangAdmission {
    queue: AdmissionQueue,
    matrix: GangMatrix,
}

impl GangAdmission {
    pub fn new(policy: ninf_gang::Policy, processors: u32, wait_limit: f64) -> GangAdmission {
        GangAdmission {
            queue: AdmissionQueue::new(policy, wait_limit),
            matrix: GangMatrix::new(processors, 1),
        }
    }
}

impl Policy for GangAdmission {
    fn name(&self) -> String {
        format!("{:?}", self.queue.policy).to_lowercase()
    }

    fn arrive(&mut self, job: &Job, now: f64) {
        self.queue.push(
            QueuedJob {
                id: job.id,
                processors: job.processors,
                arrival: job.submit,
            },
            now,
        );
    }

    fn finish(&mut self, id: u64, _now: f64) {
        self.matrix.remove(id);
    }

    fn schedule(&mut self, now: f64, _free: u32, _running: &[Running]) -> Vec<u64> {
        self.queue
            .admit(&mut self.matrix, now)
            .into_iter()
            .map(|j| j.id)
            .collect()
    }

    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// EASY backfilling (Lifka 1995; Mu'alem and Feitelson 2001).
#[derive(Default)]
pub struct Easy {
    queue: VecDeque<Job>,
}

impl Policy for Easy {
    fn name(&self) -> String {
        "easy".to_string()
    }

    fn arrive(&mut self, job: &Job, _now: f64) {
        self.queue.push_back(*job);
    }

    fn finish(&mut self, _id: u64, _now: f64) {}

    fn schedule(&mut self, now: f64, free: u32, running: &[Running]) -> Vec<u64> {
        let mut free = free;
        let mut started = Vec::new();
        // Running jobs' expected ends, including those started here; a job past its
        // estimate is expected to end now.
        let mut ends: Vec<(f64, u32)> = running
            .iter()
            .map(|r| (r.expected_end.max(now), r.processors))
            .collect();
        while let Some(head) = self.queue.front() {
            if head.processors > free {
                break;
            }
            free -= head.processors;
            ends.push((now + head.requested, head.processors));
            started.push(head.id);
            self.queue.pop_front();
        }
        let Some(head) = self.queue.front().copied() else {
            return started;
        };
        // The head's reservation: the earliest time enough processors are free.
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut available = free;
        let mut shadow = f64::INFINITY;
        for &(end, processors) in &ends {
            available += processors;
            if available >= head.processors {
                shadow = end;
                break;
            }
        }
        // Processors left over at the shadow time, which backfilled jobs may keep.
        let mut extra = available.saturating_sub(head.processors);
        let mut i = 1;
        while i < self.queue.len() && free > 0 {
            let job = self.queue[i];
            let ends_in_time = now + job.requested <= shadow;
            if job.processors <= free && (ends_in_time || job.processors <= extra) {
                free -= job.processors;
                if !ends_in_time {
                    extra -= job.processors;
                }
                started.push(job.id);
                self.queue.remove(i);
            } else {
                i += 1;
            }
        }
        started
    }

    fn waiting(&self) -> usize {
        self.queue.len()
    }
}

/// Policies by their lower-case names.
pub const IMPLEMENTED: [&str; 4] = ["fcfs", "fpfs", "fpmpfs", "easy"];

/// Names the issue lists that are not simulated yet.
const PLANNED: [&str; 10] = [
    "conservative",
    "dqt-max",
    "dqt-min",
    "dqt-apa",
    "dqt-ff",
    "dqt-ff-apa",
    "mct",
    "mctb",
    "mctm",
    "mctbm",
];

pub fn policy_by_name(
    name: &str,
    processors: u32,
    wait_limit: f64,
) -> Result<Box<dyn Policy>, String> {
    match name {
        "easy" => Ok(Box::new(Easy::default())),
        "gang" => Err(
            "`gang` time-shares the machine; it is simulated by `simulate_gang`, not as a space-sharing policy"
                .to_string(),
        ),
        _ => match name.parse::<ninf_gang::Policy>() {
            Ok(policy) => Ok(Box::new(GangAdmission::new(policy, processors, wait_limit))),
            Err(_) if PLANNED.contains(&name) => Err(format!(
                "policy `{name}` is not simulated yet (simulated: {})",
                IMPLEMENTED.join(", ")
            )),
            Err(_) => Err(format!(
                "unknown policy `{name}` (simulated: {})",
                IMPLEMENTED.join(", ")
            )),
        },
    }
}
