//! A compute server leaving on purpose (its batch job's end is near, or it was told to stop):
//! while it drains it gets no new tasks; once gone it is down at once, without waiting for
//! its heartbeats to time out.

use ninf_proto::v1;

use crate::{Metaserver, MetaserverError};

impl Metaserver {
    /// A server drains, or is gone.
    pub async fn leave(&self, request: v1::LeaveRequest) -> Result<(), MetaserverError> {
        let id = {
            let mut state = self.state();
            if !state.registry.leave(&request.address, request.draining) {
                return Err(MetaserverError::UnknownServer(request.address));
            }
            let id = state.registry.get(&request.address).map_or(0, |s| s.id);
            if !request.draining {
                state.down.insert(id);
            }
            id
        };
        let reason = if request.reason.is_empty() {
            "asked to stop".to_string()
        } else {
            request.reason.clone()
        };
        let (kind, message) = if request.draining {
            ("draining", format!("draining ({reason}): no new tasks"))
        } else {
            ("left", format!("left ({reason})"))
        };
        tracing::info!(server = %request.address, %reason, draining = request.draining, "server leaving");
        self.log_event(kind, &request.address, None, message);
        // Its copies of persistent data are copied away while it can still be read.
        self.want_data_repair();
        if !request.draining {
            self.db.set_state(id, "down").await?;
        }
        Ok(())
    }
}
