//! One parallel job's messages between its ranks, as a broker holds them: those sent and not
//! yet received, queued by (from, to) so that each pair keeps its order, and the ranks
//! blocked in a receive. The server's broker and every node's broker keep one per job.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use ninf_proto::v1::spmd_frame::Kind;

use ninf_proto::v1;
use prost::Message;
use tokio::sync::mpsc;

/// Frames on their way to one rank's connection.
pub(super) type Outbox = mpsc::UnboundedSender<Bytes>;

/// A frame for a rank's connection: its length, then the message.
pub(super) fn encode(kind: Kind) -> Bytes {
    let body = v1::SpmdFrame { kind: Some(kind) }.encode_to_vec();
    let mut framed = Vec::with_capacity(body.len() + 4);
    framed.extend_from_slice(&(body.len() as u32).to_le_bytes());
    framed.extend_from_slice(&body);
    Bytes::from(framed)
}

pub(super) fn deliver(outbox: &Outbox, from: u32, data: Bytes) {
    let _ = outbox.send(encode(Kind::Deliver(v1::SpmdDeliver { from, data })));
}

/// A rank blocked in a receive from `from`.
struct Waiting {
    from: u32,
    outbox: Outbox,
}

#[derive(Default)]
pub(super) struct Mailboxes {
    queues: HashMap<(u32, u32), VecDeque<Bytes>>,
    waiting: HashMap<u32, Waiting>,
}

impl Mailboxes {
    /// A message from `from` to `to`: handed over at once if `to` waits for it (`true`),
    /// else queued behind the pair's earlier ones.
    pub fn put(&mut self, from: u32, to: u32, data: Bytes) -> bool {
        if self.waiting.get(&to).is_some_and(|w| w.from == from)
            && let Some(waiting) = self.waiting.remove(&to)
        {
            deliver(&waiting.outbox, from, data);
            return true;
        }
        self.queues.entry((from, to)).or_default().push_back(data);
        false
    }

    /// `rank` receives from `from`: the pair's first queued message now (`true`), or it
    /// waits for the next one.
    pub fn take(&mut self, rank: u32, from: u32, outbox: &Outbox) -> bool {
        match self
            .queues
            .get_mut(&(from, rank))
            .and_then(VecDeque::pop_front)
        {
            Some(data) => {
                deliver(outbox, from, data);
                true
            }
            None => {
                self.waiting.insert(
                    rank,
                    Waiting {
                        from,
                        outbox: outbox.clone(),
                    },
                );
                false
            }
        }
    }

    /// `rank` no longer waits (its call returned).
    pub fn stop_waiting(&mut self, rank: u32) {
        self.waiting.remove(&rank);
    }

    /// Who waits for whom: (rank, from).
    pub fn waits(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.waiting.iter().map(|(&rank, w)| (rank, w.from))
    }

    pub fn waiting_count(&self) -> usize {
        self.waiting.len()
    }

    /// Whether a message from `from` to `to` is queued.
    pub fn has_queued(&self, from: u32, to: u32) -> bool {
        self.queues
            .get(&(from, to))
            .is_some_and(|queue| !queue.is_empty())
    }

    /// The job ended: every waiting rank is told `reason`; queued messages are dropped.
    pub fn abort(self, reason: &str) {
        for (_, waiting) in self.waiting {
            let _ = waiting.outbox.send(encode(Kind::Abort(reason.to_string())));
        }
    }
}
