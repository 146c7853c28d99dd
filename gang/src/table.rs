//! The time table as it is distributed to node agents (the time-sync paper): not "what runs now" but the
//! whole cycle of slots from an epoch on the master's clock, so an agent can follow it by its
//! own clock through any number of switches. A new table is issued only when the matrix
//! changes (a job arrives, leaves or changes global state), never at a switch.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::matrix::JobId;

/// A job as the agents see it: its columns and, once the server has started them, the
/// process on each column (rank order: process `i` runs on `columns[i]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableJob {
    pub columns: Vec<u32>,
    pub processes: Vec<u32>,
}

/// One slot of the cycle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TableSlot {
    /// The matrix row whose slot this is.
    pub row: usize,
    /// Jobs that run in it (the row's own and those lent idle columns).
    pub running: Vec<JobId>,
}

/// The cycle of slots that repeats from `epoch` until the next table replaces it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimeTable {
    /// Increases with every table the server issues.
    pub version: u64,
    /// Master-clock time (seconds) at which slot 0 of the cycle begins.
    pub epoch: f64,
    /// Slot length in seconds.
    pub quantum: f64,
    /// Slots run once from the epoch before the cycle starts repeating (the DQT layout's
    /// way from where its front stands to its repeating pattern); empty for the matrix.
    #[serde(default)]
    pub prefix: Vec<TableSlot>,
    /// Slots in round-robin order; empty when nothing is runnable.
    pub cycle: Vec<TableSlot>,
    /// Every job in the matrix, runnable or not.
    pub jobs: BTreeMap<JobId, TableJob>,
}

impl TimeTable {
    /// An empty table (nothing runs).
    pub fn empty(version: u64, epoch: f64, quantum: f64) -> TimeTable {
        TimeTable {
            version,
            epoch,
            quantum,
            prefix: Vec::new(),
            cycle: Vec::new(),
            jobs: BTreeMap::new(),
        }
    }

    /// The number of the slot in progress at master time `t`, counting from the epoch (slot
    /// 0 also covers times before the epoch, which a late-corrected clock may see).
    pub fn slot_number(&self, t: f64) -> u64 {
        if self.quantum <= 0.0 || t <= self.epoch {
            return 0;
        }
        ((t - self.epoch) / self.quantum).floor() as u64
    }

    /// Master time at which slot `number` begins.
    pub fn slot_start(&self, number: u64) -> f64 {
        self.epoch + number as f64 * self.quantum
    }

    /// The slot of the prefix or the cycle that slot `number` is.
    pub fn slot(&self, number: u64) -> Option<&TableSlot> {
        let before = self.prefix.len() as u64;
        if number < before {
            return self.prefix.get(number as usize);
        }
        let len = self.cycle.len() as u64;
        (len > 0).then(|| &self.cycle[((number - before) % len) as usize])
    }

    /// Slots to look ahead from any slot to have seen every slot still to come.
    pub fn horizon(&self) -> u64 {
        (self.prefix.len() + self.cycle.len()) as u64
    }

    /// Jobs that run at master time `t`.
    pub fn running_at(&self, t: f64) -> &[JobId] {
        self.slot(self.slot_number(t))
            .map_or(&[][..], |s| s.running.as_slice())
    }

    /// Master time of the first slot boundary after `t` at which what runs changes; `None`
    /// when the cycle never changes (at most one distinct slot).
    pub fn next_change(&self, t: f64) -> Option<f64> {
        let len = self.horizon();
        if len < 2 {
            return None;
        }
        let now = self.slot_number(t);
        let current = self.slot(now)?;
        (1..len).find_map(|k| {
            let next = self.slot(now + k)?;
            (next.running != current.running).then(|| self.slot_start(now + k))
        })
    }

    /// Seconds of master time in `[from, to)` during which `job` runs by this table: a job
    /// in the table stands stopped outside its slots, so this is the part of a call's time
    /// that it computed, whatever it waited for besides.
    pub fn running_seconds(&self, job: JobId, from: f64, to: f64) -> f64 {
        if to.partial_cmp(&from) != Some(std::cmp::Ordering::Greater) || self.quantum <= 0.0 {
            return 0.0;
        }
        let runs = |n: u64| self.slot(n).is_some_and(|s| s.running.contains(&job));
        let (first, last) = (self.slot_number(from), self.slot_number(to));
        if first == last {
            return if runs(first) { to - from } else { 0.0 };
        }
        let head = if runs(first) {
            self.slot_start(first + 1) - from
        } else {
            0.0
        };
        let tail = if runs(last) {
            to - self.slot_start(last)
        } else {
            0.0
        };
        let middle = self.running_slots(job, first + 1, last) as f64 * self.quantum;
        head + middle + tail
    }

    /// How many of slots `from..to` (by number) run `job`, without walking every repeat of
    /// the cycle.
    fn running_slots(&self, job: JobId, from: u64, to: u64) -> u64 {
        let runs = |n: u64| self.slot(n).is_some_and(|s| s.running.contains(&job));
        let before = (self.prefix.len() as u64).clamp(from, to.max(from));
        let mut count = (from..before).filter(|&n| runs(n)).count() as u64;
        let len = self.cycle.len() as u64;
        if len == 0 || before >= to {
            return count;
        }
        let total = to - before;
        let per_cycle = self
            .cycle
            .iter()
            .filter(|s| s.running.contains(&job))
            .count() as u64;
        count += (total / len) * per_cycle;
        let rest = before + (total / len) * len;
        count += (rest..to).filter(|&n| runs(n)).count() as u64;
        count
    }

    /// Whether the table switches processes at all (two or more distinct slots).
    pub fn switches(&self) -> bool {
        let slots: Vec<&TableSlot> = self.prefix.iter().chain(&self.cycle).collect();
        slots.windows(2).any(|w| w[0].running != w[1].running)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(row: usize, running: &[JobId]) -> TableSlot {
        TableSlot {
            row,
            running: running.to_vec(),
        }
    }

    /// Slots of 0.1 s from epoch 10: job 1 and job 2 take turns, after a prefix in which
    /// job 2 runs twice.
    fn two_rows() -> TimeTable {
        TimeTable {
            prefix: vec![slot(1, &[2]), slot(1, &[2])],
            cycle: vec![slot(0, &[1]), slot(1, &[2])],
            ..TimeTable::empty(1, 10.0, 0.1)
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn a_job_runs_only_in_its_slots() {
        let table = two_rows();
        // Within one slot: all of it or nothing.
        assert!(close(table.running_seconds(2, 10.01, 10.05), 0.04));
        assert_eq!(table.running_seconds(1, 10.01, 10.05), 0.0);
        // The prefix (10.0-10.2) is job 2's; then job 1 runs 10.2-10.3, 10.4-10.5, ...
        assert!(close(table.running_seconds(1, 10.0, 10.45), 0.15));
        assert!(close(table.running_seconds(2, 10.0, 10.45), 0.3));
        // Both together cover the whole interval, from inside a slot to inside another.
        let (from, to) = (10.05, 13.37);
        let sum = table.running_seconds(1, from, to) + table.running_seconds(2, from, to);
        assert!(close(sum, to - from));
        // A job that is not in the table never ran; an empty or reversed interval is nothing.
        assert_eq!(table.running_seconds(3, 10.0, 20.0), 0.0);
        assert_eq!(table.running_seconds(1, 12.0, 12.0), 0.0);
        assert_eq!(table.running_seconds(1, 12.0, 11.0), 0.0);
        assert_eq!(table.running_seconds(1, f64::NAN, 11.0), 0.0);
    }

    #[test]
    fn long_intervals_count_whole_cycles_as_walking_them_would() {
        let table = two_rows();
        let walked = |job: JobId, from: f64, to: f64| {
            let steps = ((to - from) / 0.001).round() as u64;
            (0..steps)
                .filter(|k| {
                    table
                        .running_at(from + (*k as f64 + 0.5) * 0.001)
                        .contains(&job)
                })
                .count() as f64
                * 0.001
        };
        for (from, to) in [(9.5, 10.7), (10.13, 17.91), (10.2, 30.0)] {
            for job in [1, 2] {
                let counted = table.running_seconds(job, from, to);
                assert!(
                    (counted - walked(job, from, to)).abs() < 0.002,
                    "job {job} in [{from}, {to}): {counted}"
                );
            }
        }
        // Before the epoch counts as slot 0, which here is job 2's.
        assert!(close(table.running_seconds(2, 9.5, 10.0), 0.5));
    }

    #[test]
    fn a_table_with_nothing_runnable_runs_nobody() {
        let table = TimeTable::empty(3, 0.0, 0.1);
        assert_eq!(table.running_seconds(1, 0.0, 5.0), 0.0);
    }
}
