//! The time table as it is distributed to node agents (seed 003): not "what runs now" but the
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

    /// Whether the table switches processes at all (two or more distinct slots).
    pub fn switches(&self) -> bool {
        let slots: Vec<&TableSlot> = self.prefix.iter().chain(&self.cycle).collect();
        slots.windows(2).any(|w| w[0].running != w[1].running)
    }
}
