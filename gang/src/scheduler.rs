//! The gang scheduler of one server as event handlers over its state: jobs are submitted,
//! finish, or change global state; `tick` is called at slot boundaries (and after events) and
//! answers which jobs to stop and which to resume. It reads time only from its [`Clock`], so
//! the same code drives real processes in the compute server and runs under a fake clock in
//! tests and the simulator.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::admission::{AdmissionQueue, Policy, QueuedJob};
use crate::clock::Clock;
use crate::dqt::{Allocation, DqtConfig, QueueTree};
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
    /// Seconds (600 in the FPMPFS paper).
    pub wait_limit: f64,
    /// A stopped (deadlocked) job is reported at once and killed after this many seconds.
    pub stop_grace: f64,
    /// How jobs share the processors over time.
    pub layout: Layout,
}

/// The shape of the time table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Layout {
    /// The Ousterhout matrix: rows of slots, up to `max_rows`, with admission (the FPMPFS paper).
    Matrix,
    /// The gang thesis's Distributed Queue Tree: every job joins the queue of a partition of its size
    /// (rounded up to a power of `width`), chosen by `allocation`; the slots follow the tree's
    /// front. No admission queue: every job is placed at once. `processors` must be a power of
    /// `width` (else the matrix is used).
    Dqt {
        width: u32,
        allocation: Allocation,
        fair: bool,
    },
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
            layout: Layout::Matrix,
        }
    }
}

/// Slots of a DQT's pattern looked at when a table is issued, at most.
const DQT_CYCLE_LIMIT: usize = 4096;

/// The Distributed Queue Tree behind a `Layout::Dqt` table.
struct DqtLayout {
    /// The tree as it stands after deciding the slot in progress (between tables: after the
    /// last decision the issued table was computed from).
    tree: QueueTree,
    /// For each slot of the issued table's prefix, then of its cycle, the tree's state once
    /// it has decided that slot.
    after_states: Vec<QueueTree>,
    prefix_len: usize,
    /// The issued table's slot in progress when the first event since arrived: its start
    /// and its jobs. It runs on to its end, as the tree decided it; events count from the
    /// next slot, as in the simulator.
    in_progress: Option<(f64, Vec<JobId>)>,
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
    /// With `Layout::Dqt`: the tree (the matrix then only records each job's columns and
    /// state, one row per job).
    dqt: Option<DqtLayout>,
}

impl<C: Clock> GangScheduler<C> {
    pub fn new(config: GangConfig, clock: C) -> GangScheduler<C> {
        let dqt = match config.layout {
            Layout::Matrix => None,
            Layout::Dqt {
                width,
                allocation,
                fair,
            } => DqtConfig::for_processors(config.processors, width, allocation, fair)
                .and_then(QueueTree::new)
                .ok()
                .map(|tree| DqtLayout {
                    tree,
                    after_states: Vec::new(),
                    prefix_len: 0,
                    in_progress: None,
                }),
        };
        let max_rows = if dqt.is_some() {
            usize::MAX
        } else {
            config.max_rows
        };
        GangScheduler {
            dqt,
            matrix: GangMatrix::new(config.processors, max_rows),
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
        if let Some(dqt) = &mut self.dqt {
            return place_in_tree(dqt, &mut self.matrix, id, processors).map(|()| {
                self.dirty = true;
                self.counters.admitted += 1;
                vec![id]
            });
        }
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
        if let Some(dqt) = &mut self.dqt {
            dqt.tree.remove(id);
        }
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
        if let (Some(dqt), Some(table)) = (&mut self.dqt, &self.issued) {
            let number = table.slot_number(self.clock.now());
            let (before, len) = (
                dqt.prefix_len as u64,
                (dqt.after_states.len() - dqt.prefix_len) as u64,
            );
            let k = match number {
                n if n < before => Some(n),
                n if len > 0 => Some(before + (n - before) % len),
                _ => None,
            };
            if let Some(state) = k.and_then(|k| dqt.after_states.get(k as usize)) {
                dqt.tree = state.clone();
                dqt.in_progress = table
                    .slot(number)
                    .map(|slot| (table.slot_start(number), slot.running.clone()));
            }
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

    /// Issues the time table for the node agents (distributed mode, the time-sync paper): the cycle of
    /// slots over the rows with a runnable job, starting with the slot in progress so an event
    /// does not restart the rotation. When that slot's row still runs, the new table keeps its
    /// start as the epoch; otherwise the next slot starts now. Processes are left empty for
    /// the server to fill in.
    pub fn table(&mut self) -> TimeTable {
        self.follow_issued_table();
        if self.dqt.is_some() {
            return self.dqt_table();
        }
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
        self.issue(epoch, Vec::new(), cycle)
    }

    /// The table of a DQT layout: the slot in progress, which runs on from its start with
    /// those of its jobs still runnable; then the tree's next decisions, first those before its
    /// pattern repeats, then the pattern. Each slot's jobs are those of the tree's that are
    /// runnable; slots with none are left out.
    fn dqt_table(&mut self) -> TimeTable {
        let now = self.clock.now();
        let Some(dqt) = &mut self.dqt else {
            return self.issue(now, Vec::new(), Vec::new());
        };
        let runnable = |job: &JobId| {
            self.matrix
                .placement(*job)
                .is_some_and(|p| p.state.is_runnable())
        };
        let (prefix, pattern) = dqt.tree.cycle(DQT_CYCLE_LIMIT);
        // The state after each decision is the one before the next; after the last, the
        // pattern's first.
        let first_of_pattern = pattern.first().map(|(state, _)| state.clone());
        let decisions: Vec<(Vec<JobId>, QueueTree)> = {
            let befores: Vec<&QueueTree> = prefix.iter().chain(&pattern).map(|(s, _)| s).collect();
            prefix
                .iter()
                .chain(&pattern)
                .enumerate()
                .map(|(i, (_, runs))| {
                    let after = match befores.get(i + 1) {
                        Some(next) if i + 1 != prefix.len() + pattern.len() => (*next).clone(),
                        _ => first_of_pattern.clone().unwrap_or_else(|| dqt.tree.clone()),
                    };
                    (runs.iter().map(|r| r.job).collect(), after)
                })
                .collect()
        };
        let mut after_states = Vec::new();
        let in_progress = dqt.in_progress.take().and_then(|(start, jobs)| {
            let running: Vec<JobId> = jobs.into_iter().filter(runnable).collect();
            (!running.is_empty()).then_some((start, running))
        });
        let mut prefix_slots = Vec::new();
        let epoch = match in_progress {
            Some((start, running)) => {
                // Its decision is made: after it stands the tree as it is now.
                prefix_slots.push(TableSlot { row: 0, running });
                after_states.push(dqt.tree.clone());
                start
            }
            None => now,
        };
        let mut table_slots = |part: &[(Vec<JobId>, QueueTree)], first: usize| {
            let mut slots = Vec::new();
            for (k, (jobs, after)) in part.iter().enumerate() {
                let mut running: Vec<JobId> = jobs.iter().copied().filter(runnable).collect();
                if running.is_empty() {
                    continue;
                }
                running.sort_unstable();
                slots.push(TableSlot {
                    row: first + k,
                    running,
                });
                after_states.push(after.clone());
            }
            slots
        };
        let offset = prefix_slots.len();
        prefix_slots.extend(table_slots(&decisions[..prefix.len()], offset));
        let cycle = table_slots(&decisions[prefix.len()..], offset + prefix.len());
        dqt.prefix_len = prefix_slots.len();
        dqt.after_states = after_states;
        self.issue(epoch, prefix_slots, cycle)
    }

    fn issue(&mut self, epoch: f64, prefix: Vec<TableSlot>, cycle: Vec<TableSlot>) -> TimeTable {
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
            prefix,
            cycle,
            jobs,
        };
        self.counters.tables += 1;
        self.dirty = false;
        self.issued = Some(table.clone());
        table
    }

    /// The Distributed Queue Tree, with `Layout::Dqt`.
    pub fn tree(&self) -> Option<&QueueTree> {
        self.dqt.as_ref().map(|d| &d.tree)
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

/// Places a job in the tree, on a partition of its size rounded up to a power of the tree's
/// width, and records it in the matrix on its own row: the partition's first columns.
fn place_in_tree(
    dqt: &mut DqtLayout,
    matrix: &mut GangMatrix,
    id: JobId,
    processors: u32,
) -> Result<(), MatrixError> {
    let width = dqt.tree.config().width;
    let mut partition = 1u32;
    while partition < processors {
        partition = partition.saturating_mul(width);
    }
    let node = dqt
        .tree
        .add(id, partition)
        .map_err(|_| MatrixError::TooLarge {
            job: id,
            processors,
            columns: dqt.tree.config().processors(),
        })?;
    let first = dqt.tree.node_first(node);
    let columns = (first..first + processors).collect();
    if let Err(e) = matrix.place_alone(id, columns) {
        dqt.tree.remove(id);
        return Err(e);
    }
    Ok(())
}
