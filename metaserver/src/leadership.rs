//! Which of several metaservers sharing one PostgreSQL schedules. Exactly one is active: the
//! one holding a session-level advisory lock on the resource DB; the others are standbys
//! that refuse requests as UNAVAILABLE (compute servers and proxies move on down their list)
//! and try for the lock a few times a second.
//!
//! Why a lock and not several active metaservers: each keeps the registry and the
//! placements it made in memory, and a schedule must see the placements of the one before
//! it; two at once would each place work on servers the other has just filled. Why an
//! advisory lock and not a lease row: PostgreSQL releases it the moment the holder's session
//! ends (its process killed, its host gone once TCP notices), with no clock to compare
//! between hosts; the holder checks its session every poll and steps down when it is lost.
//!
//! With SQLite the one metaserver is always active.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{AnyConnection, Connection, Row};
use tokio_util::sync::CancellationToken;

use crate::Metaserver;

/// The advisory lock's key: "ninf" in ASCII.
const LOCK_KEY: i64 = 0x6e69_6e66;

/// How often a standby tries for the lock, and the active one checks it still holds it.
const POLL: Duration = Duration::from_millis(200);

/// Longest a check may take before the session counts as lost.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Holds or waits for the lock until `stop`, promoting `metaserver` when it is won and
/// demoting it when it is lost.
pub async fn run(metaserver: Arc<Metaserver>, url: String, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let mut session = match AnyConnection::connect(&url).await {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(error = %e, "cannot reach the resource DB for the lock");
                pause(&stop, Duration::from_secs(1)).await;
                continue;
            }
        };
        hold_while_alive(&metaserver, &mut session, &stop).await;
        metaserver.demote();
        let _ = session.close().await;
    }
}

/// Waits for the lock on `session` and holds it, until the session fails or `stop`.
async fn hold_while_alive(
    metaserver: &Metaserver,
    session: &mut AnyConnection,
    stop: &CancellationToken,
) {
    loop {
        if stop.is_cancelled() {
            return;
        }
        let check = if metaserver.is_active() {
            ping(session).await
        } else {
            try_lock(session).await
        };
        match check {
            Ok(true) if !metaserver.is_active() => {
                if let Err(e) = metaserver.promote().await {
                    tracing::error!(error = %e, "won the lock but cannot read the resource DB");
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "lost the resource DB session");
                return;
            }
        }
        pause(stop, POLL).await;
    }
}

async fn try_lock(session: &mut AnyConnection) -> Result<bool, String> {
    let query = sqlx::query("SELECT pg_try_advisory_lock($1)").bind(LOCK_KEY);
    match tokio::time::timeout(CHECK_TIMEOUT, query.fetch_one(&mut *session)).await {
        Ok(Ok(row)) => row.try_get::<bool, _>(0).map_err(|e| e.to_string()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the lock query timed out".into()),
    }
}

async fn ping(session: &mut AnyConnection) -> Result<bool, String> {
    match tokio::time::timeout(CHECK_TIMEOUT, session.ping()).await {
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the session check timed out".into()),
    }
}

async fn pause(stop: &CancellationToken, duration: Duration) {
    tokio::select! {
        () = stop.cancelled() => {}
        () = tokio::time::sleep(duration) => {}
    }
}
