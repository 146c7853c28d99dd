//! The gang master's state: each job from admission to its end, each node agent, each
//! parallel job spread over node brokers, and the switch skews the agents measured. Plain
//! data with the changes that touch only it; the master's other files act on it under one lock.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use ninf_gang::network::SpreadJob;
use ninf_gang::{Clock, GangScheduler, JobId};
use ninf_proto::v1;
use tokio::sync::oneshot;

use super::links::AgentLink;

/// Where a job stands. A job is queued until the gang core admits it into the table, admitted
/// while its processes wait for their input (they cannot run, so the agents leave them be),
/// started once the input went (from then on the agents stop them outside its slots), and
/// killed when the server gave up on it; it leaves the records when its call ends.
pub(super) enum JobPhase {
    /// Waiting for room in the table; told on the sender when it enters.
    Queued(oneshot::Sender<()>),
    /// In the table since master time `since`.
    Admitted { since: f64 },
    /// In the table since `since`, its processes holding their input.
    Started { since: f64 },
    /// Killed by the server (its processes are gone); the call fails with `reason`.
    Killed { since: f64, reason: String },
}

/// Who started a job's processes, and so who may signal them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Runner {
    /// This server: their ids are process ids here.
    Server,
    /// Node agents (`ranks = "nodes"`): the ids mean something only on their nodes.
    NodeAgents,
}

pub(super) struct JobRecord {
    pub function: String,
    pub phase: JobPhase,
    /// Its processes, rank order.
    pub processes: Vec<u32>,
    pub runner: Runner,
    /// Seconds it ran by the tables replaced so far (see `GangMaster::running_seconds`).
    pub ran_seconds: f64,
}

impl JobRecord {
    /// A queued job, and what tells its caller that it entered the table.
    pub fn queued(function: &str) -> (JobRecord, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let record = JobRecord {
            function: function.to_string(),
            phase: JobPhase::Queued(tx),
            processes: Vec::new(),
            runner: Runner::Server,
            ran_seconds: 0.0,
        };
        (record, rx)
    }

    /// Whether its processes hold their input: the agents gate them by the table.
    pub fn started(&self) -> bool {
        matches!(self.phase, JobPhase::Started { .. })
    }

    pub fn killed(&self) -> Option<&str> {
        match &self.phase {
            JobPhase::Killed { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Master time at which it entered the table, if it has.
    pub fn in_table_since(&self) -> Option<f64> {
        match self.phase {
            JobPhase::Queued(_) => None,
            JobPhase::Admitted { since }
            | JobPhase::Started { since }
            | JobPhase::Killed { since, .. } => Some(since),
        }
    }

    /// Queued → admitted at `now`, telling the caller.
    pub fn admit(&mut self, now: f64) {
        let phase = std::mem::replace(&mut self.phase, JobPhase::Admitted { since: now });
        match phase {
            JobPhase::Queued(tx) => {
                let _ = tx.send(());
            }
            other => self.phase = other,
        }
    }

    /// Admitted → started; any other phase stays.
    pub fn start(&mut self) {
        if let JobPhase::Admitted { since } = self.phase {
            self.phase = JobPhase::Started { since };
        }
    }

    /// Admitted or started → killed; `false` for a job not in the table or already killed.
    pub fn kill(&mut self, reason: String) -> bool {
        match self.phase {
            JobPhase::Admitted { since } | JobPhase::Started { since } => {
                self.phase = JobPhase::Killed { since, reason };
                true
            }
            JobPhase::Queued(_) | JobPhase::Killed { .. } => false,
        }
    }
}

pub(super) struct NodeRecord {
    pub columns: Vec<u32>,
    /// Its agent's command stream while attached.
    pub link: Option<Box<dyn AgentLink>>,
    /// Which attachment this is: an agent that attaches again under the same name is a new
    /// one, and the old stream's end must not detach it.
    pub attachment: u64,
    pub report: v1::AgentReport,
    /// Its SPMD broker, when it runs one: the socket its ranks use, the address of its peers.
    pub broker_socket: String,
    pub broker_address: String,
}

impl NodeRecord {
    pub fn attached(&self) -> bool {
        self.link.is_some()
    }

    /// Sends a command to the node's agent; `false` if it is not attached or went away.
    pub fn send(&self, command: v1::AgentCommand) -> bool {
        self.link.as_ref().is_some_and(|link| link.send(command))
    }
}

/// A parallel job whose ranks talk through node brokers.
pub(super) struct SpreadRecord {
    pub state: SpreadJob,
    /// The nodes its ranks run on.
    pub nodes: BTreeSet<String>,
    /// Nodes that have not yet said they opened it, and whom to tell when all have.
    pub unopened: BTreeSet<String>,
    pub opened: Option<oneshot::Sender<()>>,
    /// What the nodes are told, kept to ask again.
    pub open: v1::SpmdJobOpen,
    /// The node each rank runs on, rank order.
    pub rank_nodes: Vec<String>,
    /// Its ranks, when node agents run them.
    pub agent_ranks: Option<AgentRanks>,
}

/// How ranks run by node agents reply: rank 0's success is the call's.
pub type RankOutcome = Result<v1::ExecSuccess, tonic::Status>;

/// The ranks of a spread job that node agents run, until each has replied.
pub(super) struct AgentRanks {
    pub pids: Vec<Option<u32>>,
    /// Told every rank's process id (rank order) once all have started.
    pub started: Option<oneshot::Sender<Vec<u32>>>,
    pub results: Vec<Option<oneshot::Sender<RankOutcome>>>,
}

/// Earliest and latest continue time of one job's processes at one boundary.
pub(super) struct ResumeSpread {
    pub first_ns: i64,
    pub last_ns: i64,
    pub count: usize,
}

/// Which boundary a continue time belongs to: table version, slot, job, and whether it was
/// a slot boundary (or a table installed mid-slot).
pub(super) type Boundary = (u64, u64, JobId, bool);

pub(super) const MAX_SKEWS: usize = 100_000;
pub(super) const MAX_OPEN_BOUNDARIES: usize = 10_000;

pub(super) struct Inner<C: Clock> {
    pub scheduler: GangScheduler<C>,
    pub next_job: JobId,
    pub next_attachment: u64,
    pub jobs: BTreeMap<JobId, JobRecord>,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// Boundaries some of whose processes have reported their continue time.
    pub resumes: BTreeMap<Boundary, ResumeSpread>,
    /// Switch skews at slot boundaries, microseconds.
    pub skews_us: VecDeque<f64>,
    /// Skews when a table was installed mid-slot.
    pub install_skews_us: VecDeque<f64>,
    pub deadlocks_killed: u64,
    /// Mean seconds a job spends in the table (exponentially weighted).
    pub mean_residence: f64,
    /// Master time at which the current table was issued: jobs' running time under it
    /// counts from here.
    pub issued_at: f64,
    pub spread_jobs: BTreeMap<JobId, SpreadRecord>,
}

impl<C: Clock> Inner<C> {
    pub fn new(scheduler: GangScheduler<C>, now: f64) -> Inner<C> {
        Inner {
            scheduler,
            next_job: 1,
            next_attachment: 1,
            jobs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            resumes: BTreeMap::new(),
            skews_us: VecDeque::new(),
            install_skews_us: VecDeque::new(),
            deadlocks_killed: 0,
            mean_residence: 0.0,
            issued_at: now,
            spread_jobs: BTreeMap::new(),
        }
    }

    /// Sends a command to each of `nodes` that is attached.
    pub fn send_to<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a String>,
        command: &v1::AgentCommand,
    ) {
        for name in nodes {
            if let Some(node) = self.nodes.get(name) {
                node.send(command.clone());
            }
        }
    }

    /// The jobs the gang core just let into the table learn so.
    pub fn admit(&mut self, admitted: &[JobId], now: f64) {
        for id in admitted {
            if let Some(job) = self.jobs.get_mut(id) {
                job.admit(now);
            }
        }
    }

    /// Takes a job that left the table into the mean residence.
    pub fn record_residence(&mut self, seconds: f64) {
        self.mean_residence = if self.mean_residence == 0.0 {
            seconds
        } else {
            0.9 * self.mean_residence + 0.1 * seconds
        };
    }

    /// Kills a job, once: its call fails with `reason`, and the brokers of its nodes drop
    /// it. Returns the processes this server must kill itself; ranks that node agents
    /// started are killed by their agents as the job closes (a process id from another host
    /// means nothing here).
    pub fn kill_job(&mut self, id: JobId, reason: String) -> Vec<u32> {
        let Some(job) = self.jobs.get_mut(&id) else {
            return Vec::new();
        };
        if !job.kill(reason.clone()) {
            return Vec::new();
        }
        let pids = match job.runner {
            Runner::Server => job.processes.clone(),
            Runner::NodeAgents => Vec::new(),
        };
        self.close_spread(id, &reason);
        pids
    }

    /// Tells the brokers of a spread job's nodes that it ended.
    pub fn close_spread(&mut self, id: JobId, reason: &str) {
        let Some(record) = self.spread_jobs.remove(&id) else {
            return;
        };
        let close = v1::AgentCommand {
            kind: Some(v1::agent_command::Kind::CloseJob(v1::SpmdJobClose {
                job: id,
                reason: reason.to_string(),
            })),
        };
        self.send_to(&record.nodes, &close);
    }

    /// A new one-processor job starts at once if the table has room; otherwise it waits
    /// about a mean residence for each full round of the table ahead of it.
    pub fn expected_wait(&self) -> f64 {
        let matrix = self.scheduler.matrix();
        if matrix.fits(1) && self.scheduler.queue().is_empty() {
            return 0.0;
        }
        let capacity = (matrix.columns() as usize * matrix.max_rows()).max(1);
        let ahead = self.scheduler.queue().len() + 1;
        self.mean_residence * ahead.div_ceil(capacity) as f64
    }
}
