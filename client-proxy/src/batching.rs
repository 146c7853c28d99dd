//! Small calls to one server that wait together for a free slot leave together, as one
//! `CallBatch`. With thousands of tiny independent tasks ready at once, each call alone pays
//! an HTTP/2 request, a gang-table admission and a slot hand-over on the server, and two
//! task wake-ups here; a batch pays them once. Calls are only batched while more of them
//! wait than there are free slots, so calls that could run side by side still do.
//!
//! The queue and the choice of how many calls leave on a slot are here; the sending is the
//! cluster's ([`crate::cluster::GrpcCluster`]).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ninf_proto::v1::{self, call_argument::Source};
use tokio::sync::{Semaphore, oneshot};
use tonic::{Code, Status};
use tracing::Instrument;

/// Calls whose request is at most this large may wait to leave in a batch.
pub(crate) const BATCHABLE_BYTES: usize = 64 << 10;

/// What a call's caller waits on.
pub(crate) type Answer = Result<v1::CallReply, Status>;

/// Whether `call` may leave in a batch: small, and reading nothing from storage (a call
/// fed from another task's output is a step of a dataflow graph, usually one that computes
/// for a while, which a batch would run after its neighbours instead of beside them).
pub(crate) fn batchable(call: &v1::CallRequest) -> bool {
    let fetches = call
        .arguments
        .iter()
        .any(|a| matches!(a.source, Some(Source::Object(_)) | Some(Source::Bulk(_))));
    !fetches && prost::Message::encoded_len(call) <= BATCHABLE_BYTES
}

/// How many of `queued` waiting calls leave on a slot just taken, when `free` other slots
/// are free: one while every waiting call has a slot of its own; otherwise an even share of
/// the queue over the slots, at most `max`.
pub(crate) fn batch_size(queued: usize, free: usize, max: usize) -> usize {
    if queued <= free + 1 {
        queued.min(1)
    } else {
        queued.div_ceil(free + 1).clamp(1, max.max(1))
    }
}

/// One call waiting for a slot, and where its answer goes.
pub(crate) struct Waiting {
    pub call: v1::CallRequest,
    pub answer: oneshot::Sender<Answer>,
    /// Its place in the queue's order, which tells its caller whether a batch took it.
    ticket: u64,
}

/// A server's calls waiting for a slot, oldest first.
#[derive(Default)]
pub(crate) struct CallQueue {
    waiting: Mutex<VecDeque<Waiting>>,
    next_ticket: AtomicU64,
}

impl CallQueue {
    /// Queues `call`; its answer comes on the receiver, from whichever batch takes it. The
    /// ticket names the call among those a batch takes.
    pub(crate) fn push(&self, call: v1::CallRequest) -> (u64, oneshot::Receiver<Answer>) {
        let (answer, receiver) = oneshot::channel();
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        ninf_proto::sync::lock(&self.waiting).push_back(Waiting {
            call,
            answer,
            ticket,
        });
        (ticket, receiver)
    }

    /// The calls that leave on a slot just taken by the caller of call `own` (see
    /// [`batch_size`]): the oldest, and its own among them when it still waits. Calls whose
    /// callers went away are dropped unsent.
    ///
    /// Its own call goes in place of the youngest of the oldest. A slot that took only older
    /// calls left its caller waiting for its answer, relying on the callers of the calls it
    /// sent to take a slot for its own. They may have their answers first, and then nobody
    /// sends it: under `ninf load` a graph's four first products waited that way for the
    /// next call to their server, which never came at the end of the run, and the load hung.
    pub(crate) fn take(&self, free: usize, max: usize, own: u64) -> Vec<Waiting> {
        let mut waiting = ninf_proto::sync::lock(&self.waiting);
        waiting.retain(|w| !w.answer.is_closed());
        let n = batch_size(waiting.len(), free, max);
        match waiting.iter().position(|w| w.ticket == own) {
            Some(i) if n > 0 && i >= n => {
                let mine = waiting.remove(i);
                let mut batch: Vec<Waiting> = waiting.drain(..n - 1).collect();
                batch.extend(mine);
                batch
            }
            _ => waiting.drain(..n).collect(),
        }
    }
}

/// Queues `call` for its server and waits for its answer. The caller that takes one of
/// the server's `slots` sends the calls that leave on it ([`CallQueue::take`], at most
/// `max`, its own among them) with `send`, on a task of its own: the batch carries other
/// graphs' calls, which must not be lost if this caller's graph is abandoned meanwhile. It
/// goes in the trace of the call that sent it.
pub(crate) async fn call_queued<S, F>(
    queue: &CallQueue,
    slots: &Arc<Semaphore>,
    max: usize,
    call: v1::CallRequest,
    send: S,
) -> Answer
where
    S: FnOnce(Vec<Waiting>) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let (ticket, mut answer) = queue.push(call);
    let ended_without = |_| Err(Status::internal("the call's batch ended without it"));
    // A call that another caller's batch took is answered without a slot of its own.
    // Waiting for one first held its answer back until the queue had drained: a slot frees
    // once per batch, and each goes to the oldest waiting caller. Of 10,000 tiny calls, a
    // tenth had come back when 90% of the graph's time had passed.
    let slot = tokio::select! {
        biased;
        answered = &mut answer => return answered.unwrap_or_else(ended_without),
        slot = slots.clone().acquire_owned() => {
            slot.map_err(|_| Status::internal("the server's call slots are closed"))?
        }
    };
    let batch = queue.take(slots.available_permits(), max, ticket);
    if batch.is_empty() {
        // Its call left in a batch still out: the slot is another caller's to take.
        drop(slot);
    } else {
        let sending = send(batch);
        tokio::spawn(
            async move {
                sending.await;
                drop(slot);
            }
            .in_current_span(),
        );
    }
    answer.await.unwrap_or_else(ended_without)
}

/// Hands each call of a batch its answer: the server's, in order, or the batch's failure.
pub(crate) fn answer_all(
    answers: Vec<oneshot::Sender<Answer>>,
    reply: Result<v1::CallBatchReply, Status>,
) {
    let results = match reply {
        Ok(reply) if reply.results.len() == answers.len() => reply.results,
        failed => {
            let status = failed.map_or_else(
                |status| status,
                |reply| {
                    Status::internal(format!(
                        "the server answered {} calls of a batch of {}",
                        reply.results.len(),
                        answers.len()
                    ))
                },
            );
            for answer in answers {
                let _ = answer.send(Err(status.clone()));
            }
            return;
        }
    };
    for (answer, result) in answers.into_iter().zip(results) {
        let _ = answer.send(match result.result {
            Some(v1::call_result::Result::Reply(reply)) => Ok(reply),
            Some(v1::call_result::Result::Error(error)) => {
                Err(Status::new(Code::from_i32(error.code), error.message))
            }
            None => Err(Status::internal(
                "the server sent an empty answer in a batch",
            )),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> v1::CallRequest {
        v1::CallRequest {
            function: "noop".into(),
            ..Default::default()
        }
    }

    #[test]
    fn calls_leave_alone_while_there_are_slots_for_all_and_share_the_slots_when_not() {
        assert_eq!(batch_size(0, 3, 64), 0);
        assert_eq!(batch_size(1, 0, 64), 1);
        // Four waiting, three other slots free: each gets its own.
        assert_eq!(batch_size(4, 3, 64), 1);
        // Ten waiting, one other slot free: half leave now, the rest on the other slot.
        assert_eq!(batch_size(10, 1, 64), 5);
        assert_eq!(batch_size(5_000, 0, 64), 64);
        // A limit of 1 (or 0) sends every call alone.
        assert_eq!(batch_size(5_000, 0, 1), 1);
        assert_eq!(batch_size(5_000, 0, 0), 1);
    }

    #[test]
    fn a_queue_hands_out_its_oldest_calls_and_drops_those_whose_callers_left() {
        let queue = CallQueue::default();
        let mut receivers: Vec<_> = (0..5)
            .map(|i| {
                let mut call = noop();
                call.owner = format!("g{i}");
                queue.push(call).1
            })
            .collect();
        receivers.remove(1);
        let batch = queue.take(0, 3, 3);
        let owners: Vec<_> = batch.iter().map(|w| w.call.owner.as_str()).collect();
        assert_eq!(owners, ["g0", "g2", "g3"]);
        assert_eq!(queue.take(0, 3, 4).len(), 1);
        assert!(queue.take(0, 3, 4).is_empty());
    }

    #[test]
    fn a_slot_takes_its_callers_own_call_in_place_of_the_youngest_of_the_oldest() {
        let queue = CallQueue::default();
        let tickets: Vec<u64> = (0..5)
            .map(|i| {
                let mut call = noop();
                call.owner = format!("g{i}");
                let (ticket, receiver) = queue.push(call);
                std::mem::forget(receiver);
                ticket
            })
            .collect();
        let owners = |batch: Vec<Waiting>| -> Vec<String> {
            batch.into_iter().map(|w| w.call.owner).collect()
        };
        // Two leave: the oldest and the caller's own, the youngest.
        assert_eq!(owners(queue.take(0, 2, tickets[4])), ["g0", "g4"]);
        // Its own among the oldest: the oldest, in order.
        assert_eq!(owners(queue.take(0, 2, tickets[2])), ["g1", "g2"]);
        // Its own already gone (another batch took it): the oldest.
        assert_eq!(owners(queue.take(0, 1, tickets[0])), ["g3"]);
        assert!(queue.take(0, 1, tickets[3]).is_empty());
    }

    #[test]
    fn only_small_calls_reading_nothing_from_storage_are_batched() {
        assert!(batchable(&noop()));
        let mut fed = noop();
        fed.arguments.push(v1::CallArgument {
            source: Some(Source::Object(v1::ObjectRef::default())),
        });
        assert!(!batchable(&fed));
        let mut large = noop();
        large.arguments.push(v1::CallArgument {
            source: Some(Source::Value(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::Array(v1::Array {
                    data: vec![0u8; BATCHABLE_BYTES].into(),
                    ..Default::default()
                })),
            })),
        });
        assert!(!batchable(&large));
    }

    type Sending = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
    /// Each batch sent (its calls' owners), and what lets it answer.
    type Sent = tokio::sync::mpsc::UnboundedReceiver<(Vec<String>, oneshot::Sender<()>)>;

    /// A sender standing in for the server: each batch waits until the test lets it
    /// answer, and every call's answer carries its `owner` back as its status.
    fn gated_sender() -> (impl Fn(Vec<Waiting>) -> Sending + Clone, Sent) {
        let (batches, sent) = tokio::sync::mpsc::unbounded_channel();
        let send = move |batch: Vec<Waiting>| {
            let batches = batches.clone();
            let sending: Sending = Box::pin(async move {
                let owners = batch.iter().map(|w| w.call.owner.clone()).collect();
                let (release, released) = oneshot::channel();
                let _ = batches.send((owners, release));
                let _ = released.await;
                for w in batch {
                    let status = w.call.owner.len() as i64;
                    let _ = w.answer.send(Ok(v1::CallReply {
                        status,
                        ..Default::default()
                    }));
                }
            });
            sending
        };
        (send, sent)
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_another_callers_batch_took_is_answered_without_waiting_for_a_slot() {
        let queue = Arc::new(CallQueue::default());
        let slots = Arc::new(Semaphore::new(1));
        let (send, mut sent) = gated_sender();
        let caller = |owner: &str| {
            let (queue, slots, send) = (queue.clone(), slots.clone(), send.clone());
            let mut call = noop();
            call.owner = owner.to_string();
            tokio::spawn(async move { call_queued(&queue, &slots, 64, call, send).await })
        };
        let settle = || async {
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        };
        // One slot: the first call takes it alone; three more wait.
        let a = caller("a");
        let (first, release_first) = sent.recv().await.unwrap();
        assert_eq!(first, ["a"]);
        let (b, c, d) = (caller("bb"), caller("ccc"), caller("dddd"));
        settle().await;
        release_first.send(()).unwrap();
        assert_eq!(a.await.unwrap().unwrap().status, 1);
        // The slot freed: its next holder sends all three waiting calls at once.
        let (second, release_second) = sent.recv().await.unwrap();
        assert_eq!(second, ["bb", "ccc", "dddd"]);
        let (e, f) = (caller("eeeee"), caller("ffffff"));
        settle().await;
        release_second.send(()).unwrap();
        // The slot goes to one more caller, who sends the two calls that came since.
        let (third, release_third) = sent.recv().await.unwrap();
        assert_eq!(third, ["eeeee", "ffffff"]);
        // While that batch is out, the calls of the one before have their answers: none
        // of them waits for the slot the third batch holds.
        for (caller, status) in [(b, 2), (c, 3), (d, 4)] {
            let answer = tokio::time::timeout(std::time::Duration::from_secs(60), caller)
                .await
                .expect("a call answered in a batch waited for a slot");
            assert_eq!(answer.unwrap().unwrap().status, status);
        }
        release_third.send(()).unwrap();
        assert_eq!(e.await.unwrap().unwrap().status, 5);
        assert_eq!(f.await.unwrap().unwrap().status, 6);
        assert_eq!(slots.available_permits(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_whose_slot_sends_one_call_sends_its_own_not_an_older_one() {
        let queue = Arc::new(CallQueue::default());
        let slots = Arc::new(Semaphore::new(1));
        let (send, mut sent) = gated_sender();
        // An older call whose caller will return with its answer without taking a slot
        // (one woken late on a busy machine, after another batch had answered it).
        let mut older = noop();
        older.owner = "x".into();
        let (older_ticket, _older_answer) = queue.push(older);
        let mut call = noop();
        call.owner = "yy".into();
        let caller = {
            let (queue, slots) = (queue.clone(), slots.clone());
            tokio::spawn(async move { call_queued(&queue, &slots, 1, call, send).await })
        };
        // One call leaves per slot: the caller's own. Had the slot taken the older call,
        // nobody would be left to send this one.
        let (first, release_first) =
            tokio::time::timeout(std::time::Duration::from_secs(60), sent.recv())
                .await
                .expect("nothing was sent")
                .unwrap();
        assert_eq!(first, ["yy"]);
        release_first.send(()).unwrap();
        assert_eq!(caller.await.unwrap().unwrap().status, 2);
        assert_eq!(slots.available_permits(), 1);
        // The older call still waits for its own caller's slot.
        let left: Vec<String> = queue
            .take(0, 1, older_ticket)
            .into_iter()
            .map(|w| w.call.owner)
            .collect();
        assert_eq!(left, ["x"]);
    }

    #[tokio::test]
    async fn each_call_of_a_batch_gets_its_own_answer_and_a_failed_batch_fails_them_all() {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..2).map(|_| oneshot::channel()).unzip();
        let reply = v1::CallBatchReply {
            results: vec![
                v1::CallResult {
                    result: Some(v1::call_result::Result::Reply(v1::CallReply {
                        status: 7,
                        ..Default::default()
                    })),
                },
                v1::CallResult {
                    result: Some(v1::call_result::Result::Error(v1::CallError {
                        code: Code::InvalidArgument as i32,
                        message: "`noop` takes 1 arguments, got 0".into(),
                    })),
                },
            ],
        };
        answer_all(senders, Ok(reply));
        let mut answers = Vec::new();
        for r in receivers {
            answers.push(r.await.unwrap());
        }
        assert_eq!(answers[0].as_ref().unwrap().status, 7);
        let error = answers[1].as_ref().unwrap_err();
        assert_eq!(error.code(), Code::InvalidArgument);
        assert_eq!(error.message(), "`noop` takes 1 arguments, got 0");

        let (senders, receivers): (Vec<_>, Vec<_>) = (0..2).map(|_| oneshot::channel()).unzip();
        answer_all(senders, Err(Status::unavailable("connection refused")));
        for r in receivers {
            assert_eq!(r.await.unwrap().unwrap_err().code(), Code::Unavailable);
        }
    }
}
