//! Deleting what a server may hold that nothing records any more: a graph's intermediates,
//! a data handle's dropped copy, or whatever a put or a copy that failed midway may have
//! stored. A server that cannot be reached now (cut off, restarting) is asked again in the
//! background with back-off, for about as long as its lease would keep the bytes anyway:
//! a request whose reply was lost may well have done its work.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ninf_proto::v1;
use tonic::Status;

use crate::cluster::Cluster;
use crate::{Proxy, recovery};

/// Times a deletion that failed is tried again in the background (about 85 s in all).
const DELETE_ATTEMPTS: u32 = 12;

/// Something to delete from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Leftover {
    /// Every object `owner` holds on `server`.
    Owner { server: String, owner: String },
    /// One stored object.
    Object(v1::ObjectRef),
}

impl Leftover {
    pub(crate) fn owner(server: &str, owner: &str) -> Leftover {
        Leftover::Owner {
            server: server.to_string(),
            owner: owner.to_string(),
        }
    }

    fn server(&self) -> &str {
        match self {
            Leftover::Owner { server, .. } => server,
            Leftover::Object(object) => &object.server,
        }
    }

    async fn delete(&self, cluster: &dyn Cluster) -> Result<(), Status> {
        match self {
            Leftover::Owner { server, owner } => cluster.delete_owner(server, owner).await,
            Leftover::Object(object) => cluster.delete(object).await,
        }
    }
}

impl fmt::Display for Leftover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Leftover::Owner { server, owner } => write!(f, "what {owner} stored on {server}"),
            Leftover::Object(o) => write!(f, "object {} on {}", o.object_id, o.server),
        }
    }
}

/// Whether a deletion's error says there is nothing left to delete: gone already (its
/// server restarted, or its lease ran out), or a cluster that keeps no data.
fn nothing_left(status: &Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::NotFound | tonic::Code::Unimplemented
    )
}

impl Proxy {
    /// Deletes `leftover` now, or, when its server cannot be reached, in the background.
    pub(crate) async fn delete_leftover(&self, leftover: Leftover) {
        match leftover.delete(self.cluster.as_ref()).await {
            Ok(()) => {}
            Err(status) if nothing_left(&status) => {}
            Err(status) => {
                tracing::warn!(server = %leftover.server(), error = %status.message(), "cannot delete {leftover}; asking again in the background");
                self.delete_leftover_later(leftover);
            }
        }
    }

    /// Deletes `leftover` in the background, with back-off: its server just failed a
    /// request, which may have stored it all the same.
    pub(crate) fn delete_leftover_later(&self, leftover: Leftover) {
        let cluster: Arc<dyn Cluster> = self.cluster.clone();
        tokio::spawn(async move {
            for attempt in 1..=DELETE_ATTEMPTS {
                let wait =
                    recovery::backoff(attempt, Duration::from_millis(500), Duration::from_secs(10));
                tokio::time::sleep(wait).await;
                match leftover.delete(cluster.as_ref()).await {
                    Ok(()) => {
                        tracing::info!(attempt, "deleted {leftover} at last");
                        return;
                    }
                    Err(status) if nothing_left(&status) => return,
                    Err(_) => {}
                }
            }
            tracing::warn!("cannot delete {leftover}; its lease will");
        });
    }
}
