//! Parallel jobs spread over nodes: opening a job on the brokers of the nodes its ranks run
//! on, having node agents start its ranks and gathering their replies, and the deadlock and
//! loss verdicts the nodes' traffic reports lead to.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ninf_gang::JobId;
use ninf_gang::network::{RankTraffic, SpreadJob, Verdict};
use ninf_proto::v1;
use tokio::sync::oneshot;

use super::links::MasterClock;
use super::records::{AgentRanks, Inner, RankOutcome, Runner, SpreadRecord};
use super::table::GangMaster;

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

fn command(kind: v1::agent_command::Kind) -> v1::AgentCommand {
    v1::AgentCommand { kind: Some(kind) }
}

impl<C: MasterClock> GangMaster<C> {
    /// Opens a parallel job on the brokers of the nodes its ranks run on, and waits until
    /// each has; returns the broker socket each rank (in rank order) talks through.
    pub async fn open_spread(&self, id: JobId) -> Result<Vec<String>, String> {
        let (sockets, opened) = {
            let mut inner = self.lock();
            let (mut record, sockets) = spread_record(&inner, id)?;
            let (tx, opened) = oneshot::channel();
            record.opened = Some(tx);
            inner.spread_jobs.insert(id, record);
            send_opens(&inner, id);
            (sockets, opened)
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
        if let Some(record) = inner.spread_jobs.get_mut(&id) {
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
            job.runner = Runner::NodeAgents;
        }
        let record = inner
            .spread_jobs
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
            let sent = inner
                .nodes
                .get(&node)
                .is_some_and(|n| n.send(command(v1::agent_command::Kind::RunRank(run))));
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
        if !inner.spread_jobs.contains_key(&lost.job) {
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
        let reason = format!(
            "messages from node `{node}`{to} were lost: {}; the job cannot complete",
            lost.reason
        );
        self.kill(&mut inner, lost.job, reason);
    }

    /// The job's first slot has come: its nodes' agents send its ranks their requests.
    pub fn start_node_ranks(&self, id: JobId) {
        let inner = self.lock();
        if let Some(record) = inner.spread_jobs.get(&id) {
            let start = command(v1::agent_command::Kind::StartRanks(id));
            inner.send_to(&record.nodes, &start);
        }
    }

    /// A node's view of a spread job's traffic.
    pub fn node_traffic(&self, node: &str, traffic: v1::SpmdTraffic) {
        let verdict = {
            let mut inner = self.lock();
            let Some(record) = inner.spread_jobs.get_mut(&traffic.job) else {
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
            let Some(record) = inner.spread_jobs.get_mut(&id) else {
                return;
            };
            record.state.rank_done(rank)
        };
        self.apply_verdict(id, verdict);
    }

    /// The job ended: its node brokers drop it and abort ranks still waiting.
    pub fn close_spread(&self, id: JobId, reason: &str) {
        self.lock().close_spread(id, reason);
    }

    /// A second look at spread jobs suspected of deadlock: those with no news since are.
    pub fn confirm_spread_deadlocks(&self) {
        let confirmed: Vec<JobId> = {
            let mut inner = self.lock();
            inner
                .spread_jobs
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
}

/// A spread job's record for job `id` as the table places it (no one waits for its opening
/// yet), and the broker socket each of its ranks talks through: every column must be held by
/// an attached agent with a broker.
fn spread_record<C: MasterClock>(
    inner: &Inner<C>,
    id: JobId,
) -> Result<(SpreadRecord, Vec<String>), String> {
    let columns = inner
        .scheduler
        .matrix()
        .placement(id)
        .map(|p| p.columns.clone())
        .ok_or_else(|| format!("job {id} is not in the table"))?;
    let mut routes = Vec::with_capacity(columns.len());
    let mut sockets = Vec::with_capacity(columns.len());
    let mut rank_nodes = Vec::with_capacity(columns.len());
    for column in &columns {
        let (name, node) = inner
            .nodes
            .iter()
            .find(|(_, n)| n.attached() && n.columns.contains(column))
            .ok_or_else(|| format!("no node agent holds processor {column}"))?;
        if node.broker_address.is_empty() {
            return Err(format!(
                "node `{name}` runs no SPMD broker (start its agent with --broker-listen)"
            ));
        }
        routes.push(node.broker_address.clone());
        sockets.push(node.broker_socket.clone());
        rank_nodes.push(name.clone());
    }
    let nodes: BTreeSet<String> = rank_nodes.iter().cloned().collect();
    let record = SpreadRecord {
        state: SpreadJob::new(columns.len() as u32),
        unopened: nodes.clone(),
        nodes,
        opened: None,
        open: v1::SpmdJobOpen {
            job: id,
            size: columns.len() as u32,
            rank_brokers: routes,
        },
        rank_nodes,
        agent_ranks: None,
    };
    Ok((record, sockets))
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
fn send_opens<C: MasterClock>(inner: &Inner<C>, id: JobId) {
    if let Some(record) = inner.spread_jobs.get(&id) {
        let open = command(v1::agent_command::Kind::OpenJob(record.open.clone()));
        inner.send_to(&record.unopened, &open);
    }
}

/// The ranks node agents run for a spread job still open.
fn agent_ranks<C: MasterClock>(inner: &mut Inner<C>, job: JobId) -> Option<&mut AgentRanks> {
    inner.spread_jobs.get_mut(&job)?.agent_ranks.as_mut()
}
