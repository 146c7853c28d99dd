//! Writes to the resource DB committed together (group commit): each write waits until it
//! is committed (a heartbeat's reply means "recorded"), but those that arrive while a write
//! is under way share the next transaction. One transaction per heartbeat did not last: at
//! 10,000 servers every 5 s, 2,000 of them a second queued for the database's connections
//! until requests timed out waiting (`ninf scale`, docs/performance.md); the servers'
//! network reports, 2,000 a second as they start, did the same to placements' tails.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::db::{DbError, ResourceDb};

type Queued<T> = (T, oneshot::Sender<Result<(), String>>);

/// The queue to one writer task, of items of type `T`.
pub struct GroupCommit<T> {
    queue: mpsc::UnboundedSender<Queued<T>>,
    what: &'static str,
}

impl<T: Send + 'static> GroupCommit<T> {
    /// Starts the writer task over `db`: it takes up to `batch` queued items at a time and
    /// writes them with `write`, in one transaction; it ends when the log is dropped.
    /// `what` names the items in the log and in errors.
    pub fn start<W, F>(db: ResourceDb, what: &'static str, batch: usize, write: W) -> Self
    where
        W: Fn(ResourceDb, Vec<T>) -> F + Send + 'static,
        F: Future<Output = Result<(), DbError>> + Send,
    {
        let (queue, mut received) = mpsc::unbounded_channel::<Queued<T>>();
        let batch = batch.max(1);
        tokio::spawn(async move {
            let mut taken: Vec<Queued<T>> = Vec::with_capacity(batch);
            while received.recv_many(&mut taken, batch).await > 0 {
                let (items, waiting): (Vec<T>, Vec<_>) = taken.drain(..).unzip();
                let count = items.len();
                let written = write(db.clone(), items).await.map_err(|e| e.to_string());
                if let Err(e) = &written {
                    tracing::warn!(error = %e, count, "cannot record {what}");
                }
                for done in waiting {
                    let _ = done.send(written.clone());
                }
            }
        });
        GroupCommit { queue, what }
    }

    /// Queues `item` to be recorded, without waiting for its commit: for writes whose loss
    /// to a failed commit costs nothing but an order (the log names the failure).
    pub fn send(&self, item: T) {
        let (done, _not_waited_for) = oneshot::channel();
        if self.queue.send((item, done)).is_err() {
            tracing::warn!("the writer of {} stopped", self.what);
        }
    }

    /// Records `item`, once it is committed.
    pub async fn record(&self, item: T) -> Result<(), String> {
        let stopped = || format!("the writer of {} stopped", self.what);
        let (done, committed) = oneshot::channel();
        self.queue.send((item, done)).map_err(|_| stopped())?;
        committed.await.map_err(|_| stopped())?
    }
}
