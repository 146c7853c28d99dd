//! Persistent handles made whole again after a server was lost (docs/data.md, "Faults"): when
//! a server holding copies is marked down, drains or leaves, or registers again as a new
//! process (its storage empty), the upkeep copies each persistent handle short of its `replicas` from a
//! live copy to servers with room, server to server, and records the new copies. Which
//! handles and from where is decided in `data/repair.rs`; this is the I/O around it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ninf_proto::net::auth::AttachToken;
use ninf_proto::net::{ConnectionSettings, connect_lazy};
use ninf_proto::v1;
use ninf_proto::v1::storage_client::StorageClient;
use tonic::Status;

use crate::data::repair::{Holder, Shortfall, shortfalls};
use crate::{Metaserver, MetaserverError, unix_now};

/// How long one server-to-server copy may take.
const COPY_TIMEOUT: Duration = Duration::from_secs(300);

/// What one round of repair did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Repaired {
    /// Copies made and recorded.
    pub copies: usize,
    /// Handles still short of their replicas (no room, or a copy failed).
    pub still_short: usize,
}

impl Metaserver {
    /// Asks the upkeep to look for handles short of their replicas at its next tick.
    pub(crate) fn want_data_repair(&self) {
        self.data_repair_wanted.store(true, Ordering::Relaxed);
    }

    /// Whether a repair was asked for since the last one (and clears the request).
    pub(crate) fn take_data_repair_wanted(&self) -> bool {
        self.data_repair_wanted.swap(false, Ordering::Relaxed)
    }

    /// One round: copies every persistent handle that is short of its replicas on servers
    /// that are up and not draining, from a live copy, to servers with room.
    pub async fn repair_data(&self) -> Result<Repaired, MetaserverError> {
        let handles = self.db.all_data().await?;
        let holders = self.holders();
        let holder = |s: &str| holders.get(s).copied().unwrap_or(Holder::Gone);
        let mut repaired = Repaired::default();
        for shortfall in shortfalls(&handles, holder) {
            let made = self.repair(&shortfall).await?;
            repaired.copies += made;
            if made < shortfall.missing {
                repaired.still_short += 1;
            }
        }
        Ok(repaired)
    }

    /// A proxy's request (`DataRecords.Repair`): `owner`'s handle `id`, whose new value could
    /// not be copied to the servers in `avoid`, copied now to others with room. Those servers'
    /// copies do not count and they get none; their room reserved for the proxy's copy is
    /// given back. Copies still missing are left to the upkeep's rounds.
    pub async fn repair_data_handle(
        &self,
        request: v1::RepairDataRequest,
    ) -> Result<v1::RepairDataReply, MetaserverError> {
        let info = self.owned_data(&request.id, &request.owner).await?;
        {
            let mut reserved = self.data_room.lock().await;
            for server in &request.avoid {
                reserved.stored(&request.id, server);
            }
        }
        let holders = self.holders();
        let holder = |s: &str| {
            if request.avoid.iter().any(|a| a == s) {
                return Holder::Gone;
            }
            holders.get(s).copied().unwrap_or(Holder::Gone)
        };
        let mut made = 0;
        for mut shortfall in shortfalls(std::slice::from_ref(&info), holder) {
            shortfall.listed.extend(request.avoid.iter().cloned());
            made = self.repair(&shortfall).await?;
            if made < shortfall.missing {
                self.want_data_repair();
            }
        }
        let info = self.owned_data(&request.id, &request.owner).await?;
        Ok(v1::RepairDataReply {
            info: Some(info),
            copies_made: u32::try_from(made).unwrap_or(u32::MAX),
        })
    }

    /// What each server that is up is to a repair: staying, or leaving (draining).
    fn holders(&self) -> HashMap<String, Holder> {
        let state = self.state();
        let now = unix_now();
        state
            .registry
            .servers()
            .iter()
            .filter(|s| state.registry.is_up(s, now))
            .map(|s| {
                let holder = if s.draining {
                    Holder::Leaving
                } else {
                    Holder::Staying
                };
                (s.address.clone(), holder)
            })
            .collect()
    }

    /// Makes up to `shortfall.missing` copies of one handle; the number made.
    async fn repair(&self, shortfall: &Shortfall) -> Result<usize, MetaserverError> {
        let (targets, evicted) = {
            let mut reserved = self.data_room.lock().await;
            self.copy_targets(
                &shortfall.handle,
                shortfall.bytes,
                shortfall.missing,
                &shortfall.listed,
                &mut reserved,
            )
            .await?
        };
        for copy in &evicted {
            if let Err(status) = self.delete_on(copy).await {
                tracing::warn!(server = %copy.server, error = %status.message(), "cannot delete an evicted replica; asking again in the background");
            }
        }
        let mut made = 0;
        for target in &targets {
            match self.copy_to(target, shortfall).await {
                Ok(copy) => {
                    if !self.record_repair(&shortfall.handle, &copy).await? {
                        continue;
                    }
                    made += 1;
                    let shown: String = shortfall.handle.chars().take(12).collect();
                    tracing::info!(handle = %shortfall.handle, server = %target, from = %shortfall.source.server, "data handle copied to make up a lost replica");
                    self.log_event(
                        "replicated",
                        target,
                        None,
                        format!(
                            "a copy of data handle {shown}… made from {} to replace a lost one",
                            shortfall.source.server
                        ),
                    );
                }
                Err(status) => {
                    tracing::warn!(handle = %shortfall.handle, server = %target, error = %status.message(), "cannot copy a data handle to make up a lost replica");
                }
            }
            self.data_room
                .lock()
                .await
                .stored(&shortfall.handle, target);
        }
        Ok(made)
    }

    /// Records a copy made by a repair; false, with the copy deleted again, when the handle
    /// was freed while it was being made. Recorded first and looked up after, so that a free
    /// either lists the copy (and its proxy deletes it) or comes before the look-up.
    async fn record_repair(
        &self,
        handle: &str,
        copy: &v1::DataCopy,
    ) -> Result<bool, MetaserverError> {
        self.db.add_data_copy(handle, copy, false).await?;
        if self.db.data(handle).await?.is_some() {
            return Ok(true);
        }
        tracing::info!(%handle, server = %copy.server, "a handle freed while a repair copied it: the copy goes");
        self.db.remove_copy(handle, &copy.server).await?;
        if let Err(status) = self.delete_on(copy).await {
            tracing::warn!(server = %copy.server, error = %status.message(), "cannot delete a repair's copy of a freed handle; asking again in the background");
        }
        Ok(false)
    }

    /// Copies the shortfall's source copy to `target`, owned by the handle there: under an
    /// owner of its own first, adopted by the handle once it arrived, so that a copy whose
    /// reply was lost is deleted without touching anything else the handle has there.
    async fn copy_to(&self, target: &str, shortfall: &Shortfall) -> Result<v1::DataCopy, Status> {
        let provisional = format!(
            "metaserver-{}/repair-{}",
            std::process::id(),
            REPAIR_COPIES.fetch_add(1, Ordering::Relaxed)
        );
        let request = v1::CopyFromRequest {
            source: Some(v1::ObjectRef {
                server: shortfall.source.server.clone(),
                object_id: shortfall.source.object_id.clone(),
            }),
            owner: provisional.clone(),
        };
        let mut storage = self.storage(target)?;
        let copied = match tokio::time::timeout(COPY_TIMEOUT, storage.copy_from(request)).await {
            Ok(Ok(reply)) => reply.into_inner(),
            failed => {
                delete_later(storage, Leftover::Owner(provisional));
                return Err(match failed {
                    Ok(Err(status)) => status,
                    _ => Status::deadline_exceeded("the copy took too long"),
                });
            }
        };
        let adopt = v1::AdoptRequest {
            object_id: copied.object_id.clone(),
            owner: shortfall.handle.clone(),
        };
        if let Err(status) = storage.adopt(adopt).await {
            delete_later(storage, Leftover::Object(copied.object_id));
            return Err(status);
        }
        Ok(v1::DataCopy {
            server: target.to_string(),
            object_id: copied.object_id,
        })
    }

    /// Deletes `copy` now or, while its server cannot be reached, in the background.
    async fn delete_on(&self, copy: &v1::DataCopy) -> Result<(), Status> {
        let mut storage = self.storage(&copy.server)?;
        let request = v1::DeleteRequest {
            object_id: copy.object_id.clone(),
        };
        match storage.delete(request).await {
            Err(status) if status.code() != tonic::Code::NotFound => {
                delete_later(storage, Leftover::Object(copy.object_id.clone()));
                Err(status)
            }
            _ => Ok(()),
        }
    }

    /// A storage client of `server`, with the grid's token and TLS.
    fn storage(&self, server: &str) -> Result<Storage, Status> {
        let channel = connect_lazy(server, self.tls.as_ref(), ConnectionSettings::default())
            .map_err(|e| Status::unavailable(format!("cannot reach {server}: {e}")))?;
        Ok(StorageClient::with_interceptor(
            channel,
            AttachToken::new(self.token.as_deref()),
        ))
    }
}

/// Copies made by repairs in this process, for their provisional owners' names.
static REPAIR_COPIES: AtomicU64 = AtomicU64::new(0);

/// Times a deletion is tried again in the background (about 85 s in all, as long as a lease
/// would keep the bytes anyway).
const DELETE_ATTEMPTS: u32 = 12;

type Storage = StorageClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, AttachToken>,
>;

/// What a failed copy may have left on its server.
enum Leftover {
    Owner(String),
    Object(String),
}

/// Deletes `leftover` through `storage` in the background, with back-off, until its server
/// answers: a request whose reply was lost may have done its work.
fn delete_later(mut storage: Storage, leftover: Leftover) {
    tokio::spawn(async move {
        let mut wait = Duration::from_millis(500);
        for _ in 0..DELETE_ATTEMPTS {
            tokio::time::sleep(wait).await;
            let deleted = match &leftover {
                Leftover::Owner(owner) => {
                    let request = v1::DeleteOwnerRequest {
                        owner: owner.clone(),
                    };
                    storage.delete_owner(request).await.map(|_| ())
                }
                Leftover::Object(object_id) => {
                    let request = v1::DeleteRequest {
                        object_id: object_id.clone(),
                    };
                    storage.delete(request).await.map(|_| ())
                }
            };
            match deleted {
                Err(status) if status.code() != tonic::Code::NotFound => {}
                _ => return,
            }
            wait = (wait * 2).min(Duration::from_secs(10));
        }
        tracing::warn!("cannot delete what a failed copy may have left; its lease will");
    });
}
