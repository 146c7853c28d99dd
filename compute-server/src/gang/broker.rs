//! The message broker of parallel jobs: the ranks of a job (processes of one executable, SPMD)
//! send and receive byte messages through it, over a Unix socket whose path the executables
//! find in `NINF_SPMD_SOCKET`. Because every send and every receive passes here, the broker
//! knows a job's global state (the gang thesis, chapter 6): when every rank still running waits to
//! receive and no message it waits for is in flight, the job is deadlocked, and the gang
//! master is told so (it loses its slots and is killed after the grace).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use ninf_gang::JobId;
use ninf_proto::v1::{self, spmd_frame::Kind};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use super::mailboxes::{Mailboxes, Outbox, encode};
use super::master::GangMaster;

/// Largest message between ranks.
const MAX_MESSAGE: usize = 1 << 30;

/// What a broker does with a rank's frames: the server's broker, or a node's.
pub(super) trait RankFrames: Send + Sync {
    /// Takes a message; answers the sender with `sent`, or why it was refused.
    fn send(&self, send: v1::SpmdSend) -> Kind;
    /// A rank waits for a message: delivered on `outbox` now or when it arrives.
    fn recv(&self, recv: v1::SpmdRecv, outbox: &Outbox);
}

struct JobChannels {
    size: u32,
    mailboxes: Mailboxes,
    /// Ranks whose call returned.
    done: HashSet<u32>,
    deadlocked: bool,
}

impl JobChannels {
    fn deadlocked_now(&self) -> bool {
        let live = self.size as usize - self.done.len();
        live > 0
            && self.mailboxes.waiting_count() == live
            && self
                .mailboxes
                .waits()
                .all(|(rank, from)| !self.mailboxes.has_queued(from, rank))
    }
}

/// The broker of one server.
pub struct SpmdBroker {
    path: PathBuf,
    jobs: Mutex<HashMap<JobId, JobChannels>>,
    master: Arc<GangMaster>,
    /// Messages passed, for status and tests.
    delivered: AtomicU64,
}

impl SpmdBroker {
    /// Listens on a fresh socket under the system's temporary folder.
    pub fn start(master: Arc<GangMaster>) -> std::io::Result<Arc<SpmdBroker>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "ninf-spmd-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        let broker = Arc::new(SpmdBroker {
            path,
            jobs: Mutex::new(HashMap::new()),
            master,
            delivered: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&broker);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Some(broker) = weak.upgrade() else { break };
                tokio::spawn(async move { serve_rank(&*broker, stream).await });
            }
        });
        Ok(broker)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<JobId, JobChannels>> {
        ninf_proto::sync::lock(&self.jobs)
    }

    /// A parallel job of `size` ranks starts.
    pub fn open(&self, job: JobId, size: u32) {
        self.lock().insert(
            job,
            JobChannels {
                size,
                mailboxes: Mailboxes::default(),
                done: HashSet::new(),
                deadlocked: false,
            },
        );
    }

    /// A rank's call returned; the others may now be deadlocked waiting for it.
    pub fn rank_done(&self, job: JobId, rank: u32) {
        let deadlock = {
            let mut jobs = self.lock();
            let Some(channels) = jobs.get_mut(&job) else {
                return;
            };
            channels.done.insert(rank);
            channels.mailboxes.stop_waiting(rank);
            let now = channels.deadlocked_now();
            let changed = now && !channels.deadlocked;
            channels.deadlocked = now;
            changed
        };
        if deadlock {
            self.master.set_deadlocked(job, true);
        }
    }

    /// The job ended: ranks still waiting are told so, and undelivered messages dropped.
    pub fn close(&self, job: JobId) {
        if let Some(channels) = self.lock().remove(&job) {
            channels
                .mailboxes
                .abort(&format!("job {job} ended while this rank waited"));
        }
    }
}

impl RankFrames for SpmdBroker {
    fn send(&self, send: v1::SpmdSend) -> Kind {
        let revived = {
            let mut jobs = self.lock();
            let size = jobs.get(&send.job).map(|c| c.size);
            if let Some(refusal) = send_refusal(&send, size, "server") {
                return refusal;
            }
            let Some(channels) = jobs.get_mut(&send.job) else {
                return Kind::Sent(false);
            };
            if channels.mailboxes.put(send.from, send.to, send.data) {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            std::mem::replace(&mut channels.deadlocked, false)
        };
        if revived {
            self.master.set_deadlocked(send.job, false);
        }
        Kind::Sent(true)
    }

    fn recv(&self, recv: v1::SpmdRecv, outbox: &Outbox) {
        let deadlock = {
            let mut jobs = self.lock();
            let size = jobs.get(&recv.job).map(|c| c.size);
            if refuse_recv(&recv, size, "server", outbox) {
                return;
            }
            let Some(channels) = jobs.get_mut(&recv.job) else {
                return;
            };
            if channels.mailboxes.take(recv.rank, recv.from, outbox) {
                self.delivered.fetch_add(1, Ordering::Relaxed);
                false
            } else {
                let now = channels.deadlocked_now();
                let changed = now && !channels.deadlocked;
                channels.deadlocked = now;
                changed
            }
        };
        if deadlock {
            self.master.set_deadlocked(recv.job, true);
        }
    }
}

/// Why a send cannot be taken: its job is not open here (`size` is `None`) or a rank is out
/// of range. `place` names where the broker is ("server", "node").
pub(super) fn send_refusal(send: &v1::SpmdSend, size: Option<u32>, place: &str) -> Option<Kind> {
    let Some(size) = size else {
        return Some(Kind::Abort(format!(
            "job {} is not running on this {place}",
            send.job
        )));
    };
    (send.to >= size || send.from >= size).then(|| {
        Kind::Abort(format!(
            "no rank {} in a job of {size} ranks",
            send.to.max(send.from)
        ))
    })
}

/// Answers a receive that cannot be served (its job is not open here, or it waits for a rank
/// that does not exist) with why; `true` if it did.
pub(super) fn refuse_recv(
    recv: &v1::SpmdRecv,
    size: Option<u32>,
    place: &str,
    outbox: &Outbox,
) -> bool {
    let reason = match size {
        None => format!("job {} is not running on this {place}", recv.job),
        Some(size) if recv.from >= size => format!(
            "rank {} does not exist: the job has {size} ranks",
            recv.from
        ),
        Some(_) => return false,
    };
    let _ = outbox.send(encode(Kind::Abort(reason)));
    true
}

/// Reads one frame (a 4-byte little-endian length and an `SpmdFrame`) from a rank or a peer
/// broker; `None` at the end of the stream or on a frame that cannot be trusted (logged, and
/// the caller drops the connection).
pub(super) async fn read_frame(
    reader: &mut (impl AsyncRead + Unpin),
    sender: &str,
) -> Option<Kind> {
    let mut header = [0u8; 4];
    reader.read_exact(&mut header).await.ok()?;
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_MESSAGE {
        tracing::warn!(
            len,
            sender,
            "an oversized SPMD frame; dropping the connection"
        );
        return None;
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await.ok()?;
    match v1::SpmdFrame::decode(Bytes::from(body)) {
        Ok(v1::SpmdFrame { kind: Some(kind) }) => Some(kind),
        Ok(_) => {
            tracing::warn!(sender, "an empty SPMD frame; dropping the connection");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, sender, "an undecodable SPMD frame; dropping the connection");
            None
        }
    }
}

/// Reads a rank's frames from its connection and hands them to `broker`, writing the
/// broker's answers back, until the rank hangs up or sends nonsense.
pub(super) async fn serve_rank(broker: &dyn RankFrames, stream: UnixStream) {
    let (mut reader, mut writer) = stream.into_split();
    let (outbox, mut frames) = mpsc::unbounded_channel::<Bytes>();
    let writing = tokio::spawn(async move {
        while let Some(frame) = frames.recv().await {
            if writer.write_all(&frame).await.is_err() {
                break;
            }
        }
    });
    while let Some(kind) = read_frame(&mut reader, "an executable").await {
        match kind {
            Kind::Send(send) => {
                let reply = broker.send(send);
                let _ = outbox.send(encode(reply));
            }
            Kind::Recv(recv) => broker.recv(recv, &outbox),
            _ => tracing::warn!("an executable sent an unexpected frame"),
        }
    }
    drop(outbox);
    let _ = writing.await;
}

impl Drop for SpmdBroker {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
