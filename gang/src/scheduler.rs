//! The gang scheduler of one server as event handlers over its state: jobs are submitted,
//! finish, or change global state; `tick` is called at slot boundaries (and after events) and
//! answers which jobs to stop and which to resume. It reads time only from its [`Clock`], so
//! the same code drives real processes in the compute server and runs under a fake clock in
//! tests and the simulator.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::admission::{AdmissionQueue, Policy, QueuedJob};
use crate::clock::Clock;
use crate::matrix::{GangMatrix, JobId, JobState, MatrixError};

/// How a server time-shares its processors.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GangConfig {
    pub processors: u32,
    /// Multiprogramming level: rows of the time table.
    pub max_rows: usize,
    /// Slot length in seconds (100 ms by default).
    pub quantum: f64,
    pub policy: Policy,
    /// Seconds (600 in seed 001).
    pub wait_limit: f64,
    /// A stopped (deadlocked) job is reported at once and killed after this many seconds.
    pub stop_grace: f64,
}

impl GangConfig {
    pub fn new(processors: u32) -> GangConfig {
        GangConfig {
            processors,
            max_rows: 4,
            quantum: 0.1,
            policy: Policy::Fpfs,
            wait_limit: 600.0,
            stop_grace: 10.0,
        }
    }
}

/// What to do to processes at a slot boundary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Switch {
    pub at: f64,
    /// The row whose slot begins; `None` when nothing is runnable.
    pub row: Option<usize>,
    /// Jobs to stop (all their processes), then jobs to resume.
    pub stop: Vec<JobId>,
    pub resume: Vec<JobId>,
}

/// Counters for people and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GangCounters {
    /// Slot boundaries passed.
    pub slots: u64,
    /// Boundaries at which some job stopped or resumed.
    pub switches: u64,
    pub admitted: u64,
    pub finished: u64,
}

/// The gang scheduler.
pub struct GangScheduler<C: Clock> {
    clock: C,
    pub config: GangConfig,
    matrix: GangMatrix,
    queue: AdmissionQueue,
    /// Jobs whose processes run now.
    running: BTreeSet<JobId>,
    slot_end: f64,
    /// An event changed the table since the last tick.
    dirty: bool,
    counters: GangCounters,
}

impl<C: Clock> GangScheduler<C> {
    pub fn new(config: GangConfig, clock: C) -> GangScheduler<C> {
        GangScheduler {
            matrix: GangMatrix::new(config.processors, config.max_rows),
            queue: AdmissionQueue::new(config.policy, config.wait_limit),
            clock,
            config,
            running: BTreeSet::new(),
            slot_end: f64::NEG_INFINITY,
            dirty: false,
            counters: GangCounters::default(),
        }
    }

    pub fn matrix(&self) -> &GangMatrix {
        &self.matrix
    }

    pub fn queue(&self) -> &AdmissionQueue {
        &self.queue
    }

    pub fn counters(&self) -> GangCounters {
        self.counters
    }

    pub fn running(&self) -> &BTreeSet<JobId> {
        &self.running
    }

    /// A job arrives needing `processors`; returns the jobs that entered the table (it, or
    /// others, or none). Refuses a job no table of this size can ever hold.
    pub fn submit(&mut self, id: JobId, processors: u32) -> Result<Vec<JobId>, MatrixError> {
        if processors == 0 {
            return Err(MatrixError::NoProcessors { job: id });
        }
        if processors > self.config.processors {
            return Err(MatrixError::TooLarge {
                job: id,
                processors,
                columns: self.config.processors,
            });
        }
        if self.matrix.placement(id).is_some() || self.queue.jobs().iter().any(|j| j.id == id) {
            return Err(MatrixError::Duplicate(id));
        }
        let now = self.clock.now();
        self.queue.push(
            QueuedJob {
                id,
                processors,
                arrival: now,
            },
            now,
        );
        Ok(self.admit())
    }

    fn admit(&mut self) -> Vec<JobId> {
        let started: Vec<JobId> = self
            .queue
            .admit(&mut self.matrix, self.clock.now())
            .into_iter()
            .map(|j| j.id)
            .collect();
        if !started.is_empty() {
            self.dirty = true;
            self.counters.admitted += started.len() as u64;
        }
        started
    }

    /// A job ended (or was killed, or cancelled while queued); returns the jobs that entered
    /// the table in its place.
    pub fn finish(&mut self, id: JobId) -> Vec<JobId> {
        if self.matrix.remove(id).is_some() {
            self.running.remove(&id);
            self.counters.finished += 1;
            self.dirty = true;
        } else {
            self.queue.cancel(id);
        }
        self.admit()
    }

    /// A job's processes all blocked (idle or stopped) or one became runnable again.
    pub fn set_state(&mut self, id: JobId, state: JobState) {
        if self.matrix.set_state(id, state) {
            self.dirty = true;
        }
    }

    /// Jobs stopped (deadlocked) for longer than the grace: the server kills them.
    pub fn stopped_beyond_grace(&self) -> Vec<JobId> {
        let now = self.clock.now();
        self.matrix
            .jobs()
            .filter_map(|(id, p)| match p.state {
                JobState::Stopped { since } if now - since >= self.config.stop_grace => Some(id),
                _ => None,
            })
            .collect()
    }

    /// When `tick` must be called next at the latest (the current slot's end).
    pub fn next_boundary(&self) -> f64 {
        self.slot_end
    }

    /// At a slot boundary, moves to the next row; after an event, recomputes the current
    /// slot. Returns the processes to stop and resume, or `None` if nothing changes.
    pub fn tick(&mut self) -> Option<Switch> {
        let now = self.clock.now();
        let boundary = now >= self.slot_end;
        if !boundary && !self.dirty {
            return None;
        }
        self.dirty = false;
        let slot = if boundary {
            self.counters.slots += 1;
            self.slot_end = now + self.config.quantum;
            self.matrix.advance()
        } else {
            match self.matrix.current_row() {
                Some(row)
                    if row < self.matrix.rows()
                        && !self.matrix.slot_for(row).running.is_empty() =>
                {
                    Some(self.matrix.slot_for(row))
                }
                _ => self.matrix.advance(),
            }
        };
        let next: BTreeSet<JobId> = slot
            .as_ref()
            .map(|s| s.running.iter().copied().collect())
            .unwrap_or_default();
        let stop: Vec<JobId> = self.running.difference(&next).copied().collect();
        let resume: Vec<JobId> = next.difference(&self.running).copied().collect();
        if stop.is_empty() && resume.is_empty() {
            return None;
        }
        self.counters.switches += 1;
        self.running = next;
        Some(Switch {
            at: now,
            row: slot.map(|s| s.row),
            stop,
            resume,
        })
    }
}
