//! Data handles (docs/data.md): making one and choosing where its data goes, recording its
//! copies, looking it up for a run, freeing, listing and renewing. Proxies call these for
//! their clients; a handle is another owner's as much as it is unknown, so neither is
//! listed nor found.

use ninf_proto::v1;

use crate::data::room::{self, Reserved};
use crate::data::{Holder, Kept, Remaining, check_spec, choose_holders};
use crate::{Metaserver, MetaserverError, unix_now};

/// One copy's server, and the replicas it drops for it.
struct Placement {
    address: String,
    evicted: Vec<String>,
}

impl Metaserver {
    /// A new handle for `owner` and the servers its data goes to, replicas of other handles
    /// evicted there to make room under the servers' data caps.
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
        let now = unix_now();
        let mut reserved = self.data_room.lock().await;
        reserved.prune(now - self.config.data_lease_seconds);
        let (earlier, earlier_tries) = self
            .forget_earlier_try(&request.owner, &spec.put_id, &mut reserved)
            .await?;
        // An empty handle stores nothing until a call writes it, and room is made then.
        let placed = self
            .data_holders(
                spec.bytes,
                copies,
                (!spec.empty).then_some(&*reserved),
                &request.avoid,
            )
            .await?;
        let servers: Vec<String> = placed.iter().map(|p| p.address.to_string()).collect();
        let mut evicted = earlier;
        if !spec.empty {
            for p in &placed {
                evicted.extend(self.evict(&p.address, &p.evicted).await?);
            }
        }
        let id = ninf_proto::net::local::random_name("")
            .map_err(|e| MetaserverError::Planning(format!("no random handle id: {e}")))?;
        let info = v1::DataInfo {
            id,
            owner: request.owner,
            lease_until: now + self.config.data_lease_seconds,
            created: now,
            copies: Vec::new(),
            spec: Some(spec),
        };
        self.db.insert_data(&info).await?;
        let bytes = info.spec.as_ref().map_or(0, |s| s.bytes);
        if info.spec.as_ref().is_some_and(|s| !s.empty) {
            reserved.reserve(&info.id, servers.clone(), bytes, now);
        }
        let server = servers.first().cloned().unwrap_or_default();
        tracing::info!(id = %info.id, owner = %info.owner, %server, evicted = evicted.len(), "data handle made");
        Ok(v1::CreateDataReply {
            info: Some(info),
            server,
            servers,
            evicted,
            earlier_tries,
        })
    }

    /// Forgets what an earlier try of `owner`'s put `put_id` made (its reply was lost, so the
    /// client sent it again), for deleting: the copies it recorded, and where it was still
    /// to store one (it may have, unrecorded).
    async fn forget_earlier_try(
        &self,
        owner: &str,
        put_id: &str,
        reserved: &mut Reserved,
    ) -> Result<(Vec<v1::DataCopy>, Vec<v1::DataOwned>), MetaserverError> {
        let (mut copies, mut unrecorded) = (Vec::new(), Vec::new());
        if put_id.is_empty() {
            return Ok((copies, unrecorded));
        }
        for info in self.db.data_put_as(owner, put_id).await? {
            tracing::info!(id = %info.id, %owner, "a put sent again replaces what its first try made");
            self.db.delete_data(&info.id).await?;
            unrecorded.extend(
                reserved
                    .forget(&info.id)
                    .into_iter()
                    .map(|server| v1::DataOwned {
                        server,
                        id: info.id.clone(),
                    }),
            );
            copies.extend(info.copies);
        }
        Ok((copies, unrecorded))
    }

    /// The up servers, not draining, none of `except`, that a new handle's `copies` copies
    /// of `bytes` go to; under their data caps when `reserved` (the puts under way) is given.
    async fn data_holders(
        &self,
        bytes: u64,
        copies: usize,
        reserved: Option<&Reserved>,
        except: &[String],
    ) -> Result<Vec<Placement>, MetaserverError> {
        let candidates: Vec<(String, u64, u64, u64)> = {
            let state = self.state();
            let now = unix_now();
            state
                .registry
                .servers()
                .iter()
                .filter(|s| {
                    state.registry.is_up(s, now) && !s.draining && !except.contains(&s.address)
                })
                .map(|s| {
                    let latest = s.latest.as_ref();
                    (
                        s.address.clone(),
                        latest.map_or(0, |l| l.stored_bytes),
                        latest.map_or(0, |l| l.free_memory_bytes),
                        reserved.map_or(0, |_| s.info.data_cap_bytes),
                    )
                })
                .collect()
        };
        let mut holders = Vec::with_capacity(candidates.len());
        for (address, stored_bytes, free_memory_bytes, data_cap_bytes) in &candidates {
            let kept = match reserved {
                Some(reserved) if *data_cap_bytes > 0 => self.kept_on(address, reserved).await?,
                _ => Vec::new(),
            };
            holders.push(Holder {
                address,
                stored_bytes: *stored_bytes,
                free_memory_bytes: *free_memory_bytes,
                data_cap_bytes: *data_cap_bytes,
                kept,
            });
        }
        let chosen = choose_holders(&holders, bytes, copies)
            .map_err(|e| MetaserverError::NoCapacity(e.to_string()))?;
        Ok(chosen
            .into_iter()
            .map(|p| Placement {
                address: p.address.to_string(),
                evicted: p.evicted,
            })
            .collect())
    }

    /// What `server` keeps as the records say, and what is being stored there.
    async fn kept_on(
        &self,
        server: &str,
        reserved: &Reserved,
    ) -> Result<Vec<Kept>, MetaserverError> {
        let mut kept = self.db.kept_on(server).await?;
        kept.extend(reserved.on(server));
        Ok(kept)
    }

    /// Drops the copies of `handles` on `server` from the records: the copies, for the
    /// proxy to delete.
    async fn evict(
        &self,
        server: &str,
        handles: &[String],
    ) -> Result<Vec<v1::DataCopy>, MetaserverError> {
        let mut evicted = Vec::with_capacity(handles.len());
        for handle in handles {
            if let Some(copy) = self.db.remove_copy(handle, server).await? {
                tracing::info!(%handle, %server, "replica evicted under the data cap");
                self.metrics.data_evicted();
                let shown: String = handle.chars().take(12).collect();
                self.log_event(
                    "evicted",
                    server,
                    None,
                    format!("a replica of data handle {shown}… evicted under the data cap"),
                );
                evicted.push(copy);
            }
        }
        Ok(evicted)
    }

    /// Records a copy of `owner`'s handle; with `replace`, the handle's new value: the reply
    /// lists the handle as it is now, in `stale` the old copies and the replicas evicted to
    /// bring the copy's server under its data cap, for deleting, and in `replicate_to` the
    /// servers a persistent handle's new value is to be copied to.
    pub async fn add_data_copy(
        &self,
        request: v1::AddCopyRequest,
    ) -> Result<v1::AddCopyReply, MetaserverError> {
        let before = self.owned_data(&request.id, &request.owner).await?;
        let copy = request.copy.unwrap_or_default();
        let mut reserved = self.data_room.lock().await;
        if request.only_if_room {
            let Some(evicted) = self.room_for_replica(&before, &copy, &reserved).await? else {
                return Ok(v1::AddCopyReply {
                    info: Some(before),
                    stale: vec![copy],
                    replicate_to: Vec::new(),
                });
            };
            self.db.add_data_copy(&request.id, &copy, false).await?;
            drop(reserved);
            self.db.touch_data(&request.id, unix_now()).await?;
            let info = self.owned_data(&request.id, &request.owner).await?;
            return Ok(v1::AddCopyReply {
                info: Some(info),
                stale: evicted,
                replicate_to: Vec::new(),
            });
        }
        reserved.stored(&request.id, &copy.server);
        let mut stale = self
            .db
            .add_data_copy(&request.id, &copy, request.replace)
            .await?;
        self.db.touch_data(&request.id, unix_now()).await?;
        stale.extend(self.room_for(&copy.server, &request.id, &reserved).await?);
        let mut replicate_to = Vec::new();
        if request.replace {
            let mut holders = vec![copy.server.clone()];
            for further in request
                .further_copies
                .iter()
                .filter(|c| c.server != copy.server)
            {
                reserved.stored(&request.id, &further.server);
                self.db.add_data_copy(&request.id, further, false).await?;
                stale.extend(
                    self.room_for(&further.server, &request.id, &reserved)
                        .await?,
                );
                holders.push(further.server.clone());
            }
            let (targets, evicted) = self
                .replica_targets(&before, &holders, &mut reserved)
                .await?;
            replicate_to = targets;
            stale.extend(evicted);
            // A commit applied again (its proxy died midway) names copies recorded the first
            // time: they hold the new value, not an old one.
            stale.retain(|c| !request.further_copies.contains(c));
        }
        drop(reserved);
        let info = self.owned_data(&request.id, &request.owner).await?;
        Ok(v1::AddCopyReply {
            info: Some(info),
            stale,
            replicate_to,
        })
    }

    /// Where a persistent handle's new value, held on `holders` (where it was written, and
    /// the copies made before it was recorded), is copied to bring it back to its
    /// `replicas`: as many servers as have room, up to that count, their room reserved; and
    /// the replicas of other handles evicted there for it.
    async fn replica_targets(
        &self,
        handle: &v1::DataInfo,
        holders: &[String],
        reserved: &mut Reserved,
    ) -> Result<(Vec<String>, Vec<v1::DataCopy>), MetaserverError> {
        let Some(spec) = handle.spec.as_ref() else {
            return Ok((Vec::new(), Vec::new()));
        };
        let persistent = spec.mode == v1::DataMode::Persistent as i32;
        let wanted = if persistent {
            (spec.replicas.max(1) as usize).saturating_sub(holders.len())
        } else {
            0
        };
        if wanted == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let except = holders;
        let (servers, evicted) = self
            .copy_targets(&handle.id, spec.bytes, wanted, except, reserved)
            .await?;
        if servers.len() < wanted {
            tracing::warn!(id = %handle.id, "no server has room for another copy of a persistent handle's new value");
            // Made whole once room appears.
            self.want_data_repair();
        }
        Ok((servers, evicted))
    }

    /// Up to `wanted` servers, none of `except`, with room for another copy of handle `id`
    /// of `bytes` (as many as have it), their room reserved; and the replicas of other
    /// handles evicted there for it, for deleting.
    pub(crate) async fn copy_targets(
        &self,
        id: &str,
        bytes: u64,
        wanted: usize,
        except: &[String],
        reserved: &mut Reserved,
    ) -> Result<(Vec<String>, Vec<v1::DataCopy>), MetaserverError> {
        for copies in (1..=wanted).rev() {
            let Ok(placed) = self
                .data_holders(bytes, copies, Some(reserved), except)
                .await
            else {
                continue;
            };
            let mut evicted = Vec::new();
            for p in &placed {
                evicted.extend(self.evict(&p.address, &p.evicted).await?);
            }
            let servers: Vec<String> = placed.into_iter().map(|p| p.address).collect();
            reserved.reserve(id, servers.clone(), bytes, unix_now());
            return Ok((servers, evicted));
        }
        Ok((Vec::new(), Vec::new()))
    }

    /// Room on `copy`'s server for a replica of `handle` the grid made: the replicas of other
    /// handles evicted for it; `None` when it does not fit under the server's cap with every
    /// replica gone, or when the server has a copy already.
    async fn room_for_replica(
        &self,
        handle: &v1::DataInfo,
        copy: &v1::DataCopy,
        reserved: &Reserved,
    ) -> Result<Option<Vec<v1::DataCopy>>, MetaserverError> {
        if handle.copies.iter().any(|c| c.server == copy.server) {
            return Ok(None);
        }
        let bytes = handle.spec.as_ref().map_or(0, |s| s.bytes);
        let cap = self.data_cap_of(&copy.server);
        let kept = self.kept_on(&copy.server, reserved).await?;
        let Some(evicted) = room::evictions(cap, &kept, bytes, &Remaining::new()) else {
            return Ok(None);
        };
        let evicted: Vec<String> = evicted.into_iter().map(|k| k.handle.clone()).collect();
        Ok(Some(self.evict(&copy.server, &evicted).await?))
    }

    /// The server's data cap (0: none, or an unknown server).
    fn data_cap_of(&self, server: &str) -> u64 {
        let state = self.state();
        state
            .registry
            .servers()
            .iter()
            .find(|s| s.address == server)
            .map_or(0, |s| s.info.data_cap_bytes)
    }

    /// Evicts replicas of other handles from `server` until its copy of `handle` fits under
    /// its data cap (every replica, when that is not enough).
    async fn room_for(
        &self,
        server: &str,
        handle: &str,
        reserved: &Reserved,
    ) -> Result<Vec<v1::DataCopy>, MetaserverError> {
        let cap = self.data_cap_of(server);
        if cap == 0 {
            return Ok(Vec::new());
        }
        let (this, others): (Vec<Kept>, Vec<Kept>) = self
            .kept_on(server, reserved)
            .await?
            .into_iter()
            .partition(|k| k.handle == handle);
        let bytes = this.iter().map(|k| k.bytes).sum();
        let evicted: Vec<String> = room::make_room(cap, &others, bytes, &Remaining::new())
            .into_iter()
            .map(|k| k.handle.clone())
            .collect();
        self.evict(server, &evicted).await
    }

    /// `owner`'s handle `id`, marked used now (for a call or a get).
    pub async fn use_data(&self, id: &str, owner: &str) -> Result<v1::DataInfo, MetaserverError> {
        let info = self.owned_data(id, owner).await?;
        // The mark only orders replicas for eviction, and it waits for the DB's write turn:
        // the lookup, which every transaction over kept data makes before it is placed, does
        // not wait for it, and the marks of many lookups share one commit (one each took a
        // write of its own, 100 for 50 solves over two kept handles). A mark lost to a
        // failed write (or a handle freed meanwhile, which it no longer finds) changes
        // nothing but that order.
        self.use_marks.send((id.to_string(), unix_now()));
        Ok(info)
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
        self.data_room.lock().await.forget(id);
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
