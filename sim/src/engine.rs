//! The event loop: arrivals and completions on a virtual clock. At each instant, completions
//! are handled first, then arrivals, then the policy is asked which jobs start. Ties are broken
//! by job id, so a run is a pure function of its jobs and policy.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use serde::Serialize;

use crate::policy::{Policy, Running};
use crate::workload::Job;

/// When a job started and ended.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    pub id: u64,
    pub submit: f64,
    pub start: f64,
    pub end: f64,
    pub processors: u32,
    /// Its run time alone (time-shared jobs take longer from start to end).
    pub run: f64,
}

#[derive(Debug, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("job {id} needs {processors} processors; the machine has {machine}")]
    TooLarge {
        id: u64,
        processors: u32,
        machine: u32,
    },
    #[error("job {id} has {what} {value}; it must be {expected}")]
    BadJob {
        id: u64,
        what: &'static str,
        value: f64,
        expected: &'static str,
    },
    #[error("policy `{policy}` started job {id} needing {processors} processors with {free} free")]
    Overcommit {
        policy: String,
        id: u64,
        processors: u32,
        free: u32,
    },
    #[error("the quantum must be a positive number of seconds, not {0}")]
    BadQuantum(f64),
    #[error("policy `{policy}` started job {id}, which is not waiting")]
    NotWaiting { policy: String, id: u64 },
    #[error("policy `{policy}` leaves {waiting} jobs waiting on an idle machine")]
    Stuck { policy: String, waiting: usize },
}

/// Refuses a job whose submit, run or requested time is negative or not a number.
pub(crate) fn check_times(job: &Job) -> Result<(), SimError> {
    for (what, value) in [
        ("submit time", job.submit),
        ("run time", job.run),
        ("requested time", job.requested),
    ] {
        if !(value.is_finite() && value >= 0.0) {
            return Err(SimError::BadJob {
                id: job.id,
                what,
                value,
                expected: "a finite non-negative number",
            });
        }
    }
    Ok(())
}

/// A completion in the event queue, earliest first, then by id.
#[derive(Debug, PartialEq)]
struct Completion {
    end: f64,
    id: u64,
}

impl Eq for Completion {}

impl Ord for Completion {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .end
            .total_cmp(&self.end)
            .then_with(|| other.id.cmp(&self.id))
    }
}

impl PartialOrd for Completion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Runs `jobs` on a machine of `processors` under `policy`; outcomes in job order.
pub fn simulate(
    jobs: &[Job],
    processors: u32,
    policy: &mut dyn Policy,
) -> Result<Vec<Outcome>, SimError> {
    for job in jobs {
        if job.processors == 0 || job.processors > processors {
            return Err(SimError::TooLarge {
                id: job.id,
                processors: job.processors,
                machine: processors,
            });
        }
        check_times(job)?;
    }
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by(|&a, &b| {
        jobs[a]
            .submit
            .total_cmp(&jobs[b].submit)
            .then(jobs[a].id.cmp(&jobs[b].id))
    });
    let index: HashMap<u64, usize> = jobs.iter().enumerate().map(|(i, j)| (j.id, i)).collect();
    let mut waiting = vec![false; jobs.len()];
    let mut outcomes: Vec<Option<Outcome>> = vec![None; jobs.len()];
    let mut running: Vec<Running> = Vec::new();
    let mut completions = BinaryHeap::new();
    let mut free = processors;
    let mut next = 0;
    while next < order.len() || !completions.is_empty() {
        let arrival = order.get(next).map(|&i| jobs[i].submit);
        let completion = completions.peek().map(|c: &Completion| c.end);
        let now = match (arrival, completion) {
            (Some(a), Some(c)) => a.min(c),
            (Some(a), None) => a,
            (None, Some(c)) => c,
            (None, None) => break,
        };
        while completions.peek().is_some_and(|c| c.end <= now) {
            let Some(done) = completions.pop() else { break };
            if let Some(position) = running.iter().position(|r| r.id == done.id) {
                free += running.swap_remove(position).processors;
            }
            policy.finish(done.id, now);
        }
        while next < order.len() && jobs[order[next]].submit <= now {
            let job = &jobs[order[next]];
            waiting[order[next]] = true;
            policy.arrive(job, now);
            next += 1;
        }
        for id in policy.schedule(now, free, &running) {
            let Some(&i) = index.get(&id).filter(|&&i| waiting[i]) else {
                return Err(SimError::NotWaiting {
                    policy: policy.name(),
                    id,
                });
            };
            let job = &jobs[i];
            if job.processors > free {
                return Err(SimError::Overcommit {
                    policy: policy.name(),
                    id,
                    processors: job.processors,
                    free,
                });
            }
            waiting[i] = false;
            free -= job.processors;
            running.push(Running {
                id,
                processors: job.processors,
                expected_end: now + job.requested,
            });
            completions.push(Completion {
                end: now + job.run,
                id,
            });
            outcomes[i] = Some(Outcome {
                id,
                submit: job.submit,
                start: now,
                end: now + job.run,
                processors: job.processors,
                run: job.run,
            });
        }
        if completions.is_empty() && next == order.len() && policy.waiting() > 0 {
            return Err(SimError::Stuck {
                policy: policy.name(),
                waiting: policy.waiting(),
            });
        }
    }
    Ok(outcomes.into_iter().flatten().collect())
}
