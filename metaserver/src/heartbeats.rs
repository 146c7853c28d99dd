//! Heartbeats written to the resource DB together: every heartbeat waits until its load
//! sample is committed (its reply means "recorded"), but those that arrive while a write is
//! under way share the next one, one transaction for the batch (group commit). One
//! transaction per heartbeat did not last: at 10,000 servers every 5 s, 2,000 of them a
//! second queued for the database's connections until requests timed out waiting (`ninf
//! scale`, docs/performance.md).

use tokio::sync::{mpsc, oneshot};

use crate::db::{ResourceDb, StoredLoad};

/// Heartbeats written in one transaction at most.
const BATCH: usize = 2048;

type Queued = (i64, StoredLoad, oneshot::Sender<Result<(), String>>);

/// The queue to the writer task.
pub struct HeartbeatLog {
    queue: mpsc::UnboundedSender<Queued>,
}

impl HeartbeatLog {
    /// Starts the writer task over `db`; it ends when the log is dropped.
    pub fn start(db: ResourceDb) -> HeartbeatLog {
        let (queue, mut received) = mpsc::unbounded_channel::<Queued>();
        tokio::spawn(async move {
            let mut batch: Vec<Queued> = Vec::with_capacity(BATCH);
            while received.recv_many(&mut batch, BATCH).await > 0 {
                let beats: Vec<(i64, StoredLoad)> = batch
                    .iter()
                    .map(|(server, sample, _)| (*server, *sample))
                    .collect();
                let written = db.heartbeats(&beats).await.map_err(|e| e.to_string());
                if let Err(e) = &written {
                    tracing::warn!(error = %e, heartbeats = beats.len(), "cannot record heartbeats");
                }
                for (_, _, done) in batch.drain(..) {
                    let _ = done.send(written.clone());
                }
            }
        });
        HeartbeatLog { queue }
    }

    /// Records `server`'s heartbeat with `sample`, once it is committed.
    pub async fn record(&self, server: i64, sample: StoredLoad) -> Result<(), String> {
        let (done, committed) = oneshot::channel();
        self.queue
            .send((server, sample, done))
            .map_err(|_| "the heartbeat writer stopped".to_string())?;
        committed
            .await
            .map_err(|_| "the heartbeat writer stopped".to_string())?
    }
}
