//! The SPMD broker of one node, run by its agent when the server's processors span nodes
//! (`[gang] broker = "nodes"`). The node's ranks connect to it on a Unix socket, as they
//! would to the server's broker; a message for a rank on another node goes over TCP to that
//! node's broker. Every message for a local rank passes the node's [`NetworkGate`] (seed
//! 000's network preemption): one for a job that is not in its slot by this node's clock is
//! held and handed over at the job's next slot. The broker reports each job's traffic (who
//! waits for whom, messages sent and delivered) to the server, which merges every node's view
//! to tell a deadlock across nodes.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use ninf_gang::network::{Envelope, NetworkGate, RankTraffic};
use ninf_gang::{JobId, TimeTable};
use ninf_proto::v1::{self, spmd_frame::Kind};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UnixListener};
use tokio::sync::{Notify, mpsc};

use super::broker::{RankFrames, read_frame, refuse_recv, send_refusal, serve_rank};
use super::clock::NodeTime;
use super::mailboxes::{Mailboxes, Outbox, encode};

/// How often each job's changed traffic is reported to the server.
const TRAFFIC_REPORT_INTERVAL: Duration = Duration::from_millis(20);

/// Where a node's broker listens.
#[derive(Debug, Clone)]
pub struct NodeBrokerOptions {
    /// The TCP address other nodes' brokers connect to (port 0: any free port).
    pub listen: SocketAddr,
    /// The address other nodes are told to use, when it differs from the one bound.
    pub advertise: Option<String>,
    /// Hold a job's messages outside its slots (the gang thesis); `false` only counts them.
    pub preempt: bool,
}

/// One parallel job as this node sees it.
struct NodeJob {
    size: u32,
    /// Each rank's node broker address.
    routes: Vec<String>,
    /// Messages through the gate, and the ranks waiting for theirs.
    mailboxes: Mailboxes,
    /// Sent and consumed counts per pair (who waits comes from the mailboxes).
    traffic: RankTraffic,
}

struct State {
    table: Option<TimeTable>,
    gate: NetworkGate<Bytes>,
    jobs: HashMap<JobId, NodeJob>,
    /// Connections to other nodes' brokers, by address.
    peers: HashMap<String, mpsc::UnboundedSender<(JobId, Bytes)>>,
    /// Jobs whose traffic changed since the last report.
    changed: BTreeSet<JobId>,
}

/// A node's broker.
pub struct NodeBroker {
    socket: PathBuf,
    address: String,
    time: NodeTime,
    state: Mutex<State>,
    /// Something was held, or the table changed: the releaser looks again.
    wake: Arc<Notify>,
    /// To the server over the agent's stream: `opened` and traffic reports.
    to_server: mpsc::UnboundedSender<v1::AgentMessage>,
}

#[derive(Debug, thiserror::Error)]
pub enum NodeBrokerError {
    #[error("cannot open the node broker's socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen for other nodes' brokers on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
}

impl NodeBroker {
    /// Opens the broker's socket and port and starts serving; stops when the last handle to
    /// it is dropped.
    pub async fn start(
        options: &NodeBrokerOptions,
        node: &str,
        time: NodeTime,
        to_server: mpsc::UnboundedSender<v1::AgentMessage>,
    ) -> Result<Arc<NodeBroker>, NodeBrokerError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let socket = std::env::temp_dir().join(format!(
            "ninf-spmd-{node}-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&socket);
        let ranks = UnixListener::bind(&socket).map_err(|source| NodeBrokerError::Socket {
            path: socket.clone(),
            source,
        })?;
        let peers =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| NodeBrokerError::Listen {
                    address: options.listen,
                    source,
                })?;
        let bound = peers
            .local_addr()
            .map_err(|source| NodeBrokerError::Listen {
                address: options.listen,
                source,
            })?;
        let address = options
            .advertise
            .clone()
            .unwrap_or_else(|| bound.to_string());
        let broker = Arc::new(NodeBroker {
            socket,
            address,
            time,
            state: Mutex::new(State {
                table: None,
                gate: NetworkGate::new(options.preempt),
                jobs: HashMap::new(),
                peers: HashMap::new(),
                changed: BTreeSet::new(),
            }),
            wake: Arc::new(Notify::new()),
            to_server,
        });
        spawn_rank_listener(Arc::downgrade(&broker), ranks);
        spawn_peer_listener(Arc::downgrade(&broker), peers);
        spawn_releaser(Arc::downgrade(&broker), broker.wake.clone());
        spawn_reporter(Arc::downgrade(&broker));
        Ok(broker)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        ninf_proto::sync::lock(&self.state)
    }

    /// The table the node's agent follows changed.
    pub fn set_table(&self, table: TimeTable) {
        self.lock().table = Some(table);
        self.wake.notify_one();
    }

    /// A job starts: its ranks may now send and receive here. Asked again (the server did not
    /// hear the answer), it only answers again.
    pub fn open(&self, open: v1::SpmdJobOpen) {
        let job = open.job;
        tracing::debug!(job, "opening a parallel job on this node's broker");
        self.lock().jobs.entry(job).or_insert_with(|| NodeJob {
            size: open.size,
            routes: open.rank_brokers,
            mailboxes: Mailboxes::default(),
            traffic: RankTraffic::default(),
        });
        let _ = self.to_server.send(v1::AgentMessage {
            kind: Some(v1::agent_message::Kind::Opened(job)),
        });
    }

    /// A job ended: ranks still waiting are told why, and its messages dropped.
    pub fn close(&self, close: v1::SpmdJobClose) {
        let mut state = self.lock();
        state.gate.forget(close.job);
        state.changed.remove(&close.job);
        if let Some(job) = state.jobs.remove(&close.job) {
            let reason = if close.reason.is_empty() {
                format!("job {} ended while this rank waited", close.job)
            } else {
                close.reason
            };
            job.mailboxes.abort(&reason);
        }
    }

    /// What the gate has handed over, for the agent's report.
    pub fn ledger(&self) -> v1::NetworkLedger {
        let state = self.lock();
        let ledger = state.gate.ledger();
        v1::NetworkLedger {
            messages: ledger.messages,
            bytes: ledger.bytes,
            messages_outside_slot: ledger.messages_outside_slot,
            bytes_outside_slot: ledger.bytes_outside_slot,
            messages_held: ledger.messages_held,
            most_held: ledger.most_held,
            preempts: state.gate.preempts(),
        }
    }

    /// A message for a rank on this node, from a local rank or another node: through the gate
    /// to the rank's queue, or held for the job's slot.
    fn arrive(&self, send: v1::SpmdSend) {
        let now = self.time.master_now();
        let mut state = self.lock();
        let envelope = Envelope {
            job: send.job,
            from: send.from,
            to: send.to,
            bytes: send.data.len(),
            payload: send.data,
        };
        let passed = {
            let State { table, gate, .. } = &mut *state;
            gate.arrive(table.as_ref(), now, envelope)
        };
        match passed {
            Some(envelope) => hand_over(&mut state, envelope),
            None => self.wake.notify_one(),
        }
    }

    /// Hands over what the gate may release now; returns when to look next.
    fn release(&self) -> Option<f64> {
        let now = self.time.master_now();
        let mut state = self.lock();
        let released = {
            let State { table, gate, .. } = &mut *state;
            gate.release(table.as_ref(), now)
        };
        for envelope in released {
            hand_over(&mut state, envelope);
        }
        state.gate.next_release(state.table.as_ref(), now)
    }

    /// Sends a job's frame to another node's broker, connecting on first use.
    fn forward(&self, state: &mut State, address: &str, job: JobId, frame: Bytes) {
        let to_server = &self.to_server;
        let peer = state
            .peers
            .entry(address.to_string())
            .or_insert_with(|| spawn_peer_writer(address.to_string(), to_server.clone()));
        if let Err(mpsc::error::SendError(frame)) = peer.send((job, frame)) {
            // That connection failed (its jobs were reported lost); later jobs get a fresh one.
            let fresh = spawn_peer_writer(address.to_string(), to_server.clone());
            let _ = fresh.send(frame);
            state.peers.insert(address.to_string(), fresh);
        }
    }

    fn report_traffic(&self) {
        let reports: Vec<v1::SpmdTraffic> = {
            let mut state = self.lock();
            let changed = std::mem::take(&mut state.changed);
            changed
                .into_iter()
                .filter_map(|job| state.jobs.get(&job).map(|j| traffic_to_proto(job, j)))
                .collect()
        };
        for traffic in reports {
            let _ = self.to_server.send(v1::AgentMessage {
                kind: Some(v1::agent_message::Kind::Traffic(traffic)),
            });
        }
    }
}

/// A message through the gate: to the rank waiting for it, or into its queue.
fn hand_over(state: &mut State, envelope: Envelope<Bytes>) {
    let Some(job) = state.jobs.get_mut(&envelope.job) else {
        // The job ended while its message was on the way.
        return;
    };
    let (from, to) = (envelope.from, envelope.to);
    if job.mailboxes.put(from, to, envelope.payload) {
        job.traffic.count_consumed(from, to);
    }
    state.changed.insert(envelope.job);
}

fn traffic_to_proto(job: JobId, j: &NodeJob) -> v1::SpmdTraffic {
    let pairs = |counts: &std::collections::BTreeMap<(u32, u32), u64>| {
        counts
            .iter()
            .map(|(&(from, to), &count)| v1::SpmdPairCount { from, to, count })
            .collect()
    };
    v1::SpmdTraffic {
        job,
        waiting: j
            .mailboxes
            .waits()
            .map(|(rank, from)| v1::SpmdWait { rank, from })
            .collect(),
        sent: pairs(&j.traffic.sent),
        consumed: pairs(&j.traffic.consumed),
    }
}

impl RankFrames for NodeBroker {
    fn send(&self, send: v1::SpmdSend) -> Kind {
        let route = {
            let mut state = self.lock();
            let size = state.jobs.get(&send.job).map(|j| j.size);
            if let Some(refusal) = send_refusal(&send, size, "node") {
                return refusal;
            }
            let Some(job) = state.jobs.get_mut(&send.job) else {
                return Kind::Sent(false);
            };
            job.traffic.count_sent(send.from, send.to);
            let route = job
                .routes
                .get(send.to as usize)
                .cloned()
                .unwrap_or_default();
            state.changed.insert(send.job);
            if route != self.address {
                let job = send.job;
                let frame = encode(Kind::Send(send));
                self.forward(&mut state, &route, job, frame);
                return Kind::Sent(true);
            }
            route
        };
        debug_assert_eq!(route, self.address);
        self.arrive(send);
        Kind::Sent(true)
    }

    fn recv(&self, recv: v1::SpmdRecv, outbox: &Outbox) {
        let mut state = self.lock();
        let size = state.jobs.get(&recv.job).map(|j| j.size);
        if refuse_recv(&recv, size, "node", outbox) {
            return;
        }
        let Some(job) = state.jobs.get_mut(&recv.job) else {
            return;
        };
        if job.mailboxes.take(recv.rank, recv.from, outbox) {
            job.traffic.count_consumed(recv.from, recv.rank);
        }
        state.changed.insert(recv.job);
    }
}

impl Drop for NodeBroker {
    fn drop(&mut self) {
        // The releaser wakes, finds the broker gone and ends.
        self.wake.notify_one();
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn spawn_rank_listener(broker: std::sync::Weak<NodeBroker>, listener: UnixListener) {
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let Some(broker) = broker.upgrade() else {
                break;
            };
            tokio::spawn(async move { serve_rank(&*broker, stream).await });
        }
    });
}

/// Other nodes' brokers connect here and send their ranks' messages for this node's ranks.
fn spawn_peer_listener(broker: std::sync::Weak<NodeBroker>, listener: TcpListener) {
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let broker = broker.clone();
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let (mut reader, _writer) = stream.into_split();
                let sender = format!("the broker at {peer}");
                while let Some(kind) = read_frame(&mut reader, &sender).await {
                    let Some(broker) = broker.upgrade() else {
                        break;
                    };
                    match kind {
                        Kind::Send(send) => broker.arrive(send),
                        _ => tracing::warn!(%peer, "a peer broker sent an unexpected frame"),
                    }
                }
            });
        }
    });
}

/// Jobs a connection remembers having carried, to report them lost if it breaks (job ids
/// grow, so the oldest, long finished, are forgotten first).
const MAX_CARRIED_JOBS: usize = 4096;

/// A connection to another node's broker: frames queue until it is open, then go in order.
/// If it cannot connect, or breaks, every job it carried or still queues may have lost
/// messages: each is reported to the server, which kills it with the reason rather than let
/// its ranks wait for messages that will never come.
fn spawn_peer_writer(
    address: String,
    to_server: mpsc::UnboundedSender<v1::AgentMessage>,
) -> mpsc::UnboundedSender<(JobId, Bytes)> {
    let (tx, mut rx) = mpsc::unbounded_channel::<(JobId, Bytes)>();
    tokio::spawn(async move {
        let mut carried = BTreeSet::new();
        let failure = match connect_to_peer(&address).await {
            Ok(mut stream) => loop {
                let Some((job, frame)) = rx.recv().await else {
                    return;
                };
                carried.insert(job);
                if carried.len() > MAX_CARRIED_JOBS {
                    carried.pop_first();
                }
                if let Err(e) = stream.write_all(&frame).await {
                    break format!("the connection to the broker at {address} broke ({e})");
                }
            },
            Err(e) => format!("cannot reach the broker at {address} ({e})"),
        };
        tracing::warn!(%address, reason = %failure, "messages to a peer node's broker are lost");
        rx.close();
        while let Ok((job, _)) = rx.try_recv() {
            carried.insert(job);
        }
        for job in carried {
            let _ = to_server.send(v1::AgentMessage {
                kind: Some(v1::agent_message::Kind::Lost(v1::SpmdLost {
                    job,
                    reason: failure.clone(),
                    peer: address.clone(),
                })),
            });
        }
    });
    tx
}

/// Connects to a peer broker, trying for 5 s (it may still be starting).
async fn connect_to_peer(address: &str) -> std::io::Result<TcpStream> {
    let mut attempt = 0;
    loop {
        match TcpStream::connect(address).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) if attempt == 49 => return Err(e),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Hands held messages over at their jobs' slots: sleeps until the next boundary at which
/// what runs changes, or until something new is held.
fn spawn_releaser(broker: std::sync::Weak<NodeBroker>, wake: Arc<Notify>) {
    tokio::spawn(async move {
        loop {
            let Some(strong) = broker.upgrade() else {
                break;
            };
            let next = strong.release();
            let wait = next.map(|t| strong.time.until(t));
            drop(strong);
            let woken = wake.notified();
            match wait {
                Some(wait) => {
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = woken => {}
                    }
                }
                None => woken.await,
            }
        }
    });
}

fn spawn_reporter(broker: std::sync::Weak<NodeBroker>) {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(TRAFFIC_REPORT_INTERVAL);
        loop {
            ticker.tick().await;
            let Some(broker) = broker.upgrade() else {
                break;
            };
            broker.report_traffic();
        }
    });
}
