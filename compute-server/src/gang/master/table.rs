//! The host's time table: the master's state, the tables it issues as jobs come and go,
//! the agents' view of each, when that view is sent, and how long each job has run by them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ninf_gang::{GangScheduler, JobId, MatrixError, TimeTable};
use ninf_proto::v1;
use tokio::sync::watch;

use super::links::{MasterClock, OsSignals, Signals};
use super::records::Inner;
use crate::config::GangSettings;
use crate::gang::clock::MachineClock;
use crate::gang::wire::table_to_proto;

/// Why a job could not be run.
#[derive(Debug, thiserror::Error)]
pub enum GangError {
    #[error(transparent)]
    Table(#[from] MatrixError),
    #[error("the server is shutting down")]
    Closed,
}

/// The gang scheduler of one server with its node agents, by clock `C`.
pub struct GangMaster<C: MasterClock = MachineClock> {
    pub settings: GangSettings,
    pub processors: u32,
    pub(super) clock: C,
    pub(super) signals: Box<dyn Signals>,
    pub(super) inner: Mutex<Inner<C>>,
    /// The last table sent to the agents.
    pub(super) tables: watch::Sender<Arc<v1::TimeTableMessage>>,
    /// The last table issued.
    pub(super) current: watch::Sender<Arc<TimeTable>>,
    /// The last table issued as the agents need it: only jobs whose input was sent (the
    /// others cannot run anyway), with their processes.
    pub(super) agents_view: watch::Sender<Arc<TimeTable>>,
}

impl GangMaster {
    /// A live server's master: the machine's clock, signals by `kill(2)`. Its tables reach
    /// the agents once [`spawn_table_sender`] runs.
    pub fn new(settings: GangSettings, processors: u32) -> Arc<GangMaster> {
        GangMaster::with_parts(settings, processors, MachineClock, Box::new(OsSignals))
    }
}

impl<C: MasterClock> GangMaster<C> {
    /// A master by `clock`, signalling its processes through `signals`.
    pub fn with_parts(
        settings: GangSettings,
        processors: u32,
        clock: C,
        signals: Box<dyn Signals>,
    ) -> Arc<GangMaster<C>> {
        let processors = processors.max(1);
        let config = settings.core(processors);
        let mut scheduler = GangScheduler::new(config, clock.clone());
        let first = scheduler.table();
        let (tables, _) = watch::channel(Arc::new(table_to_proto(&first)));
        let (agents_view, _) = watch::channel(Arc::new(first.clone()));
        let (current, _) = watch::channel(Arc::new(first));
        let now = clock.now();
        Arc::new(GangMaster {
            settings,
            processors,
            signals,
            inner: Mutex::new(Inner::new(scheduler, now)),
            clock,
            tables,
            current,
            agents_view,
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Inner<C>> {
        // The state stays consistent across every early return, so a panic elsewhere while
        // holding the lock leaves nothing half-done worth refusing service for.
        ninf_proto::sync::lock(&self.inner)
    }

    /// Kills a job (see `Inner::kill_job`) and the processes this server started for it.
    pub(super) fn kill(&self, inner: &mut Inner<C>, id: JobId, reason: String) {
        for pid in inner.kill_job(id, reason) {
            self.signals.signal(pid, libc::SIGKILL);
        }
    }

    /// Issues the current table, and the agents' view of it (see [`send_tables`] for when
    /// they get it).
    pub(super) fn issue(&self, inner: &mut Inner<C>) {
        let now = self.clock.now();
        let replaced = self.current.borrow().clone();
        // Only jobs in the replaced table can have run under it, not those still queued.
        for id in replaced.jobs.keys() {
            let ran = replaced.running_seconds(*id, inner.issued_at, now);
            if let Some(job) = inner.jobs.get_mut(id) {
                job.ran_seconds += ran;
            }
        }
        inner.issued_at = now;
        let mut table = inner.scheduler.table();
        for (id, job) in table.jobs.iter_mut() {
            if let Some(record) = inner.jobs.get(id) {
                job.processes = record.processes.clone();
            }
        }
        let started = |id: &JobId| inner.jobs.get(id).is_some_and(|j| j.started());
        let mut view = table.clone();
        view.jobs.retain(|id, _| started(id));
        for slot in view.prefix.iter_mut().chain(view.cycle.iter_mut()) {
            slot.running.retain(started);
        }
        self.agents_view.send_replace(Arc::new(view));
        self.current.send_replace(Arc::new(table));
    }

    /// Waits until a slot in which `id` runs is in progress (or the job left the table).
    pub(super) async fn wait_for_slot(&self, id: JobId) {
        let mut current = self.current.subscribe();
        loop {
            let table = current.borrow_and_update().clone();
            if !table.jobs.contains_key(&id) {
                return;
            }
            let now = self.clock.now();
            if table.running_at(now).contains(&id) {
                return;
            }
            match next_slot_of(&table, id, now) {
                Some(start) => {
                    let wait = Duration::from_secs_f64((start - now).clamp(0.0, 3600.0));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        changed = current.changed() => if changed.is_err() { return },
                    }
                }
                // Not runnable now: wait for a table in which it is.
                None => {
                    if current.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Seconds job `id` has run so far: the slots of each table issued while it was in the
    /// matrix that ran it. A call's compute time less this is the time its job stood
    /// stopped (waiting for its first slot, or while other jobs' slots ran).
    pub fn running_seconds(&self, id: JobId) -> f64 {
        let inner = self.lock();
        let Some(job) = inner.jobs.get(&id) else {
            return 0.0;
        };
        let current = self.current.borrow().clone();
        job.ran_seconds + current.running_seconds(id, inner.issued_at, self.clock.now())
    }

    /// The latest table, for an agent's stream.
    pub fn tables(&self) -> watch::Receiver<Arc<v1::TimeTableMessage>> {
        self.tables.subscribe()
    }
}

/// When the next slot of `table` that runs `id` starts, within one round of the table.
fn next_slot_of(table: &TimeTable, id: JobId, now: f64) -> Option<f64> {
    let number = table.slot_number(now);
    (1..=table.horizon())
        .find(|k| {
            table
                .slot(number + k)
                .is_some_and(|s| s.running.contains(&id))
        })
        .map(|k| table.slot_start(number + k))
}

/// The processes agents following `table` hold stopped at time `t`.
fn held(table: &TimeTable, t: f64) -> BTreeSet<u32> {
    let running = table.running_at(t);
    table
        .jobs
        .iter()
        .filter(|(id, _)| !running.contains(id))
        .flat_map(|(_, job)| job.processes.iter().copied())
        .collect()
}

/// When the agents must have `view` if they follow `sent` now: at once if it changes what
/// they hold now, shortly before the next boundary either table has if it changes only
/// later slots, never if it is the table they have.
fn send_deadline(view: &TimeTable, sent: &TimeTable, now: f64) -> Option<f64> {
    let margin = (view.quantum / 4.0).clamp(0.001, 0.005);
    if view.version == sent.version {
        None
    } else if held(view, now) != held(sent, now) {
        Some(now)
    } else {
        match (view.next_change(now), sent.next_change(now)) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(f64::INFINITY).min(b.unwrap_or(f64::INFINITY)) - margin),
        }
    }
}

/// Sends the master's tables to its agents for as long as it lives (see [`send_tables`]).
pub fn spawn_table_sender<C: MasterClock>(
    master: &Arc<GangMaster<C>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(send_tables(Arc::downgrade(master)))
}

/// Sends the agents' view of the table when they need it, and only then. A table that
/// changes what they hold now goes at once. One that only changes later slots goes shortly
/// before the next boundary, unless a newer one has replaced it by then: jobs that come and go
/// within a slot (most calls) never cost a message. Tables that never hold anything the old
/// one did not are not sent at all.
async fn send_tables<C: MasterClock>(master: std::sync::Weak<GangMaster<C>>) {
    let (mut views, mut sent) = match master.upgrade() {
        Some(m) => (m.agents_view.subscribe(), m.agents_view.borrow().clone()),
        None => return,
    };
    loop {
        let view = views.borrow_and_update().clone();
        let Some(m) = master.upgrade() else { return };
        let now = m.clock.now();
        drop(m);
        let send = match send_deadline(&view, &sent, now) {
            None => false,
            Some(at) if at <= now => true,
            Some(at) => {
                let wait = Duration::from_secs_f64((at - now).min(3600.0));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => true,
                    changed = views.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            }
        };
        if send {
            let Some(m) = master.upgrade() else { return };
            let latest = m.agents_view.borrow().clone();
            m.tables.send_replace(Arc::new(table_to_proto(&latest)));
            sent = latest;
            continue;
        }
        if views.changed().await.is_err() {
            return;
        }
    }
}
