//! Calls that outlive their caller. A call a proxy names with a key (`CallRequest.call_key`,
//! a journaled transaction's task) runs on its own, not cancelled when the proxy goes away:
//! a proxy killed and restarted on its journal sends the task again with the same key and
//! is answered by the run already under way, or by its result if it ended meanwhile,
//! instead of running it again. A result is kept only when nobody was waiting for it, for
//! as long as the storage lease, and the owner's deletion (the transaction ended or was
//! given up) cancels its calls still running and forgets their results.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ninf_proto::v1;
use tokio::sync::watch;
use tonic::Status;

pub type Outcome = Result<v1::CallReply, Status>;

enum Entry {
    Running {
        owner: String,
        result: watch::Sender<Option<Outcome>>,
        task: tokio::task::AbortHandle,
    },
    /// Ended with nobody waiting: kept for the caller's return.
    Ended {
        owner: String,
        outcome: Outcome,
        at: Instant,
    },
}

/// The keyed calls of one server.
pub struct Detached {
    calls: Mutex<HashMap<String, Entry>>,
    /// How long an ended call's result waits for its caller.
    keep: Duration,
}

/// How a keyed call was answered.
pub struct Answer {
    pub outcome: Outcome,
    /// By a run an earlier request with the same key started (the caller came back).
    pub rejoined: bool,
}

impl Detached {
    pub fn new(keep: Duration) -> Detached {
        Detached {
            calls: Mutex::new(HashMap::new()),
            keep,
        }
    }

    /// Answers the call `key` of `owner`: by its run if one is under way or ended unawaited,
    /// else by starting `work`, which goes on if this request is dropped.
    pub async fn call(
        self: &std::sync::Arc<Self>,
        key: String,
        owner: String,
        work: impl Future<Output = Outcome> + Send + 'static,
    ) -> Answer {
        let (mut result, rejoined) = {
            let mut calls = ninf_proto::sync::lock(&self.calls);
            let keep = self.keep;
            calls.retain(|_, e| !matches!(e, Entry::Ended { at, .. } if at.elapsed() > keep));
            match calls.remove(&key) {
                Some(Entry::Ended { outcome, .. }) => {
                    return Answer {
                        outcome,
                        rejoined: true,
                    };
                }
                Some(Entry::Running {
                    owner,
                    result,
                    task,
                }) => {
                    let receiver = result.subscribe();
                    let running = Entry::Running {
                        owner,
                        result,
                        task,
                    };
                    calls.insert(key, running);
                    (receiver, true)
                }
                None => {
                    let (sender, receiver) = watch::channel(None);
                    let this = self.clone();
                    let finished = key.clone();
                    // Spawned under the lock, so that it cannot end before it is recorded.
                    let task = tokio::spawn(async move {
                        let outcome = work.await;
                        this.finish(&finished, outcome);
                    });
                    calls.insert(
                        key,
                        Entry::Running {
                            owner,
                            result: sender,
                            task: task.abort_handle(),
                        },
                    );
                    (receiver, false)
                }
            }
        };
        let outcome = match result.wait_for(Option::is_some).await {
            Ok(value) => value.clone().unwrap_or_else(|| Err(cancelled())),
            Err(_) => Err(cancelled()),
        };
        Answer { outcome, rejoined }
    }

    /// A run ended: its waiting callers get the outcome, or it is kept for the one to come.
    fn finish(&self, key: &str, outcome: Outcome) {
        let mut calls = ninf_proto::sync::lock(&self.calls);
        let Some(Entry::Running { owner, result, .. }) = calls.remove(key) else {
            return;
        };
        if result.receiver_count() > 0 {
            result.send_replace(Some(outcome));
        } else {
            calls.insert(
                key.to_string(),
                Entry::Ended {
                    owner,
                    outcome,
                    at: Instant::now(),
                },
            );
        }
    }

    /// Cancels `owner`'s calls still running and forgets its kept results.
    pub fn forget_owner(&self, owner: &str) -> usize {
        let mut calls = ninf_proto::sync::lock(&self.calls);
        let before = calls.len();
        calls.retain(|_, entry| match entry {
            Entry::Running { owner: o, task, .. } if o == owner => {
                task.abort();
                false
            }
            Entry::Ended { owner: o, .. } => o != owner,
            Entry::Running { .. } => true,
        });
        before - calls.len()
    }

    /// Keyed calls running or ended unawaited now.
    pub fn len(&self) -> usize {
        ninf_proto::sync::lock(&self.calls).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn cancelled() -> Status {
    Status::cancelled("the call was cancelled: its owner was deleted")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn reply(status: i64) -> v1::CallReply {
        v1::CallReply {
            status,
            ..Default::default()
        }
    }

    /// A call that counts its runs and ends when `release` is notified.
    fn work(
        runs: &Arc<AtomicUsize>,
        release: &Arc<tokio::sync::Notify>,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        let (runs, release) = (runs.clone(), release.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            release.notified().await;
            Ok(reply(7))
        }
    }

    #[tokio::test]
    async fn a_caller_that_leaves_and_comes_back_gets_the_run_under_way_not_a_new_one() {
        let detached = Arc::new(Detached::new(Duration::from_secs(60)));
        let (runs, release) = (Arc::default(), Arc::new(tokio::sync::Notify::new()));
        let first = tokio::spawn({
            let d = detached.clone();
            let w = work(&runs, &release);
            async move { d.call("g/0".into(), "g".into(), w).await }
        });
        tokio::task::yield_now().await;
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        first.abort(); // the proxy went away
        let _ = first.await;
        assert_eq!(detached.len(), 1, "the run goes on");
        let again = tokio::spawn({
            let d = detached.clone();
            let w = work(&runs, &release);
            async move { d.call("g/0".into(), "g".into(), w).await }
        });
        tokio::task::yield_now().await;
        release.notify_waiters();
        let answer = again.await.unwrap();
        assert!(answer.rejoined);
        assert_eq!(answer.outcome.unwrap().status, 7);
        assert_eq!(runs.load(Ordering::SeqCst), 1, "run once");
        assert!(detached.is_empty(), "answered, not kept");
    }

    #[tokio::test]
    async fn a_result_that_ended_unawaited_is_kept_for_the_caller_and_an_owner_deletion_drops_it() {
        let detached = Arc::new(Detached::new(Duration::from_secs(60)));
        let (runs, release) = (Arc::default(), Arc::new(tokio::sync::Notify::new()));
        for owner in ["g", "h"] {
            let d = detached.clone();
            let w = work(&runs, &release);
            let caller =
                tokio::spawn(async move { d.call(format!("{owner}/0"), owner.into(), w).await });
            while runs.load(Ordering::SeqCst) < if owner == "g" { 1 } else { 2 } {
                tokio::task::yield_now().await;
            }
            caller.abort();
            let _ = caller.await;
        }
        release.notify_waiters();
        while ninf_proto::sync::lock(&detached.calls)
            .values()
            .any(|e| matches!(e, Entry::Running { .. }))
        {
            tokio::task::yield_now().await;
        }
        assert_eq!(detached.forget_owner("h"), 1);
        let never = async { Err(Status::internal("must not run")) };
        let answer = detached.call("g/0".into(), "g".into(), never).await;
        assert!(answer.rejoined);
        assert_eq!(answer.outcome.unwrap().status, 7);
        assert!(detached.is_empty());
    }

    #[tokio::test]
    async fn deleting_the_owner_cancels_its_calls_still_running() {
        let detached = Arc::new(Detached::new(Duration::from_secs(60)));
        let (runs, release) = (Arc::default(), Arc::new(tokio::sync::Notify::new()));
        let caller = tokio::spawn({
            let d = detached.clone();
            let w = work(&runs, &release);
            async move { d.call("g/0".into(), "g".into(), w).await }
        });
        while runs.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(detached.forget_owner("g"), 1);
        let answer = caller.await.unwrap();
        assert_eq!(answer.outcome.unwrap_err().code(), tonic::Code::Cancelled);
        assert!(detached.is_empty());
    }
}
