//! Step 1: a compute server's periodic heartbeat with a load sample; the reply names the
//! peers it should measure the network to.

use ninf_proto::v1;

use crate::db::StoredLoad;
use crate::{Metaserver, MetaserverError, registry, unix_now};

/// Peers of its own site, and other sites' representatives, that a heartbeat's reply names
/// at most each, for the server to measure its paths to ([`crate::sites`]). Every server
/// measuring every other was N² paths (10⁸ at 10,000 servers), and a reply naming them all
/// cost the metaserver O(N) under its lock for every heartbeat.
pub const PEERS_PER_HEARTBEAT: usize = 16;

impl Metaserver {
    /// Step 1: a heartbeat with a load sample.
    pub async fn heartbeat(
        &self,
        request: v1::HeartbeatRequest,
    ) -> Result<v1::HeartbeatReply, MetaserverError> {
        let now = unix_now();
        let (id, peers, was_down) = {
            let mut state = self.state();
            if !state
                .registry
                .heartbeat(&request.address, request.load.as_ref(), now)
            {
                return Ok(v1::HeartbeatReply {
                    registered: false,
                    peers: Vec::new(),
                });
            }
            let id = state.registry.get(&request.address).map_or(0, |s| s.id);
            let was_down = state.down.remove(&id);
            // The window moves on every ten seconds.
            let turn = (now.max(0.0) / 10.0) as usize;
            let peers =
                state
                    .registry
                    .peers_to_probe(&request.address, now, PEERS_PER_HEARTBEAT, turn);
            (id, peers, was_down)
        };
        if was_down {
            tracing::info!(server = %request.address, "server is back up");
            self.log_event("up", &request.address, None, "heartbeats again".into());
        }
        let load = request.load.unwrap_or_default();
        self.heartbeat_log
            .record((
                id,
                StoredLoad {
                    time: now,
                    load: registry::demand(&load),
                    load_average: load.load_average_1m,
                    free_memory_bytes: load.free_memory_bytes,
                    stored_bytes: load.stored_bytes,
                },
            ))
            .await
            .map_err(MetaserverError::Recording)?;
        Ok(v1::HeartbeatReply {
            registered: true,
            peers,
        })
    }
}
