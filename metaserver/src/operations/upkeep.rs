//! Periodic upkeep: servers that stopped sending heartbeats are recorded as down, data
//! handles whose leases ran out are forgotten, persistent handles short of their replicas are
//! copied again, and history beyond the retention bounds is deleted; by the active
//! metaserver only.

use std::sync::Arc;
use std::time::Duration;

use crate::{Metaserver, MetaserverError, db, unix_now};

/// How often history is pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Runs the upkeep every heartbeat period until the task is aborted.
pub fn spawn(metaserver: Arc<Metaserver>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let period = Duration::from_secs_f64(metaserver.config.heartbeat_seconds.max(0.05));
        let mut ticker = tokio::time::interval(period);
        let mut last_prune = tokio::time::Instant::now();
        // Expired handles need no prompt removal (each server drops their bytes on its own
        // lease); a quarter of the lease bounds how long a dead record lingers.
        let expire_every = Duration::from_secs_f64(
            (metaserver.config.data_lease_seconds / 4.0).clamp(period.as_secs_f64(), 60.0),
        );
        let mut last_expiry: Option<tokio::time::Instant> = None;
        let (mut last_repair, mut still_short) = (tokio::time::Instant::now(), false);
        loop {
            ticker.tick().await;
            // A standby's registry is stale until it takes over: it decides nothing.
            if !metaserver.is_active() {
                continue;
            }
            if let Err(e) = metaserver.mark_down().await {
                tracing::error!(error = %e, "marking silent servers down failed");
            }
            if last_expiry.is_none_or(|at| at.elapsed() >= expire_every) {
                last_expiry = Some(tokio::time::Instant::now());
                match metaserver.expire_data().await {
                    Ok(n) if n > 0 => tracing::info!(handles = n, "data handles expired"),
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "expiring data handles failed"),
                }
            }
            // Asked for (a holder was lost), or short handles left by the last round, looked
            // at again as often as leases expire.
            let retry = still_short && last_repair.elapsed() >= expire_every;
            if metaserver.take_data_repair_wanted() || retry {
                last_repair = tokio::time::Instant::now();
                still_short = match metaserver.repair_data().await {
                    Ok(repaired) => {
                        if repaired.copies > 0 || repaired.still_short > 0 {
                            tracing::info!(
                                copies = repaired.copies,
                                still_short = repaired.still_short,
                                "data replicas repaired"
                            );
                        }
                        repaired.still_short > 0
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "repairing data replicas failed");
                        true
                    }
                };
            }
            if last_prune.elapsed() >= PRUNE_EVERY {
                last_prune = tokio::time::Instant::now();
                match metaserver.prune().await {
                    Ok(rows) if rows > 0 => tracing::info!(rows, "history pruned"),
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "pruning history failed"),
                }
            }
        }
    })
}

impl Metaserver {
    /// Periodic upkeep: records servers that stopped sending heartbeats as down.
    pub async fn mark_down(&self) -> Result<(), MetaserverError> {
        let now = unix_now();
        let newly_down: Vec<(i64, String)> = {
            let mut state = self.state();
            let silent: Vec<(i64, String)> = state
                .registry
                .servers()
                .iter()
                .filter(|s| !state.registry.is_up(s, now) && !state.down.contains(&s.id))
                .map(|s| (s.id, s.address.clone()))
                .collect();
            state.down.extend(silent.iter().map(|(id, _)| *id));
            if !silent.is_empty() {
                state.registry.changed();
            }
            let servers = state.registry.servers().len();
            let down = state.down.len().min(servers);
            self.metrics.servers(servers - down, down);
            silent
        };
        if !newly_down.is_empty() {
            // Their copies no longer count.
            self.want_data_repair();
        }
        for (id, address) in newly_down {
            tracing::warn!(server = %address, "no heartbeat: marked down");
            let message = format!(
                "no heartbeat for {} s: marked down",
                self.config.heartbeat_timeout_seconds
            );
            self.log_event("down", &address, None, message);
            self.db.set_state(id, "down").await?;
        }
        Ok(())
    }

    /// Periodic upkeep: deletes history beyond the retention bounds.
    pub async fn prune(&self) -> Result<u64, MetaserverError> {
        Ok(self
            .db
            .prune(
                db::Retention {
                    samples: Duration::from_secs_f64(self.config.retention_seconds),
                    graphs: self.config.retention_graphs,
                },
                unix_now(),
            )
            .await?)
    }
}
