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
use crate::table::{TableJob, TableSlot, TimeTable};

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
    /// Time tables issued to node agents (distributed mode).
    pub tables: u64,
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
    /// An event changed the table since the last tick or issued table.
    dirty: bool,
    counters: GangCounters,
    /// The last table issued to node agents (distributed mode).
    issued: Option<TimeTable>,
    /// The slot of the issued table in progress when the first event since then arrived:
    /// its row's own jobs and its start time.
    in_progress: Option<(Vec<JobId>, f64)>,
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
            issued: None,
            in_progress: None,
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
        self.follow_issued_table();
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
        self.follow_issued_table();
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
        self.follow_issued_table();
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

    /// In distributed mode the matrix's current row is wherever the issued table's clock has
    /// got to; it must be brought up to date before an event changes the rows, so the next
    /// table goes on from the same slot instead of restarting the rotation.
    fn follow_issued_table(&mut self) {
        if self.dirty {
            return;
        }
        if let Some(table) = &self.issued {
            let number = table.slot_number(self.clock.now());
            let row = table.slot(number).map(|s| s.row);
            self.matrix.set_current_row(row);
            self.in_progress = row.map(|row| {
                let own = self
                    .matrix
                    .jobs()
                    .filter(|(_, p)| p.row == row)
                    .map(|(id, _)| id)
                    .collect();
                (own, table.slot_start(number))
            });
        }
    }

    /// Whether the matrix changed since the last table was issued.
    pub fn needs_table(&self) -> bool {
        self.dirty || self.issued.is_none()
    }

    /// The last table issued.
    pub fn issued_table(&self) -> Option<&TimeTable> {
        self.issued.as_ref()
    }

    /// Issues the time table for the node agents (distributed mode, seed 003): the cycle of
    /// slots over the rows with a runnable job, starting with the slot in progress so an event
    /// does not restart the rotation. When that slot's row still runs, the new table keeps its
    /// start as the epoch; otherwise the next slot starts now. Processes are left empty for
    /// the server to fill in.
    pub fn table(&mut self) -> TimeTable {
        self.follow_issued_table();
        let now = self.clock.now();
        let rows = self.matrix.rows();
        // The slot in progress goes on if its row still has a runnable job of its own;
        // otherwise the rotation moves to the next row (after a removal the matrix points
        // its current row just before the row that took the removed one's place).
        let continuing = self.in_progress.take().and_then(|(own, started)| {
            own.iter()
                .filter_map(|&id| self.matrix.placement(id))
                .find(|p| p.state.is_runnable())
                .map(|p| (p.row, started))
        });
        let (start, epoch) = match continuing {
            Some((row, started)) => (row, started),
            None => (
                self.matrix
                    .current_row()
                    .map_or(0, |c| (c + 1) % rows.max(1)),
                now,
            ),
        };
        let mut cycle = Vec::new();
        for k in 0..rows {
            let row = (start + k) % rows;
            if self.matrix.has_runnable(row) {
                let mut running = self.matrix.slot_for(row).running;
                running.sort_unstable();
                cycle.push(TableSlot { row, running });
            }
        }
        let epoch = match cycle.first() {
            Some(first) if first.row == start => epoch,
            _ => now,
        };
        self.matrix.set_current_row(cycle.first().map(|s| s.row));
        let jobs = self
            .matrix
            .jobs()
            .map(|(id, p)| {
                (
                    id,
                    TableJob {
                        columns: p.columns.clone(),
                        processes: Vec::new(),
                    },
                )
            })
            .collect();
        let table = TimeTable {
            version: self.counters.tables + 1,
            epoch,
            quantum: self.config.quantum,
            cycle,
            jobs,
        };
        self.counters.tables += 1;
        self.dirty = false;
        self.issued = Some(table.clone());
        table
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
