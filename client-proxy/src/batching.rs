//! Small calls to one server that wait together for a free slot leave together, as one
//! `CallBatch`. With thousands of tiny independent tasks ready at once, each call alone pays
//! an HTTP/2 request, a gang-table admission and a slot hand-over on the server, and two
//! task wake-ups here; a batch pays them once. Calls are only batched while more of them
//! wait than there are free slots, so calls that could run side by side still do.
//!
//! The queue and the choice of how many calls leave on a slot are here; the sending is the
//! cluster's ([`crate::cluster::GrpcCluster`]).

use std::collections::VecDeque;
use std::sync::Mutex;

use ninf_proto::v1::{self, call_argument::Source};
use tokio::sync::oneshot;
use tonic::{Code, Status};

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
}

/// A server's calls waiting for a slot, oldest first.
#[derive(Default)]
pub(crate) struct CallQueue {
    waiting: Mutex<VecDeque<Waiting>>,
}

impl CallQueue {
    /// Queues `call`; its answer comes on the receiver, from whichever batch takes it.
    pub(crate) fn push(&self, call: v1::CallRequest) -> oneshot::Receiver<Answer> {
        let (answer, receiver) = oneshot::channel();
        ninf_proto::sync::lock(&self.waiting).push_back(Waiting { call, answer });
        receiver
    }

    /// The calls that leave on a slot just taken (see [`batch_size`]), oldest first. Calls
    /// whose callers went away are dropped unsent.
    pub(crate) fn take(&self, free: usize, max: usize) -> Vec<Waiting> {
        let mut waiting = ninf_proto::sync::lock(&self.waiting);
        waiting.retain(|w| !w.answer.is_closed());
        let n = batch_size(waiting.len(), free, max);
        waiting.drain(..n).collect()
    }
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
                queue.push(call)
            })
            .collect();
        receivers.remove(1);
        let batch = queue.take(0, 3);
        let owners: Vec<_> = batch.iter().map(|w| w.call.owner.as_str()).collect();
        assert_eq!(owners, ["g0", "g2", "g3"]);
        assert_eq!(queue.take(0, 3).len(), 1);
        assert!(queue.take(0, 3).is_empty());
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
