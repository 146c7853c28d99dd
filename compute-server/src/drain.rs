//! Leaving on purpose: when its batch job's end nears (Slurm's warning signal, or the
//! walltime it registered) or it is told to stop, a server admits no new calls (they are
//! refused UNAVAILABLE, and the proxy runs them elsewhere), tells the metaserver it drains,
//! finishes the calls it has, tells the metaserver it is gone, and stops.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ninf_proto::net::ServeError;

use crate::Running;

/// How long each word to the metaserver may take.
const LEAVE_PATIENCE: Duration = Duration::from_secs(1);

/// How often the server looks whether its calls are done.
const POLL: Duration = Duration::from_millis(100);

impl Running {
    /// Drains for at most `limit`, then stops; `reason` is for people ("SIGTERM").
    pub async fn drain_and_stop(self, reason: &str, limit: Duration) -> Result<(), ServeError> {
        self.state.draining.store(true, Ordering::SeqCst);
        tracing::info!(%reason, ?limit, "draining: no new calls");
        if let Some(metaserver) = &self.metaserver {
            crate::registration::leave(&self.state, metaserver, true, reason, LEAVE_PATIENCE).await;
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let load = self.state.sample_load();
            if load.running_jobs + load.queued_jobs == 0 {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    running = load.running_jobs,
                    queued = load.queued_jobs,
                    "drain time is up; stopping with calls unfinished"
                );
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        self.silence();
        if let Some(metaserver) = &self.metaserver {
            crate::registration::leave(&self.state, metaserver, false, reason, LEAVE_PATIENCE)
                .await;
        }
        tracing::info!("drained; stopping");
        self.stop().await
    }
}
