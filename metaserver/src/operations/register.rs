//! Step 0: a compute server registers its address, benchmark figures and routines; a
//! server that registers again (a restart) keeps its row and comes back up.

use ninf_proto::v1;

use crate::{Metaserver, MetaserverError, events, unix_now};

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
        let turn = self
            .registering
            .acquire()
            .await
            .map_err(|_| MetaserverError::Recording("the metaserver is stopping".into()))?;
        let now = unix_now();
        let previous = self.db.server_instance(&request.address).await?;
        let id = self
            .db
            .register(&request.address, &info, &routines, now)
            .await?;
        drop(turn);
        let restarted = previous.is_some_and(|p| !p.is_empty() && p != info.instance);
        if restarted && !info.instance.is_empty() {
            self.forget_lost_copies(&request.address).await?;
        }
        let (before, rejected) = {
            let mut state = self.state();
            state.down.remove(&id);
            let before: Option<Vec<String>> = state
                .registry
                .get(&request.address)
                .map(|s| s.routines.keys().cloned().collect());
            let rejected =
                state
                    .registry
                    .register(id, &request.address, info.clone(), &routines, now);
            for failed in &request.failed_modules {
                tracing::warn!(server = %request.address, executable = %failed.executable, reason = %failed.reason, "module not served");
            }
            state
                .registry
                .set_failed_modules(&request.address, request.failed_modules.clone());
            (before, rejected)
        };
        self.log_registration(&request.address, before, &routines, &rejected);
        // Requests waiting for capacity look again.
        self.alloc.registered.notify_waiters();
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

    /// A server that restarted comes back with empty storage: the copies of data handles it
    /// held are dropped from the records (a handle's last copy stays listed, to be named when
    /// it is needed), and persistent handles left short of their replicas are made whole
    /// again from their other copies ([`Metaserver::repair_data`]).
    async fn forget_lost_copies(&self, address: &str) -> Result<(), MetaserverError> {
        let dropped = self.db.drop_copies_on(address).await?;
        if dropped.is_empty() {
            return Ok(());
        }
        tracing::info!(server = %address, copies = dropped.len(), "a restarted server's data copies dropped");
        self.log_event(
            "restarted",
            address,
            None,
            format!(
                "restarted with empty storage: {} copies of data handles dropped",
                dropped.len()
            ),
        );
        self.want_data_repair();
        Ok(())
    }

    /// A first registration, or a registration again (a restart) that says which routines
    /// came and went.
    fn log_registration(
        &self,
        address: &str,
        before: Option<Vec<String>>,
        routines: &[v1::FunctionInterface],
        rejected: &[(String, String)],
    ) {
        let after: Vec<String> = routines
            .iter()
            .map(|r| r.name.clone())
            .filter(|name| !rejected.iter().any(|(r, _)| r == name))
            .collect();
        let refused = if rejected.is_empty() {
            String::new()
        } else {
            let names: Vec<&str> = rejected.iter().map(|(r, _)| r.as_str()).collect();
            format!("; refused {}", names.join(", "))
        };
        let Some(before) = before else {
            let message = format!("registered with {} routines{refused}", after.len());
            return self.log_event("registered", address, None, message);
        };
        let (added, removed) = events::routine_changes(&before, &after);
        let message = if added.is_empty() && removed.is_empty() {
            format!(
                "registered again with the same {} routines{refused}",
                after.len()
            )
        } else {
            format!(
                "registered again: added [{}], removed [{}]{refused}",
                added.join(", "),
                removed.join(", ")
            )
        };
        self.log_event("reloaded", address, None, message);
    }
}
