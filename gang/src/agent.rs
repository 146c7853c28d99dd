//! The local scheduler of one node (the time-sync paper): it holds the last time table the server sent
//! and, at each boundary of its own (offset-corrected) clock, works out which of its processes
//! to stop and which to continue. Between tables it needs no message at all. Pure: the live
//! agent turns its answers into signals, tests drive it with numbers.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::matrix::JobId;
use crate::table::TimeTable;

/// An operating-system process id.
pub type ProcessId = u32;

/// What to do to this node's processes now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcessSwitch {
    /// The table and slot this follows.
    pub version: u64,
    pub slot: u64,
    /// Processes to stop first.
    pub stop: Vec<ProcessId>,
    /// Then processes to continue, with the job each now runs for (`None`: it left the table
    /// and is free again).
    pub resume: Vec<(ProcessId, Option<JobId>)>,
    /// Processes to pin to a column (processor) before anything else.
    pub pin: Vec<(ProcessId, u32)>,
}

impl ProcessSwitch {
    pub fn is_empty(&self) -> bool {
        self.stop.is_empty() && self.resume.is_empty() && self.pin.is_empty()
    }
}

/// What a node agent counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct AgentCounters {
    /// Tables received.
    pub table_messages: u64,
    /// Boundaries at which this node stopped or continued a process.
    pub switches: u64,
    pub stops: u64,
    pub resumes: u64,
}

/// One node's local scheduler.
#[derive(Debug, Clone)]
pub struct NodeAgent {
    columns: BTreeSet<u32>,
    table: Option<TimeTable>,
    /// Processes this agent has stopped and not yet continued.
    stopped: BTreeSet<ProcessId>,
    pinned: BTreeMap<ProcessId, u32>,
    counters: AgentCounters,
}

impl NodeAgent {
    /// An agent for the processors (columns) of its node.
    pub fn new(columns: impl IntoIterator<Item = u32>) -> NodeAgent {
        NodeAgent {
            columns: columns.into_iter().collect(),
            table: None,
            stopped: BTreeSet::new(),
            pinned: BTreeMap::new(),
            counters: AgentCounters::default(),
        }
    }

    pub fn columns(&self) -> &BTreeSet<u32> {
        &self.columns
    }

    pub fn table(&self) -> Option<&TimeTable> {
        self.table.as_ref()
    }

    pub fn counters(&self) -> AgentCounters {
        self.counters
    }

    pub fn stopped(&self) -> &BTreeSet<ProcessId> {
        &self.stopped
    }

    /// This node's processes in the table: (process, job, column).
    fn local_processes(&self) -> Vec<(ProcessId, JobId, u32)> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        table
            .jobs
            .iter()
            .flat_map(|(&job, j)| {
                j.columns
                    .iter()
                    .zip(&j.processes)
                    .filter(|(c, _)| self.columns.contains(c))
                    .map(move |(&c, &p)| (p, job, c))
            })
            .collect()
    }

    /// The job a process runs for in the current table.
    pub fn job_of(&self, process: ProcessId) -> Option<JobId> {
        self.local_processes()
            .into_iter()
            .find(|&(p, _, _)| p == process)
            .map(|(_, job, _)| job)
    }

    /// Takes a new table and says what to do at master time `now`.
    pub fn install(&mut self, table: TimeTable, now: f64) -> ProcessSwitch {
        self.counters.table_messages += 1;
        self.table = Some(table);
        let mut switch = self.decide(now);
        for (process, _, column) in self.local_processes() {
            if self.pinned.get(&process) != Some(&column) {
                self.pinned.insert(process, column);
                switch.pin.push((process, column));
            }
        }
        self.count(&switch);
        switch
    }

    /// At master time `now` (a boundary, or any time): what changes since the last answer.
    pub fn follow(&mut self, now: f64) -> Option<ProcessSwitch> {
        let switch = self.decide(now);
        self.count(&switch);
        (!switch.is_empty()).then_some(switch)
    }

    /// Master time of the next boundary at which something may change.
    pub fn next_change(&self, now: f64) -> Option<f64> {
        self.table.as_ref()?.next_change(now)
    }

    fn count(&mut self, switch: &ProcessSwitch) {
        if !switch.stop.is_empty() || !switch.resume.is_empty() {
            self.counters.switches += 1;
        }
        self.counters.stops += switch.stop.len() as u64;
        self.counters.resumes += switch.resume.len() as u64;
    }

    fn decide(&mut self, now: f64) -> ProcessSwitch {
        let (version, slot, running): (u64, u64, BTreeSet<JobId>) = match &self.table {
            Some(t) => {
                let slot = t.slot_number(now);
                (t.version, slot, t.running_at(now).iter().copied().collect())
            }
            None => (0, 0, BTreeSet::new()),
        };
        let local = self.local_processes();
        // A process held by several jobs of one table cannot happen; if it did, running wins.
        let mut hold = BTreeSet::new();
        let mut runs_for = BTreeMap::new();
        for &(process, job, _) in &local {
            if running.contains(&job) {
                runs_for.insert(process, job);
            } else {
                hold.insert(process);
            }
        }
        for process in runs_for.keys() {
            hold.remove(process);
        }
        let stop: Vec<ProcessId> = hold.difference(&self.stopped).copied().collect();
        let resume: Vec<(ProcessId, Option<JobId>)> = self
            .stopped
            .difference(&hold)
            .map(|p| (*p, runs_for.get(p).copied()))
            .collect();
        self.stopped = hold;
        ProcessSwitch {
            version,
            slot,
            stop,
            resume,
            pin: Vec::new(),
        }
    }
}
