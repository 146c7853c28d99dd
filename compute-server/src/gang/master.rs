//! The server's side of gang scheduling: every call becomes a job that waits in the gang
//! core's admission queue, takes its place in the time table, and leaves it when the call
//! ends. Each change issues a new table to the node agents (only then: switches need no
//! message). The master also gathers the agents' reports (applied tables, switch skew,
//! clock checks) and kills jobs that stayed deadlocked past their grace.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ninf_gang::network::{RankTraffic, SpreadJob, Verdict};
use ninf_gang::{Clock, GangScheduler, JobId, JobState, MatrixError, TimeTable};
use ninf_proto::v1;
use tokio::sync::{mpsc, oneshot, watch};

use super::clock::MachineClock;
use super::wire::table_to_proto;
use crate::config::GangSettings;

/// Why a job could not be run.
#[derive(Debug, thiserror::Error)]
pub enum GangError {
    #[error(transparent)]
    Table(#[from] MatrixError),
    #[error("the server is shutting down")]
    Closed,
}

/// A call's job, from admission to its end; dropping it takes the job out of the table (or
/// the queue) and lets the next ones in.
pub struct JobTicket {
    master: Arc<GangMaster>,
    pub id: JobId,
}

impl JobTicket {
    /// Tells the agents which processes run the job (rank order) and whether it can run now
    /// or still waits for its input. A runnable job then waits for its first slot: its
    /// processes have no input yet, so withholding the input until the slot keeps them from
    /// running outside it without any signal; from then on the agents stop and continue them.
    pub async fn attach(&self, processes: Vec<u32>, runnable: bool) {
        // The next call of a batch on the process the last one used: the agents already
        // hold it under this job. A new table here would wake every job waiting for its
        // slot, twice per tiny call.
        if runnable && self.master.runs_on(self.id, &processes) {
            return;
        }
        self.master.attach(self.id, processes, runnable);
        if runnable {
            self.wait_for_slot().await;
        }
    }

    /// Waits for the job's slot, and from then on has the agents stop and continue its
    /// processes (the caller sends the input right after).
    pub async fn wait_for_slot(&self) {
        self.master.wait_for_slot(self.id).await;
        self.master.mark_started(self.id);
    }

    /// The job's input arrived (runnable) or it waits for input again (idle).
    pub fn set_runnable(&self, runnable: bool) {
        let state = if runnable {
            JobState::Runnable
        } else {
            JobState::Idle
        };
        self.master.set_state(self.id, state);
    }

    /// Seconds the job has run so far by the tables issued since it entered: its time in
    /// the table less the time it stood stopped outside its slots.
    pub fn running_seconds(&self) -> f64 {
        self.master.running_seconds(self.id)
    }

    /// Why the server killed the job, if it did.
    pub fn killed(&self) -> Option<String> {
        self.master
            .lock()
            .jobs
            .get(&self.id)
            .and_then(|j| j.killed.clone())
    }
}

impl Drop for JobTicket {
    fn drop(&mut self) {
        self.master.finish(self.id);
    }
}

struct JobRecord {
    function: String,
    /// Its processes have their input: the agents must stop them outside its slots.
    started: bool,
    processes: Vec<u32>,
    /// Told when the job enters the table.
    admitted: Option<oneshot::Sender<()>>,
    admitted_at: Option<f64>,
    killed: Option<String>,
    /// Its processes were started by node agents (`ranks = "nodes"`): their ids mean
    /// something only on their nodes, so only the agents may signal them.
    on_nodes: bool,
    /// Seconds it ran by the tables replaced so far ([`GangMaster::running_seconds`]).
    ran_seconds: f64,
}

struct NodeRecord {
    columns: Vec<u32>,
    attached: bool,
    report: v1::AgentReport,
    /// Its SPMD broker, when it runs one: the socket its ranks use, the address of its peers.
    broker_socket: String,
    broker_address: String,
    /// Commands for it besides tables (jobs opening and closing on its broker).
    commands: Option<mpsc::UnboundedSender<v1::AgentCommand>>,
}

/// A parallel job whose ranks talk through node brokers.
struct SpreadRecord {
    state: SpreadJob,
    /// The nodes its ranks run on.
    nodes: BTreeSet<String>,
    /// Nodes that have not yet said they opened it, and whom to tell when all have.
    unopened: BTreeSet<String>,
    opened: Option<oneshot::Sender<()>>,
    /// What the nodes are told, kept to ask again.
    open: v1::SpmdJobOpen,
    /// The node each rank runs on, rank order.
    rank_nodes: Vec<String>,
    /// Its ranks, when node agents run them.
    agent_ranks: Option<AgentRanks>,
}

/// How ranks run by node agents reply: rank 0's success is the call's.
pub type RankOutcome = Result<v1::ExecSuccess, tonic::Status>;

/// The ranks of a spread job that node agents run, until each has replied.
struct AgentRanks {
    pids: Vec<Option<u32>>,
    /// Told every rank's process id (rank order) once all have started.
    started: Option<oneshot::Sender<Vec<u32>>>,
    results: Vec<Option<oneshot::Sender<RankOutcome>>>,
}

/// What the caller of [`GangMaster::run_on_nodes`] waits on.
pub struct NodeRankReplies {
    /// Every rank's process id, rank order; closed if a rank failed to start (its result
    /// says why) or the job ended.
    pub started: oneshot::Receiver<Vec<u32>>,
    pub results: Vec<oneshot::Receiver<RankOutcome>>,
}

/// How long a job waits for its nodes' brokers to open it, and how often the nodes that have
/// not answered are asked again (opening is idempotent).
const OPEN_TIMEOUT: Duration = Duration::from_secs(20);
const OPEN_RETRY: Duration = Duration::from_secs(2);

/// Earliest and latest continue time of one job's processes at one boundary.
struct Spread {
    first_ns: i64,
    last_ns: i64,
    count: usize,
}

const MAX_SKEWS: usize = 100_000;
const MAX_OPEN_SPREADS: usize = 10_000;

struct Inner {
    scheduler: GangScheduler<MachineClock>,
    next_job: JobId,
    jobs: BTreeMap<JobId, JobRecord>,
    nodes: BTreeMap<String, NodeRecord>,
    spreads: BTreeMap<(u64, u64, JobId, bool), Spread>,
    /// Switch skews at slot boundaries, microseconds.
    skews_us: VecDeque<f64>,
    /// Skews when a table was installed mid-slot.
    install_skews_us: VecDeque<f64>,
    deadlocks_killed: u64,
    /// Mean seconds a job spends in the table (exponentially weighted).
    mean_residence: f64,
    /// Master time at which the current table was issued: jobs' running time under it
    /// counts from here.
    issued_at: f64,
    spread: BTreeMap<JobId, SpreadRecord>,
}

/// The gang scheduler of one server with its node agents.
pub struct GangMaster {
    pub settings: GangSettings,
    pub processors: u32,
    inner: Mutex<Inner>,
    /// The last table sent to the agents.
    tables: watch::Sender<Arc<v1::TimeTableMessage>>,
    /// The last table issued.
    current: watch::Sender<Arc<TimeTable>>,
    /// The last table issued as the agents need it: only jobs whose input was sent (the
    /// others cannot run anyway), with their processes.
    agents_view: watch::Sender<Arc<TimeTable>>,
}

impl GangMaster {
    pub fn new(settings: GangSettings, processors: u32) -> Arc<GangMaster> {
        let config = settings.core(processors.max(1));
        let mut scheduler = GangScheduler::new(config, MachineClock);
        let first = scheduler.table();
        let (tables, _) = watch::channel(Arc::new(table_to_proto(&first)));
        let (agents_view, _) = watch::channel(Arc::new(first.clone()));
        let (current, _) = watch::channel(Arc::new(first));
        let master = Arc::new(GangMaster {
            settings,
            processors: processors.max(1),
            inner: Mutex::new(Inner {
                scheduler,
                next_job: 1,
                jobs: BTreeMap::new(),
                nodes: BTreeMap::new(),
                spreads: BTreeMap::new(),
                skews_us: VecDeque::new(),
                install_skews_us: VecDeque::new(),
                deadlocks_killed: 0,
                mean_residence: 0.0,
                issued_at: MachineClock.now(),
                spread: BTreeMap::new(),
            }),
            tables,
            current,
            agents_view,
        });
        tokio::spawn(send_tables(Arc::downgrade(&master)));
        master
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state stays consistent across every early return, so a panic elsewhere while
        // holding the lock leaves nothing half-done worth refusing service for.
        ninf_proto::sync::lock(&self.inner)
    }

    /// Queues a job of `processors` for `function` and waits until it enters the table.
    pub async fn admit(
        self: &Arc<Self>,
        function: &str,
        processors: u32,
    ) -> Result<JobTicket, GangError> {
        let (ticket, admitted) = {
            let mut inner = self.lock();
            let id = inner.next_job;
            inner.next_job += 1;
            let started = inner.scheduler.submit(id, processors)?;
            let (tx, rx) = oneshot::channel();
            inner.jobs.insert(
                id,
                JobRecord {
                    function: function.to_string(),
                    started: false,
                    processes: Vec::new(),
                    admitted: Some(tx),
                    admitted_at: None,
                    killed: None,
                    on_nodes: false,
                    ran_seconds: 0.0,
                },
            );
            notify_started(&mut inner, &started);
            (
                JobTicket {
                    master: self.clone(),
                    id,
                },
                rx,
            )
        };
        // If this future is dropped while waiting, the ticket's drop cancels the job.
        admitted.await.map_err(|_| GangError::Closed)?;
        Ok(ticket)
    }

    fn attach(&self, id: JobId, processes: Vec<u32>, runnable: bool) {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.get_mut(&id) {
            job.processes = processes;
        }
        let state = if runnable {
            JobState::Runnable
        } else {
            JobState::Idle
        };
        inner.scheduler.set_state(id, state);
        self.issue(&mut inner);
    }

    /// Whether job `id` has started, is runnable, and runs on exactly `processes`.
    fn runs_on(&self, id: JobId, processes: &[u32]) -> bool {
        let inner = self.lock();
        let attached = inner
            .jobs
            .get(&id)
            .is_some_and(|job| job.started && job.processes == processes);
        attached
            && inner
                .scheduler
                .matrix()
                .placement(id)
                .is_some_and(|p| p.state.is_runnable())
    }

    fn mark_started(&self, id: JobId) {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.get_mut(&id) {
            job.started = true;
        }
        // A new version even if the matrix did not change: the agents' view did.
        self.issue(&mut inner);
    }

    /// Waits until a slot in which `id` runs is in progress (or the job left the table).
    async fn wait_for_slot(&self, id: JobId) {
        let mut current = self.current.subscribe();
        loop {
            let table = current.borrow_and_update().clone();
            if !table.jobs.contains_key(&id) {
                return;
            }
            let now = MachineClock.now();
            if table.running_at(now).contains(&id) {
                return;
            }
            let number = table.slot_number(now);
            let len = table.horizon();
            let next = (1..=len)
                .find(|k| {
                    table
                        .slot(number + k)
                        .is_some_and(|s| s.running.contains(&id))
                })
                .map(|k| table.slot_start(number + k));
            match next {
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

    fn set_state(&self, id: JobId, state: JobState) {
        let mut inner = self.lock();
        let current = inner.scheduler.matrix().placement(id).map(|p| p.state);
        let same = match (current, state) {
            (Some(JobState::Stopped { .. }), JobState::Stopped { .. }) => true,
            (Some(a), b) => a == b,
            (None, _) => true,
        };
        if !same {
            inner.scheduler.set_state(id, state);
            self.issue(&mut inner);
        }
    }

    /// A parallel job's ranks all wait with nothing in flight (`true`), or one got a message
    /// (`false`).
    pub fn set_deadlocked(&self, id: JobId, deadlocked: bool) {
        let state = if deadlocked {
            JobState::Stopped {
                since: MachineClock.now(),
            }
        } else {
            JobState::Runnable
        };
        if deadlocked {
            tracing::warn!(
                job = id,
                "every rank waits to receive with nothing in flight: deadlock"
            );
        }
        self.set_state(id, state);
    }

    fn finish(&self, id: JobId) {
        let mut inner = self.lock();
        let now = MachineClock.now();
        if let Some(job) = inner.jobs.remove(&id)
            && let Some(at) = job.admitted_at
        {
            let residence = (now - at).max(0.0);
            inner.mean_residence = if inner.mean_residence == 0.0 {
                residence
            } else {
                0.9 * inner.mean_residence + 0.1 * residence
            };
        }
        close_spread(&mut inner, id, "");
        let started = inner.scheduler.finish(id);
        notify_started(&mut inner, &started);
        if inner.scheduler.needs_table() {
            self.issue(&mut inner);
        }
    }

    /// Issues the current table, and the agents' view of it (see [`send_tables`] for when
    /// they get it).
    fn issue(&self, inner: &mut Inner) {
        let now = MachineClock.now();
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
        let started = |id: &JobId| inner.jobs.get(id).is_some_and(|j| j.started);
        let mut view = table.clone();
        view.jobs.retain(|id, _| started(id));
        for slot in view.prefix.iter_mut().chain(view.cycle.iter_mut()) {
            slot.running.retain(started);
        }
        self.agents_view.send_replace(Arc::new(view));
        self.current.send_replace(Arc::new(table));
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
        job.ran_seconds + current.running_seconds(id, inner.issued_at, MachineClock.now())
    }

    /// The latest table, for an agent's stream.
    pub fn tables(&self) -> watch::Receiver<Arc<v1::TimeTableMessage>> {
        self.tables.subscribe()
    }

    /// An agent attached; returns the commands for it besides tables.
    pub fn attach_node(&self, hello: v1::AgentHello) -> mpsc::UnboundedReceiver<v1::AgentCommand> {
        let (commands, receiver) = mpsc::unbounded_channel();
        let mut inner = self.lock();
        inner.nodes.insert(
            hello.node,
            NodeRecord {
                columns: hello.columns,
                attached: true,
                report: v1::AgentReport::default(),
                broker_socket: hello.broker_socket,
                broker_address: hello.broker_address,
                commands: Some(commands),
            },
        );
        receiver
    }

    /// Opens a parallel job on the brokers of the nodes its ranks run on, and waits until
    /// each has; returns the broker socket each rank (in rank order) talks through.
    pub async fn open_spread(&self, id: JobId) -> Result<Vec<String>, String> {
        let (sockets, opened) = {
            let mut inner = self.lock();
            let columns = inner
                .scheduler
                .matrix()
                .placement(id)
                .map(|p| p.columns.clone())
                .ok_or_else(|| format!("job {id} is not in the table"))?;
            let mut routes = Vec::with_capacity(columns.len());
            let mut sockets = Vec::with_capacity(columns.len());
            let mut nodes = BTreeSet::new();
            let mut rank_nodes = Vec::with_capacity(columns.len());
            for column in &columns {
                let (name, node) = inner
                    .nodes
                    .iter()
                    .find(|(_, n)| n.attached && n.columns.contains(column))
                    .ok_or_else(|| format!("no node agent holds processor {column}"))?;
                if node.broker_address.is_empty() {
                    return Err(format!(
                        "node `{name}` runs no SPMD broker (start its agent with --broker-listen)"
                    ));
                }
                routes.push(node.broker_address.clone());
                sockets.push(node.broker_socket.clone());
                nodes.insert(name.clone());
                rank_nodes.push(name.clone());
            }
            let open = v1::SpmdJobOpen {
                job: id,
                size: columns.len() as u32,
                rank_brokers: routes,
            };
            let (tx, rx) = oneshot::channel();
            inner.spread.insert(
                id,
                SpreadRecord {
                    state: SpreadJob::new(columns.len() as u32),
                    unopened: nodes.clone(),
                    nodes,
                    opened: Some(tx),
                    open,
                    rank_nodes,
                    agent_ranks: None,
                },
            );
            send_opens(&inner, id);
            (sockets, rx)
        };
        let deadline = tokio::time::Instant::now() + OPEN_TIMEOUT;
        tokio::pin!(opened);
        loop {
            let wake = deadline.min(tokio::time::Instant::now() + OPEN_RETRY);
            match tokio::time::timeout_at(wake, &mut opened).await {
                Ok(Ok(())) => return Ok(sockets),
                // Closed meanwhile: a node's agent went away, or the job ended.
                Ok(Err(_)) => {
                    return Err(format!("job {id} ended before its node brokers opened it"));
                }
                Err(_) if tokio::time::Instant::now() >= deadline => break,
                Err(_) => {
                    tracing::warn!(job = id, "node brokers slow to open a job; asking again");
                    send_opens(&self.lock(), id);
                }
            }
        }
        self.close_spread(id, "");
        Err(format!(
            "the node brokers did not open job {id} within {} s",
            OPEN_TIMEOUT.as_secs()
        ))
    }

    /// A node's broker opened a job.
    pub fn node_opened(&self, node: &str, id: JobId) {
        let mut inner = self.lock();
        if let Some(record) = inner.spread.get_mut(&id) {
            record.unopened.remove(node);
            if record.unopened.is_empty()
                && let Some(tx) = record.opened.take()
            {
                let _ = tx.send(());
            }
        }
    }

    /// Has the agents of an opened spread job's nodes start its ranks, one `run` per rank
    /// (rank order); they are sent their requests at [`GangMaster::start_node_ranks`].
    pub fn run_on_nodes(
        &self,
        id: JobId,
        runs: Vec<v1::SpmdRunRank>,
    ) -> Result<NodeRankReplies, String> {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.get_mut(&id) {
            job.on_nodes = true;
        }
        let record = inner
            .spread
            .get_mut(&id)
            .ok_or_else(|| format!("job {id} is not open on its nodes"))?;
        let (started_tx, started) = oneshot::channel();
        let (senders, results): (Vec<_>, Vec<_>) = runs
            .iter()
            .map(|_| {
                let (tx, rx) = oneshot::channel();
                (Some(tx), rx)
            })
            .unzip();
        record.agent_ranks = Some(AgentRanks {
            pids: vec![None; runs.len()],
            started: Some(started_tx),
            results: senders,
        });
        let targets: Vec<String> = record.rank_nodes.clone();
        for (run, node) in runs.into_iter().zip(targets) {
            let commands = inner.nodes.get(&node).and_then(|n| n.commands.as_ref());
            let sent = commands.is_some_and(|c| {
                c.send(v1::AgentCommand {
                    kind: Some(v1::agent_command::Kind::RunRank(run)),
                })
                .is_ok()
            });
            if !sent {
                return Err(format!("node `{node}`'s agent went away"));
            }
        }
        Ok(NodeRankReplies { started, results })
    }

    /// A node's agent started a rank.
    pub fn node_rank_started(&self, started: v1::SpmdRankStarted) {
        let mut inner = self.lock();
        let Some(ranks) = agent_ranks(&mut inner, started.job) else {
            return;
        };
        if let Some(slot) = ranks.pids.get_mut(started.rank as usize) {
            *slot = Some(started.pid);
        }
        if ranks.pids.iter().all(Option::is_some)
            && let Some(tx) = ranks.started.take()
        {
            let _ = tx.send(ranks.pids.iter().flatten().copied().collect());
        }
    }

    /// A rank run by a node's agent ended; a failure before every rank started also
    /// ends the wait for them.
    pub fn node_rank_result(&self, node: &str, result: v1::SpmdRankResult) {
        let mut inner = self.lock();
        let Some(ranks) = agent_ranks(&mut inner, result.job) else {
            return;
        };
        let outcome = match result.success {
            Some(success) if result.code == 0 => Ok(success),
            _ => Err(tonic::Status::new(
                tonic::Code::from_i32(result.code),
                format!("on node `{node}`: {}", result.message),
            )),
        };
        if outcome.is_err() {
            ranks.started = None;
        }
        if let Some(tx) = ranks
            .results
            .get_mut(result.rank as usize)
            .and_then(Option::take)
        {
            let _ = tx.send(outcome);
        }
    }

    /// A node's broker lost messages of a job on their way to another node's broker: the job
    /// cannot complete, so it is killed saying so.
    pub fn node_lost_messages(&self, node: &str, lost: v1::SpmdLost) {
        let mut inner = self.lock();
        if !inner.spread.contains_key(&lost.job) {
            return;
        }
        tracing::warn!(job = lost.job, node, reason = %lost.reason, "killed a job whose messages were lost between nodes");
        // Name the node the messages were for: when its agent died, this report and the
        // agent's loss race, and either must say which node failed.
        let to = inner
            .nodes
            .iter()
            .find(|(_, n)| !lost.peer.is_empty() && n.broker_address == lost.peer)
            .map(|(name, _)| format!(" to node `{name}`"))
            .unwrap_or_default();
        kill_job(
            &mut inner,
            lost.job,
            format!(
                "messages from node `{node}`{to} were lost: {}; the job cannot complete",
                lost.reason
            ),
        );
    }

    /// The job's first slot has come: its nodes' agents send its ranks their requests.
    pub fn start_node_ranks(&self, id: JobId) {
        let inner = self.lock();
        let Some(record) = inner.spread.get(&id) else {
            return;
        };
        for name in &record.nodes {
            if let Some(commands) = inner.nodes.get(name).and_then(|n| n.commands.as_ref()) {
                let _ = commands.send(v1::AgentCommand {
                    kind: Some(v1::agent_command::Kind::StartRanks(id)),
                });
            }
        }
    }

    /// A node's view of a spread job's traffic.
    pub fn node_traffic(&self, node: &str, traffic: v1::SpmdTraffic) {
        let verdict = {
            let mut inner = self.lock();
            let Some(record) = inner.spread.get_mut(&traffic.job) else {
                return;
            };
            record.state.update(node, traffic_from_proto(&traffic))
        };
        self.apply_verdict(traffic.job, verdict);
    }

    /// A rank of a spread job returned.
    pub fn spread_rank_done(&self, id: JobId, rank: u32) {
        let verdict = {
            let mut inner = self.lock();
            let Some(record) = inner.spread.get_mut(&id) else {
                return;
            };
            record.state.rank_done(rank)
        };
        self.apply_verdict(id, verdict);
    }

    /// The job ended: its node brokers drop it and abort ranks still waiting.
    pub fn close_spread(&self, id: JobId, reason: &str) {
        close_spread(&mut self.lock(), id, reason);
    }

    /// A second look at spread jobs suspected of deadlock: those with no news since are.
    pub fn confirm_spread_deadlocks(&self) {
        let confirmed: Vec<JobId> = {
            let mut inner = self.lock();
            inner
                .spread
                .iter_mut()
                .filter_map(|(&id, r)| (r.state.confirm() == Verdict::Deadlocked).then_some(id))
                .collect()
        };
        for id in confirmed {
            self.set_deadlocked(id, true);
        }
    }

    fn apply_verdict(&self, id: JobId, verdict: Verdict) {
        match verdict {
            Verdict::Deadlocked => self.set_deadlocked(id, true),
            Verdict::Revived => self.set_deadlocked(id, false),
            Verdict::Unchanged => {}
        }
    }

    /// An agent's stream ended.
    ///
    /// Its processes may be left stopped, and a job whose ranks talked through its broker has
    /// lost the messages the broker held. So such a job is killed, with the reason its call
    /// reports, and every other process on the node's columns is continued: it runs ungated
    /// until an agent attaches again, rather than staying frozen.
    pub fn detach_node(&self, node: &str) {
        let mut inner = self.lock();
        let Some(columns) = inner.nodes.get_mut(node).map(|n| {
            n.attached = false;
            n.commands = None;
            n.columns.clone()
        }) else {
            return;
        };
        let lost: Vec<JobId> = inner
            .spread
            .iter()
            .filter(|(_, r)| r.nodes.contains(node))
            .map(|(&id, _)| id)
            .collect();
        for &id in &lost {
            tracing::warn!(job = id, node, "killed a job whose node broker went away");
            kill_job(
                &mut inner,
                id,
                format!(
                    "node `{node}`'s agent went away while the job's ranks talked through its broker; the messages it held are lost"
                ),
            );
        }
        let on_node: Vec<u32> = inner
            .jobs
            .iter()
            .filter(|(id, job)| !lost.contains(id) && !job.on_nodes)
            .filter_map(|(id, job)| {
                let placement = inner.scheduler.matrix().placement(*id)?;
                Some(
                    placement
                        .columns
                        .iter()
                        .zip(&job.processes)
                        .filter(|(c, _)| columns.contains(c))
                        .map(|(_, &pid)| pid)
                        .collect::<Vec<_>>(),
                )
            })
            .flatten()
            .collect();
        for pid in on_node {
            super::signal(pid, libc::SIGCONT);
        }
    }

    /// Takes an agent's report: its applied table, counters and continue times.
    pub fn node_report(&self, node: &str, mut report: v1::AgentReport) {
        let mut inner = self.lock();
        let resumes = std::mem::take(&mut report.resumes);
        for sample in resumes {
            let Some(processes) = inner.jobs.get(&sample.job).map(|j| j.processes.len()) else {
                continue;
            };
            if processes < 2 {
                continue;
            }
            let key = (sample.version, sample.slot, sample.job, sample.at_boundary);
            let spread = inner.spreads.entry(key).or_insert(Spread {
                first_ns: sample.resumed_ns,
                last_ns: sample.resumed_ns,
                count: 0,
            });
            spread.first_ns = spread.first_ns.min(sample.resumed_ns);
            spread.last_ns = spread.last_ns.max(sample.resumed_ns);
            spread.count += 1;
            if spread.count >= processes {
                let skew = (spread.last_ns - spread.first_ns) as f64 / 1000.0;
                inner.spreads.remove(&key);
                let series = if sample.at_boundary {
                    &mut inner.skews_us
                } else {
                    &mut inner.install_skews_us
                };
                if series.len() >= MAX_SKEWS {
                    series.pop_front();
                }
                series.push_back(skew);
            }
        }
        while inner.spreads.len() > MAX_OPEN_SPREADS {
            inner.spreads.pop_first();
        }
        if let Some(n) = inner.nodes.get_mut(node) {
            n.report = report;
        }
    }

    /// Kills the processes of jobs deadlocked past their grace; returns how many.
    pub fn kill_deadlocked(&self) -> usize {
        let mut inner = self.lock();
        let grace = inner.scheduler.config.stop_grace;
        let doomed: Vec<JobId> = inner
            .scheduler
            .stopped_beyond_grace()
            .into_iter()
            .filter(|id| inner.jobs.get(id).is_some_and(|j| j.killed.is_none()))
            .collect();
        for &id in &doomed {
            let Some(job) = inner.jobs.get(&id) else {
                continue;
            };
            let reason = format!(
                "all {} ranks of `{}` waited to receive with no message in flight (deadlock); killed after the {grace} s grace",
                job.processes.len(),
                job.function
            );
            tracing::warn!(job = id, function = %job.function, "killed a deadlocked job");
            kill_job(&mut inner, id, reason);
        }
        inner.deadlocks_killed += doomed.len() as u64;
        doomed.len()
    }

    /// Jobs in the table, jobs queued, rows in use, and the expected wait of a new job.
    pub fn load(&self) -> (usize, usize, usize, f64) {
        let inner = self.lock();
        let running = inner.scheduler.matrix().jobs().count();
        let queued = inner.scheduler.queue().len();
        let rows = inner.scheduler.matrix().rows();
        (running, queued, rows, expected_wait(&inner))
    }

    /// Jobs in the table and in the queue.
    pub fn jobs(&self) -> usize {
        let inner = self.lock();
        inner.scheduler.matrix().jobs().count() + inner.scheduler.queue().len()
    }

    /// Slot switches the node agents have reported, summed.
    pub fn switches(&self) -> u64 {
        self.lock().nodes.values().map(|n| n.report.switches).sum()
    }

    pub fn status(&self) -> v1::GangStatus {
        let inner = self.lock();
        let config = inner.scheduler.config;
        let matrix = inner.scheduler.matrix();
        let counters = inner.scheduler.counters();
        let function = |id: JobId| {
            inner
                .jobs
                .get(&id)
                .map(|j| j.function.clone())
                .unwrap_or_default()
        };
        let processes = |id: JobId| {
            inner
                .jobs
                .get(&id)
                .map(|j| j.processes.clone())
                .unwrap_or_default()
        };
        let mut jobs: Vec<v1::GangJob> = matrix
            .jobs()
            .map(|(id, p)| v1::GangJob {
                job: id,
                processors: p.columns.len() as u32,
                admitted: true,
                row: p.row as u32,
                columns: p.columns.clone(),
                state: match p.state {
                    JobState::Runnable => "runnable",
                    JobState::Idle => "idle",
                    JobState::Stopped { .. } => "stopped",
                }
                .to_string(),
                function: function(id),
                processes: processes(id),
            })
            .collect();
        jobs.extend(inner.scheduler.queue().jobs().iter().map(|q| v1::GangJob {
            job: q.id,
            processors: q.processors,
            admitted: false,
            row: 0,
            columns: Vec::new(),
            state: "queued".to_string(),
            function: function(q.id),
            processes: Vec::new(),
        }));
        let sorted = |series: &VecDeque<f64>| {
            let mut v: Vec<f64> = series.iter().copied().collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let quantile = |v: &[f64], q: f64| {
            if v.is_empty() {
                0.0
            } else {
                v[((v.len() - 1) as f64 * q).round() as usize]
            }
        };
        let skews = sorted(&inner.skews_us);
        let install_skews = sorted(&inner.install_skews_us);
        let table = self.current.borrow().clone();
        let slot = table.slot(table.slot_number(MachineClock.now()));
        v1::GangStatus {
            slot_active: slot.is_some(),
            current_row: slot.map_or(0, |s| s.row as u32),
            running_now: slot.map_or_else(Vec::new, |s| s.running.clone()),
            table_layout: match config.layout {
                ninf_gang::Layout::Dqt {
                    allocation, fair, ..
                } if inner.scheduler.tree().is_some() => format!(
                    "{}dqt-{}",
                    if fair { "fair-" } else { "" },
                    allocation.name()
                ),
                _ => "matrix".to_string(),
            },
            processors: config.processors,
            max_rows: config.max_rows as u32,
            rows: matrix.rows() as u32,
            quantum: config.quantum,
            policy: format!("{:?}", config.policy).to_lowercase(),
            layout: matrix.layout(),
            jobs,
            queued: inner.scheduler.queue().len() as u32,
            expected_wait_seconds: expected_wait(&inner),
            tables_issued: counters.tables,
            admitted: counters.admitted,
            finished: counters.finished,
            deadlocks_killed: inner.deadlocks_killed,
            nodes: inner
                .nodes
                .iter()
                .map(|(name, n)| v1::GangNode {
                    node: name.clone(),
                    columns: n.columns.clone(),
                    applied_version: n.report.applied_version,
                    table_messages: n.report.table_messages,
                    switches: n.report.switches,
                    clock_checks: n.report.clock_checks,
                    clock_drifts: n.report.clock_drifts,
                    clock_offset: n.report.clock_offset,
                    signal_failures: n.report.signal_failures,
                    attached: n.attached,
                    broker_address: n.broker_address.clone(),
                    network: n.report.network,
                    ranks_run: n.report.ranks_run,
                })
                .collect(),
            skew_samples: skews.len() as u64,
            skew_p50_us: quantile(&skews, 0.5),
            skew_p99_us: quantile(&skews, 0.99),
            skew_max_us: skews.last().copied().unwrap_or(0.0),
            install_skew_samples: install_skews.len() as u64,
            install_skew_p99_us: quantile(&install_skews, 0.99),
        }
    }

    /// Forgets the switch skews measured so far (benchmarks measure one setting at a time).
    pub fn reset_skews(&self) {
        let mut inner = self.lock();
        inner.skews_us.clear();
        inner.install_skews_us.clear();
        inner.spreads.clear();
    }
}

fn traffic_from_proto(traffic: &v1::SpmdTraffic) -> RankTraffic {
    let pairs = |counts: &[v1::SpmdPairCount]| {
        counts
            .iter()
            .map(|c| ((c.from, c.to), c.count))
            .collect::<BTreeMap<_, _>>()
    };
    RankTraffic {
        waiting: traffic.waiting.iter().map(|w| (w.rank, w.from)).collect(),
        sent: pairs(&traffic.sent),
        consumed: pairs(&traffic.consumed),
    }
}

/// Asks the nodes that have not yet opened a spread job to open it.
fn send_opens(inner: &Inner, id: JobId) {
    let Some(record) = inner.spread.get(&id) else {
        return;
    };
    for name in &record.unopened {
        if let Some(commands) = inner.nodes.get(name).and_then(|n| n.commands.as_ref()) {
            let _ = commands.send(v1::AgentCommand {
                kind: Some(v1::agent_command::Kind::OpenJob(record.open.clone())),
            });
        }
    }
}

/// The ranks node agents run for a spread job still open.
fn agent_ranks(inner: &mut Inner, job: JobId) -> Option<&mut AgentRanks> {
    inner.spread.get_mut(&job)?.agent_ranks.as_mut()
}

/// Kills a job, once: its call fails with `reason`. The processes this server started are
/// signalled here; ranks that node agents started are killed by their agents as the job
/// closes (a process id from another host means nothing here).
fn kill_job(inner: &mut Inner, id: JobId, reason: String) {
    let Some(job) = inner.jobs.get_mut(&id) else {
        return;
    };
    if job.killed.is_some() {
        return;
    }
    if !job.on_nodes {
        for &pid in &job.processes {
            super::signal(pid, libc::SIGKILL);
        }
    }
    job.killed = Some(reason.clone());
    close_spread(inner, id, &reason);
}

/// Tells the brokers of a spread job's nodes that it ended.
fn close_spread(inner: &mut Inner, id: JobId, reason: &str) {
    let Some(record) = inner.spread.remove(&id) else {
        return;
    };
    let close = v1::SpmdJobClose {
        job: id,
        reason: reason.to_string(),
    };
    for name in &record.nodes {
        if let Some(commands) = inner.nodes.get(name).and_then(|n| n.commands.as_ref()) {
            let _ = commands.send(v1::AgentCommand {
                kind: Some(v1::agent_command::Kind::CloseJob(close.clone())),
            });
        }
    }
}

/// The processes agents following `table` hold stopped at time `t`.
fn held(table: &TimeTable, t: f64) -> std::collections::BTreeSet<u32> {
    let running = table.running_at(t);
    table
        .jobs
        .iter()
        .filter(|(id, _)| !running.contains(id))
        .flat_map(|(_, job)| job.processes.iter().copied())
        .collect()
}

/// Sends the agents' view of the table when they need it, and only then. A table that
/// changes what they hold now goes at once. One that only changes later slots goes shortly
/// before the next boundary, unless a newer one has replaced it by then: jobs that come and go
/// within a slot (most calls) never cost a message. Tables that never hold anything the old
/// one did not are not sent at all.
async fn send_tables(master: std::sync::Weak<GangMaster>) {
    let (mut views, mut sent) = match master.upgrade() {
        Some(m) => (m.agents_view.subscribe(), m.agents_view.borrow().clone()),
        None => return,
    };
    loop {
        let view = views.borrow_and_update().clone();
        let Some(m) = master.upgrade() else { return };
        let now = MachineClock.now();
        let margin = (view.quantum / 4.0).clamp(0.001, 0.005);
        let deadline = if view.version == sent.version {
            None
        } else if held(&view, now) != held(&sent, now) {
            Some(now)
        } else {
            match (view.next_change(now), sent.next_change(now)) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(f64::INFINITY).min(b.unwrap_or(f64::INFINITY)) - margin),
            }
        };
        drop(m);
        let send = match deadline {
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

fn notify_started(inner: &mut Inner, started: &[JobId]) {
    let now = MachineClock.now();
    for id in started {
        if let Some(job) = inner.jobs.get_mut(id) {
            job.admitted_at = Some(now);
            if let Some(tx) = job.admitted.take() {
                let _ = tx.send(());
            }
        }
    }
}

/// A new one-processor job starts at once if the table has room; otherwise it waits about a
/// mean residence for each full round of the table ahead of it.
fn expected_wait(inner: &Inner) -> f64 {
    let matrix = inner.scheduler.matrix();
    if matrix.fits(1) && inner.scheduler.queue().is_empty() {
        return 0.0;
    }
    let capacity = (matrix.columns() as usize * matrix.max_rows()).max(1);
    let ahead = inner.scheduler.queue().len() + 1;
    inner.mean_residence * ahead.div_ceil(capacity) as f64
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The calls of a batch run one after another in one job, most on the executable the
    /// call before used: those issue no table (each would wake every job waiting for its
    /// slot). A call on another executable tells the agents.
    #[tokio::test]
    async fn a_job_attached_again_to_the_processes_it_runs_on_issues_no_table() {
        let master = GangMaster::new(GangSettings::default(), 1);
        let ticket = master.admit("noop", 1).await.unwrap();
        let mut tables = master.current.subscribe();
        ticket.attach(vec![4242], true).await;
        assert!(
            tables.has_changed().unwrap(),
            "the first call issued no table"
        );
        tables.borrow_and_update();
        ticket.attach(vec![4242], true).await;
        assert!(
            !tables.has_changed().unwrap(),
            "the next call on the same process issued a table"
        );
        ticket.attach(vec![4343], true).await;
        assert!(tables.has_changed().unwrap());
        let view = master.agents_view.borrow().clone();
        assert_eq!(view.jobs.get(&ticket.id).unwrap().processes, [4343]);
    }
}
