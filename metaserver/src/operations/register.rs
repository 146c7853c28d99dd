//! Step 0: a compute server registers its address, benchmark figures and routines; a
//! server that registers again (a restart) keeps its row and comes back up.

use ninf_proto::v1;

use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    /// Step 0: a compute server registers.
    pub async fn register(
        &self,
        request: v1::RegisterRequest,
    ) -> Result<v1::RegisterReply, MetaserverError> {
        if request.address.is_empty() {
            return Err(MetaserverError::BadRequest(
                "a registration needs the server's address".into(),
            ));
        }
        let info = request.info.unwrap_or_default();
        let routines: Vec<v1::FunctionInterface> = request
            .modules
            .iter()
            .flat_map(|m| m.functions.iter().cloned())
            .collect();
        let now = unix_now();
        let id = self
            .db
            .register(&request.address, &info, &routines, now)
            .await?;
        let rejected = {
            let mut state = self.state();
            state.down.remove(&id);
            state
                .registry
                .register(id, &request.address, info.clone(), &routines, now)
        };
        for (routine, reason) in &rejected {
            tracing::warn!(server = %request.address, %routine, %reason, "routine refused");
        }
        tracing::info!(
            server = %request.address,
            id,
            routines = routines.len() - rejected.len(),
            mflops = info.mflops,
            processors = info.processors,
            "server registered"
        );
        Ok(v1::RegisterReply {
            server_id: u64::try_from(id).unwrap_or(0),
            heartbeat_seconds: self.config.heartbeat_seconds,
            network_seconds: self.config.network_seconds,
        })
    }
}
