//! The time table (Ousterhout matrix): rows are time slots, columns are processors. A job
//! occupies p columns of one row for its whole life, so its processes always run on the same
//! processors and all of them run in the same slots. At most `max_rows` rows exist (the
//! multiprogramming level). Slots go round robin over the rows; a row with no runnable job is
//! skipped, and processors a slot's row leaves idle are lent to jobs of other rows whose own
//! columns are all idle in that row (alternative scheduling).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// A job's identifier (unique per server).
pub type JobId = u64;

/// A job's global state (the gang thesis, chapter 6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum JobState {
    /// Some process can make progress.
    Runnable,
    /// Every process is blocked waiting for input or I/O: it gives its slot away until the
    /// input arrives.
    Idle,
    /// Every process waits to receive with nothing in flight (deadlock), since `since`.
    Stopped { since: f64 },
}

impl JobState {
    pub fn is_runnable(self) -> bool {
        self == JobState::Runnable
    }
}

/// Where a job sits in the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Placement {
    pub row: usize,
    /// Its processors, ascending.
    pub columns: Vec<u32>,
    pub state: JobState,
}

/// What runs during one slot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Slot {
    /// The row whose slot it is.
    pub row: usize,
    /// Jobs that run, with their columns: the row's runnable jobs first, then jobs lent idle
    /// columns, by row after this one.
    pub running: Vec<JobId>,
    /// Columns left idle.
    pub idle_columns: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MatrixError {
    #[error("job {0} is already in the table")]
    Duplicate(JobId),
    #[error("job {job} needs {processors} processors; the table has {columns}")]
    TooLarge {
        job: JobId,
        processors: u32,
        columns: u32,
    },
    #[error("job {job} needs at least one processor")]
    NoProcessors { job: JobId },
}

/// The time table.
#[derive(Debug, Clone)]
pub struct GangMatrix {
    columns: u32,
    max_rows: usize,
    /// `rows[r][c]`: the job on column c in row r.
    rows: Vec<Vec<Option<JobId>>>,
    jobs: BTreeMap<JobId, Placement>,
    /// The row of the current slot (`None` before the first slot).
    current: Option<usize>,
}

impl GangMatrix {
    /// A table of `columns` processors and at most `max_rows` rows (both at least 1).
    pub fn new(columns: u32, max_rows: usize) -> GangMatrix {
        GangMatrix {
            columns: columns.max(1),
            max_rows: max_rows.max(1),
            rows: Vec::new(),
            jobs: BTreeMap::new(),
            current: None,
        }
    }

    pub fn columns(&self) -> u32 {
        self.columns
    }

    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// Rows in use.
    pub fn rows(&self) -> usize {
        self.rows.len()
    }

    pub fn placement(&self, job: JobId) -> Option<&Placement> {
        self.jobs.get(&job)
    }

    pub fn jobs(&self) -> impl Iterator<Item = (JobId, &Placement)> {
        self.jobs.iter().map(|(&id, p)| (id, p))
    }

    /// The table as text, one line per row, `.` for an idle column.
    pub fn layout(&self) -> Vec<String> {
        self.rows
            .iter()
            .map(|row| {
                row.iter()
                    .map(|cell| cell.map_or(".".to_string(), |j| j.to_string()))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    }

    fn free_columns(&self, row: usize) -> Vec<u32> {
        self.rows[row]
            .iter()
            .enumerate()
            .filter(|(_, cell)| cell.is_none())
            .map(|(c, _)| c as u32)
            .collect()
    }

    /// Where a job of `processors` would go: the first row with that many free columns
    /// (its lowest free columns), or a new row if the multiprogramming level allows.
    pub fn fit(&self, processors: u32) -> Option<(usize, Vec<u32>)> {
        if processors == 0 || processors > self.columns {
            return None;
        }
        for row in 0..self.rows.len() {
            let free = self.free_columns(row);
            if free.len() >= processors as usize {
                return Some((row, free[..processors as usize].to_vec()));
            }
        }
        (self.rows.len() < self.max_rows).then(|| (self.rows.len(), (0..processors).collect()))
    }

    /// Whether a job of `processors` fits now.
    pub fn fits(&self, processors: u32) -> bool {
        self.fit(processors).is_some()
    }

    /// Whether any column of any row (existing or allowed) is free.
    pub fn has_room(&self) -> bool {
        self.rows.len() < self.max_rows || self.rows.iter().any(|r| r.iter().any(Option::is_none))
    }

    /// Places a job; `Ok(None)` if it does not fit now.
    pub fn place(
        &mut self,
        job: JobId,
        processors: u32,
    ) -> Result<Option<&Placement>, MatrixError> {
        if self.jobs.contains_key(&job) {
            return Err(MatrixError::Duplicate(job));
        }
        if processors == 0 {
            return Err(MatrixError::NoProcessors { job });
        }
        if processors > self.columns {
            return Err(MatrixError::TooLarge {
                job,
                processors,
                columns: self.columns,
            });
        }
        let Some((row, columns)) = self.fit(processors) else {
            return Ok(None);
        };
        if row == self.rows.len() {
            self.rows.push(vec![None; self.columns as usize]);
        }
        for &c in &columns {
            self.rows[row][c as usize] = Some(job);
        }
        self.jobs.insert(
            job,
            Placement {
                row,
                columns,
                state: JobState::Runnable,
            },
        );
        Ok(self.jobs.get(&job))
    }

    /// Places a job on given columns of a row of its own (the DQT layout, whose slots do not
    /// come from rows), whatever the multiprogramming level.
    pub fn place_alone(&mut self, job: JobId, columns: Vec<u32>) -> Result<(), MatrixError> {
        if self.jobs.contains_key(&job) {
            return Err(MatrixError::Duplicate(job));
        }
        if columns.is_empty() {
            return Err(MatrixError::NoProcessors { job });
        }
        if let Some(&bad) = columns.iter().find(|&&c| c >= self.columns) {
            return Err(MatrixError::TooLarge {
                job,
                processors: bad + 1,
                columns: self.columns,
            });
        }
        let mut row = vec![None; self.columns as usize];
        for &c in &columns {
            row[c as usize] = Some(job);
        }
        self.rows.push(row);
        self.jobs.insert(
            job,
            Placement {
                row: self.rows.len() - 1,
                columns,
                state: JobState::Runnable,
            },
        );
        Ok(())
    }

    /// Takes a job out (it ended or was killed). Rows left empty are removed; the rows after
    /// them move up, and so do their jobs.
    pub fn remove(&mut self, job: JobId) -> Option<Placement> {
        let placement = self.jobs.remove(&job)?;
        for &c in &placement.columns {
            self.rows[placement.row][c as usize] = None;
        }
        if self.rows[placement.row].iter().all(Option::is_none) {
            let row = placement.row;
            self.rows.remove(row);
            for p in self.jobs.values_mut() {
                if p.row > row {
                    p.row -= 1;
                }
            }
            self.current = match self.current {
                Some(c) if c > row => Some(c - 1),
                Some(c) if c == row => c.checked_sub(1).or(self.rows.len().checked_sub(1)),
                other => other,
            };
        }
        Some(placement)
    }

    /// Sets a job's global state; `false` if the job is not in the table.
    pub fn set_state(&mut self, job: JobId, state: JobState) -> bool {
        match self.jobs.get_mut(&job) {
            Some(p) => {
                p.state = state;
                true
            }
            None => false,
        }
    }

    fn runnable_in(&self, row: usize) -> impl Iterator<Item = JobId> + '_ {
        let mut seen = BTreeSet::new();
        self.rows[row].iter().filter_map(move |cell| {
            let job = (*cell)?;
            (seen.insert(job) && self.jobs.get(&job).is_some_and(|p| p.state.is_runnable()))
                .then_some(job)
        })
    }

    /// What runs in `row`'s slot: its runnable jobs, then (alternative scheduling) runnable
    /// jobs of the following rows, in order, whose columns are all idle so far.
    pub fn slot_for(&self, row: usize) -> Slot {
        let mut busy = vec![false; self.columns as usize];
        let mut running = Vec::new();
        for job in self.runnable_in(row) {
            for &c in &self.jobs[&job].columns {
                busy[c as usize] = true;
            }
            running.push(job);
        }
        let n = self.rows.len();
        for k in 1..n {
            let other = (row + k) % n;
            let candidates: Vec<JobId> = self.runnable_in(other).collect();
            for job in candidates {
                let columns = &self.jobs[&job].columns;
                if columns.iter().all(|&c| !busy[c as usize]) {
                    for &c in columns {
                        busy[c as usize] = true;
                    }
                    running.push(job);
                }
            }
        }
        Slot {
            row,
            running,
            idle_columns: busy
                .iter()
                .enumerate()
                .filter(|(_, b)| !**b)
                .map(|(c, _)| c as u32)
                .collect(),
        }
    }

    /// Moves to the next row, round robin, that has a runnable job, and returns its slot;
    /// `None` if no job in the table is runnable.
    pub fn advance(&mut self) -> Option<Slot> {
        let n = self.rows.len();
        if n == 0 {
            self.current = None;
            return None;
        }
        let start = self.current.map_or(0, |c| (c + 1) % n);
        for k in 0..n {
            let row = (start + k) % n;
            if self.runnable_in(row).next().is_some() {
                self.current = Some(row);
                return Some(self.slot_for(row));
            }
        }
        None
    }

    /// The row of the current slot.
    pub fn current_row(&self) -> Option<usize> {
        self.current
    }

    /// Sets the row of the current slot (the distributed table keeps it by time).
    pub fn set_current_row(&mut self, row: Option<usize>) {
        self.current = row.filter(|&r| r < self.rows.len());
    }

    /// Whether `row` has a runnable job of its own (a row without one gets no slot).
    pub fn has_runnable(&self, row: usize) -> bool {
        row < self.rows.len() && self.runnable_in(row).next().is_some()
    }
}
