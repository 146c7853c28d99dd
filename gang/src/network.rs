//! The network of a gang-scheduled machine whose jobs span nodes (the gang thesis): **network
//! preemption**, so that a job's messages are handed to its ranks only inside its own slots,
//! and the **global state** of a job whose ranks sit on several nodes, so that a deadlock is
//! still seen when no single broker sees every send and receive.
//!
//! SCore-D drains the network at every switch and re-injects the outgoing job's messages when
//! it runs again. Here each node's broker passes every message that arrives for its ranks
//! through a [`NetworkGate`]: a message for a job that does not run now (by the node's own,
//! offset-corrected clock and the last table it has) is held, in arrival order, and released
//! at the job's next slot. Because a job's messages are held and released as one queue, no
//! message between a pair of ranks overtakes another. Pure: the caller says what time it is.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use crate::matrix::JobId;
use crate::table::TimeTable;

/// A message between two ranks of a job, as it crosses the network.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope<T> {
    pub job: JobId,
    pub from: u32,
    pub to: u32,
    /// Its size, for the ledger.
    pub bytes: usize,
    pub payload: T,
}

/// Whether a message of `job` may reach its rank at master time `t`. A job the node's table
/// does not know yet was started by the server in the slot in progress (the table that names
/// it is on its way), so it passes; so does everything before the first table.
pub fn job_runs_at(table: Option<&TimeTable>, job: JobId, t: f64) -> bool {
    match table {
        None => true,
        Some(table) if !table.jobs.contains_key(&job) => true,
        Some(table) => table.running_at(t).contains(&job),
    }
}

/// What one node delivered, and when: the measure of network preemption.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeliveryLedger {
    pub messages: u64,
    pub bytes: u64,
    /// Messages (and their bytes) handed to a job's rank while the node's table said another
    /// slot was in progress. Zero with preemption; what preemption prevents without it.
    pub messages_outside_slot: u64,
    pub bytes_outside_slot: u64,
    /// Messages that had to wait for their job's slot.
    pub messages_held: u64,
    /// The most messages held at once.
    pub most_held: u64,
    /// Bytes delivered per slot number (of the table in force) and job, for per-slot tallies.
    pub per_slot: BTreeMap<(u64, JobId), u64>,
}

/// Slots kept in [`DeliveryLedger::per_slot`]; older ones are dropped first.
const LEDGER_SLOTS: usize = 4096;

impl DeliveryLedger {
    fn record(&mut self, table: Option<&TimeTable>, t: f64, job: JobId, bytes: usize) {
        self.messages += 1;
        self.bytes += bytes as u64;
        if !job_runs_at(table, job, t) {
            self.messages_outside_slot += 1;
            self.bytes_outside_slot += bytes as u64;
        }
        let slot = table.map_or(0, |table| table.slot_number(t));
        *self.per_slot.entry((slot, job)).or_default() += bytes as u64;
        if self.per_slot.len() > LEDGER_SLOTS {
            self.per_slot.pop_first();
        }
    }
}

/// One node's gate between the network and its ranks.
#[derive(Debug)]
pub struct NetworkGate<T> {
    preempt: bool,
    held: BTreeMap<JobId, VecDeque<Envelope<T>>>,
    held_count: usize,
    ledger: DeliveryLedger,
}

impl<T> NetworkGate<T> {
    /// A gate that holds messages outside their job's slots (`preempt`), or passes everything
    /// at once and only counts (the comparison without network preemption).
    pub fn new(preempt: bool) -> NetworkGate<T> {
        NetworkGate {
            preempt,
            held: BTreeMap::new(),
            held_count: 0,
            ledger: DeliveryLedger::default(),
        }
    }

    pub fn preempts(&self) -> bool {
        self.preempt
    }

    /// A message arrives at master time `t`: it is returned if it may be delivered now, and
    /// held otherwise (also when earlier messages of its job are still held, to keep order).
    pub fn arrive(
        &mut self,
        table: Option<&TimeTable>,
        t: f64,
        envelope: Envelope<T>,
    ) -> Option<Envelope<T>> {
        let open = !self.preempt || job_runs_at(table, envelope.job, t);
        if open && !self.held.contains_key(&envelope.job) {
            self.ledger.record(table, t, envelope.job, envelope.bytes);
            return Some(envelope);
        }
        self.ledger.messages_held += 1;
        self.held_count += 1;
        self.ledger.most_held = self.ledger.most_held.max(self.held_count as u64);
        self.held
            .entry(envelope.job)
            .or_default()
            .push_back(envelope);
        None
    }

    /// The held messages that may be delivered at master time `t`, each job's in arrival order.
    pub fn release(&mut self, table: Option<&TimeTable>, t: f64) -> Vec<Envelope<T>> {
        let open: Vec<JobId> = self
            .held
            .keys()
            .copied()
            .filter(|&job| job_runs_at(table, job, t))
            .collect();
        let mut released = Vec::new();
        for job in open {
            if let Some(queue) = self.held.remove(&job) {
                self.held_count -= queue.len();
                for envelope in queue {
                    self.ledger.record(table, t, envelope.job, envelope.bytes);
                    released.push(envelope);
                }
            }
        }
        released
    }

    /// Master time at which a held message may next be delivered: the next boundary at which
    /// what runs changes. `None` when nothing is held or the table never switches.
    pub fn next_release(&self, table: Option<&TimeTable>, t: f64) -> Option<f64> {
        if self.held.is_empty() {
            return None;
        }
        table?.next_change(t)
    }

    /// Drops the held messages of jobs that left `table` (their calls ended); returns how many.
    pub fn forget_ended(&mut self, table: &TimeTable) -> usize {
        let ended: Vec<JobId> = self
            .held
            .keys()
            .copied()
            .filter(|job| !table.jobs.contains_key(job))
            .collect();
        let mut dropped = 0;
        for job in ended {
            if let Some(queue) = self.held.remove(&job) {
                dropped += queue.len();
            }
        }
        self.held_count -= dropped;
        dropped
    }

    /// Drops the held messages of `job` (it ended); returns how many.
    pub fn forget(&mut self, job: JobId) -> usize {
        let dropped = self.held.remove(&job).map_or(0, |queue| queue.len());
        self.held_count -= dropped;
        dropped
    }

    /// Messages held now.
    pub fn held(&self) -> usize {
        self.held_count
    }

    pub fn ledger(&self) -> &DeliveryLedger {
        &self.ledger
    }
}

/// What one node knows of a job's ranks that live on it: which wait for whom, and how many
/// messages each pair of ranks has sent and had delivered.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RankTraffic {
    /// Local ranks blocked in a receive, and the rank each waits for.
    pub waiting: BTreeMap<u32, u32>,
    /// Messages sent by local ranks, by (from, to).
    pub sent: BTreeMap<(u32, u32), u64>,
    /// Messages handed to local ranks' receives, by (from, to).
    pub consumed: BTreeMap<(u32, u32), u64>,
}

impl RankTraffic {
    pub fn count_sent(&mut self, from: u32, to: u32) {
        *self.sent.entry((from, to)).or_default() += 1;
    }

    pub fn count_consumed(&mut self, from: u32, to: u32) {
        *self.consumed.entry((from, to)).or_default() += 1;
    }
}

/// Whether a job of `size` ranks is deadlocked, from every node's view of it and the ranks
/// whose calls returned: every rank still running waits to receive, and every message it waits
/// for was already consumed, so none is in flight or held anywhere. Views taken at different
/// moments can only make a job look busier (a message counted sent and not yet consumed), so
/// a verdict of deadlock needs the counts to agree; the caller confirms it over two reports,
/// as a deadlock is stable and anything else changes the counts.
pub fn globally_deadlocked<'a>(
    size: u32,
    done: &BTreeSet<u32>,
    views: impl IntoIterator<Item = &'a RankTraffic>,
) -> bool {
    let mut waiting = BTreeMap::new();
    let mut sent: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let mut consumed: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for view in views {
        waiting.extend(view.waiting.iter().map(|(&r, &f)| (r, f)));
        for (&pair, &n) in &view.sent {
            *sent.entry(pair).or_default() += n;
        }
        for (&pair, &n) in &view.consumed {
            *consumed.entry(pair).or_default() += n;
        }
    }
    let live: Vec<u32> = (0..size).filter(|r| !done.contains(r)).collect();
    if live.is_empty()
        || consumed
            .iter()
            .any(|(p, &n)| sent.get(p).copied() < Some(n))
    {
        return false;
    }
    live.iter().all(|rank| {
        waiting.get(rank).is_some_and(|&from| {
            sent.get(&(from, *rank)).copied().unwrap_or(0)
                == consumed.get(&(from, *rank)).copied().unwrap_or(0)
        })
    })
}

/// What the server concludes from a new view of a spread job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Unchanged,
    /// Every rank still running waits with nothing in flight, seen twice with nothing new.
    Deadlocked,
    /// A job taken for deadlocked moved again.
    Revived,
}

/// The server's record of one job whose ranks talk through node brokers: the latest view from
/// each node and the ranks whose calls returned. A deadlock is declared only when a look with
/// no news in between finds the same deadlocked state twice, since views from different nodes
/// are taken at different moments.
#[derive(Debug, Clone)]
pub struct SpreadJob {
    size: u32,
    views: BTreeMap<String, RankTraffic>,
    done: BTreeSet<u32>,
    suspected: bool,
    deadlocked: bool,
}

impl SpreadJob {
    pub fn new(size: u32) -> SpreadJob {
        SpreadJob {
            size,
            views: BTreeMap::new(),
            done: BTreeSet::new(),
            suspected: false,
            deadlocked: false,
        }
    }

    /// A node's newer view of the job.
    pub fn update(&mut self, node: &str, view: RankTraffic) -> Verdict {
        if self.views.get(node) == Some(&view) {
            return Verdict::Unchanged;
        }
        self.views.insert(node.to_string(), view);
        self.evaluate()
    }

    /// A rank's call returned.
    pub fn rank_done(&mut self, rank: u32) -> Verdict {
        if !self.done.insert(rank) {
            return Verdict::Unchanged;
        }
        self.evaluate()
    }

    /// A later look, with no news since the last: a suspicion that still holds is a deadlock.
    pub fn confirm(&mut self) -> Verdict {
        if self.suspected && !self.deadlocked {
            self.deadlocked = true;
            return Verdict::Deadlocked;
        }
        Verdict::Unchanged
    }

    pub fn deadlocked(&self) -> bool {
        self.deadlocked
    }

    /// News arrived: any suspicion starts over from it.
    fn evaluate(&mut self) -> Verdict {
        let now = globally_deadlocked(self.size, &self.done, self.views.values());
        self.suspected = now;
        if !now && self.deadlocked {
            self.deadlocked = false;
            return Verdict::Revived;
        }
        Verdict::Unchanged
    }
}
