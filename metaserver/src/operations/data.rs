//! Data handles (docs/data.md): making one and choosing where its data goes, recording its
//! copies, looking it up for a run, freeing, listing and renewing. Proxies call these for
//! their clients; a handle is another owner's as much as it is unknown, so neither is
//! listed nor found.

use ninf_proto::v1;

use crate::data::{Holder, check_spec, choose_holders};
use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    /// A new handle for `owner` and the server its data goes to.
    pub async fn create_data(
        &self,
        request: v1::CreateDataRequest,
    ) -> Result<v1::CreateDataReply, MetaserverError> {
        let spec = request.spec.unwrap_or_default();
        check_spec(&spec).map_err(|e| MetaserverError::BadRequest(format!("data: {e}")))?;
        let copies = if spec.mode == v1::DataMode::Persistent as i32 {
            spec.replicas.max(1) as usize
        } else {
            1
        };
        let servers = self.data_holders(spec.bytes, copies)?;
        let server = servers.first().cloned().unwrap_or_default();
        let id = ninf_proto::net::local::random_name("")
            .map_err(|e| MetaserverError::Planning(format!("no random handle id: {e}")))?;
        let now = unix_now();
        let info = v1::DataInfo {
            id,
            owner: request.owner,
            spec: Some(spec),
            copies: Vec::new(),
            lease_until: now + self.config.data_lease_seconds,
            created: now,
        };
        self.db.insert_data(&info).await?;
        tracing::info!(id = %info.id, owner = %info.owner, %server, "data handle made");
        Ok(v1::CreateDataReply {
            info: Some(info),
            server,
            servers,
        })
    }

    /// The up servers, not draining, that a new handle's `copies` copies of `bytes` go to.
    fn data_holders(&self, bytes: u64, copies: usize) -> Result<Vec<String>, MetaserverError> {
        let state = self.state();
        let now = unix_now();
        let holders: Vec<Holder> = state
            .registry
            .servers()
            .iter()
            .filter(|s| state.registry.is_up(s, now) && !s.draining)
            .map(|s| Holder {
                address: &s.address,
                stored_bytes: s.latest.as_ref().map_or(0, |l| l.stored_bytes),
                free_memory_bytes: s.latest.as_ref().map_or(0, |l| l.free_memory_bytes),
            })
            .collect();
        choose_holders(&holders, bytes, copies)
            .map(|chosen| chosen.into_iter().map(str::to_string).collect())
            .map_err(|e| MetaserverError::NoCapacity(e.to_string()))
    }

    /// Records a copy of `owner`'s handle; with `replace`, the handle's new value: the reply
    /// lists the handle as it is now, and the old copies in `stale` for deleting.
    pub async fn add_data_copy(
        &self,
        request: v1::AddCopyRequest,
    ) -> Result<(v1::DataInfo, Vec<v1::DataCopy>), MetaserverError> {
        self.owned_data(&request.id, &request.owner).await?;
        let copy = request.copy.unwrap_or_default();
        let stale = self
            .db
            .add_data_copy(&request.id, &copy, request.replace)
            .await?;
        let info = self.owned_data(&request.id, &request.owner).await?;
        Ok((info, stale))
    }

    /// `owner`'s handle `id`.
    pub async fn owned_data(&self, id: &str, owner: &str) -> Result<v1::DataInfo, MetaserverError> {
        match self.db.data(id).await? {
            Some(info) if info.owner == owner && info.lease_until >= unix_now() => Ok(info),
            _ => Err(MetaserverError::DataNotFound(id.to_string())),
        }
    }

    /// Forgets `owner`'s handle `id`; the reply lists the copies to delete.
    pub async fn forget_data(
        &self,
        id: &str,
        owner: &str,
    ) -> Result<v1::DataInfo, MetaserverError> {
        let info = self.owned_data(id, owner).await?;
        self.db.delete_data(id).await?;
        tracing::info!(%id, %owner, "data handle freed");
        Ok(info)
    }

    /// Every handle of every owner, for status and tests.
    pub async fn all_data(&self) -> Result<Vec<v1::DataInfo>, MetaserverError> {
        Ok(self.db.all_data().await?)
    }

    pub async fn list_data(&self, owner: &str) -> Result<Vec<v1::DataInfo>, MetaserverError> {
        let now = unix_now();
        Ok(self
            .db
            .data_of(owner)
            .await?
            .into_iter()
            .filter(|d| d.lease_until >= now)
            .collect())
    }

    /// Extends `owner`'s leases (every handle when `ids` is empty).
    pub async fn renew_data(
        &self,
        owner: &str,
        ids: &[String],
    ) -> Result<v1::RenewDataReply, MetaserverError> {
        let lease = self.config.data_lease_seconds;
        let renewed = self.db.renew_data(owner, ids, unix_now() + lease).await?;
        Ok(v1::RenewDataReply {
            renewed,
            lease_seconds: lease,
        })
    }

    /// Forgets the handles whose leases ran out (their clients went away); the servers
    /// drop the bytes on their own storage leases. The number forgotten.
    pub async fn expire_data(&self) -> Result<usize, MetaserverError> {
        let expired = self.db.expire_data(unix_now()).await?;
        for info in &expired {
            tracing::info!(id = %info.id, owner = %info.owner, "data handle expired");
        }
        Ok(expired.len())
    }
}
