//! Data kept on the grid between transactions (docs/data.md), at the proxy: a client's put,
//! get, free, list and renewal of its handles, and the handles in its runs. The metaserver
//! records every handle and its copies (`DataRecords`); the bytes live in the compute
//! servers' storage under the handle's id as their owner, so that freeing a handle is
//! deleting one owner and its lease is that owner's lease.
//!
//! In a run, a handle an argument reads becomes one of its copies (the one on the task's
//! server when there is one); a persistent handle read from another server is kept there as
//! well, a replica recorded once the run has succeeded if it fits under that server's cap. A
//! handle it writes becomes a kept output, given to the handle once the run has succeeded,
//! its older copies deleted (`commit.rs`); a replicated handle's new value is copied to the
//! servers of its old copies before that (`written_copies.rs`). A run that fails changes no handle.

use std::collections::{BTreeMap, BTreeSet};

use ninf_proto::v1;
use tonic::Status;

use crate::leftovers::Leftover;
use crate::metaserver::{DataRecordsReply, DataRecordsRequest};
use upload::Upload;

mod commit;
pub(crate) mod upload;
mod written_copies;
use crate::Proxy;

/// The handles a run's arguments name, looked up once before it is placed.
#[derive(Debug, Default)]
pub(crate) struct DataUses {
    /// By handle id.
    handles: BTreeMap<String, v1::DataInfo>,
    /// (task, parameter, handle id) of every argument that reads a handle.
    reads: Vec<(usize, u32, String)>,
    /// (task, parameter, handle id) of every output that becomes a handle's value.
    pub(crate) writes: Vec<(usize, u32, String)>,
    /// (task, parameter, handle id) of the reads of persistent handles from another server
    /// that the task's server keeps as a new replica ([`bind_data`] chooses them).
    pub(crate) replicas: Vec<(usize, u32, String)>,
}

fn unexpected(what: &str) -> Status {
    Status::internal(format!(
        "the metaserver answered {what} with something else"
    ))
}

/// Placements a put tries before it gives up: one server dying under a put must not fail
/// it, and a put refused everywhere is refused quickly.
const PUT_ATTEMPTS: usize = 3;

impl Proxy {
    /// One request to the metaserver's records, waiting for a restarting metaserver.
    async fn records(&self, request: DataRecordsRequest) -> Result<DataRecordsReply, Status> {
        self.with_metaserver(|| self.metaserver.data(request.clone()))
            .await
    }

    async fn lookup_data(&self, owner: &str, id: &str) -> Result<v1::DataInfo, Status> {
        let request = v1::LookupDataRequest {
            id: id.to_string(),
            owner: owner.to_string(),
        };
        match self.records(DataRecordsRequest::Lookup(request)).await? {
            DataRecordsReply::Info(info) => Ok(info),
            _ => Err(unexpected("a lookup")),
        }
    }

    /// Makes a handle of `spec` for `owner` and stores the bytes `upload` brings as its
    /// value (none for an empty handle), passing them on as they arrive. A server that
    /// cannot take it (it died, and the metaserver does not know yet) is avoided in a new
    /// placement, up to [`PUT_ATTEMPTS`] in all; a client's stream that fails fails the put.
    pub async fn put_data(
        &self,
        owner: &str,
        spec: v1::DataSpec,
        upload: Upload,
    ) -> Result<v1::DataInfo, Status> {
        let mut avoid = Vec::new();
        let mut failures = Vec::new();
        // Unavailable while servers failed under the put; the metaserver's own code (a
        // refusal for want of servers, say) when it has no other server to offer, so that a
        // client that waits for servers to come back knows to.
        let mut code = tonic::Code::Unavailable;
        while avoid.len() < PUT_ATTEMPTS {
            match self.put_once(owner, &spec, &upload, &avoid).await {
                Ok(Ok(info)) => return Ok(info),
                Ok(Err((server, failure))) => {
                    failures.push(format!("on {server}: {failure}"));
                    avoid.push(server);
                }
                // No other server to try: what went wrong before says why.
                Err(status) if !failures.is_empty() => {
                    failures.push(status.message().to_string());
                    code = status.code();
                    break;
                }
                Err(status) => return Err(status),
            }
        }
        Err(Status::new(
            code,
            format!("cannot store the data: {}", failures.join("; ")),
        ))
    }

    /// One placement of a put: the handle, or the server that could not store it and why
    /// (the handle and any copy stored are gone again then: nothing is half made).
    async fn put_once(
        &self,
        owner: &str,
        spec: &v1::DataSpec,
        upload: &Upload,
        avoid: &[String],
    ) -> Result<Result<v1::DataInfo, (String, String)>, Status> {
        let request = v1::CreateDataRequest {
            owner: owner.to_string(),
            spec: Some(spec.clone()),
            avoid: avoid.to_vec(),
        };
        let DataRecordsReply::Created(created) =
            self.records(DataRecordsRequest::Create(request)).await?
        else {
            return Err(unexpected("a new handle"));
        };
        let mut info = created.info.unwrap_or_default();
        self.delete_copies(&created.evicted).await;
        for earlier in &created.earlier_tries {
            self.delete_owner(&earlier.server, &earlier.id).await;
        }
        if spec.empty {
            if let Err(status) = upload.finished().await {
                let _ = self.free_data(owner, &info.id).await;
                return Err(status);
            }
            return Ok(Ok(info));
        }
        let servers = if created.servers.is_empty() {
            vec![created.server]
        } else {
            created.servers
        };
        for server in servers {
            let stored = match upload.whole_bytes() {
                Some(data) => {
                    let element_type = spec.element_type;
                    let array = v1::Array { element_type, data };
                    self.cluster.put(&server, &info.id, array).await
                }
                None => tokio::select! {
                    stored = self.cluster.put_chunks(&server, &info.id, spec, upload.chunks()) => stored,
                    // The client's stream broke or lied about its size: the server's put is
                    // dropped unfinished (it stores nothing), and so is the handle.
                    failed = upload.failed() => {
                        let _ = self.free_data(owner, &info.id).await;
                        return Err(failed);
                    }
                },
            };
            match stored {
                Ok(object) => {
                    info = self
                        .add_copy(owner, &info.id, object, (false, false), Vec::new())
                        .await?
                        .info
                        .unwrap_or_default()
                }
                Err(status) => {
                    let _ = self.free_data(owner, &info.id).await;
                    // The server may have stored it all the same (its reply was lost on a
                    // link that broke), under an id no one records any more.
                    self.delete_leftover_later(Leftover::owner(&server, &info.id));
                    let failure =
                        format!("data handle `{}` not stored: {}", info.id, status.message());
                    return Ok(Err((server, failure)));
                }
            }
        }
        Ok(Ok(info))
    }

    /// Records `object` as a copy of `owner`'s handle `id` (with `replace`, its only one:
    /// the older copies are deleted); the reply lists the handle as it is now.
    pub(super) async fn add_copy(
        &self,
        owner: &str,
        id: &str,
        object: v1::ObjectRef,
        (replace, only_if_room): (bool, bool),
        further_copies: Vec<v1::DataCopy>,
    ) -> Result<v1::AddCopyReply, Status> {
        let request = v1::AddCopyRequest {
            id: id.to_string(),
            owner: owner.to_string(),
            copy: Some(v1::DataCopy {
                server: object.server,
                object_id: object.object_id,
            }),
            replace,
            only_if_room,
            further_copies,
        };
        let DataRecordsReply::CopyAdded(added) =
            self.records(DataRecordsRequest::AddCopy(request)).await?
        else {
            return Err(unexpected("a new copy"));
        };
        self.delete_copies(&added.stale).await;
        Ok(added)
    }

    /// Deletes copies the records no longer list (old values, evicted replicas) from their
    /// servers, now or, while a server cannot be reached, in the background: its lease
    /// would keep a copy for as long as the handle's, which its client renews.
    pub(super) async fn delete_copies(&self, copies: &[v1::DataCopy]) {
        for copy in copies {
            let object = v1::ObjectRef {
                server: copy.server.clone(),
                object_id: copy.object_id.clone(),
            };
            self.delete_leftover(Leftover::Object(object)).await;
        }
    }

    async fn forget_record(&self, owner: &str, id: &str) -> Result<v1::DataInfo, Status> {
        let request = v1::LookupDataRequest {
            id: id.to_string(),
            owner: owner.to_string(),
        };
        match self.records(DataRecordsRequest::Forget(request)).await? {
            DataRecordsReply::Info(info) => Ok(info),
            _ => Err(unexpected("a free")),
        }
    }

    /// `owner`'s handle `id` and its value, read from the first copy that answers.
    pub async fn get_data(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<(v1::DataInfo, v1::Array), Status> {
        let info = self.lookup_data(owner, id).await?;
        if info.copies.is_empty() {
            return Err(Status::failed_precondition(format!(
                "data handle `{id}` holds no value yet: no call has written it"
            )));
        }
        let mut failures = Vec::new();
        for copy in &info.copies {
            let object = v1::ObjectRef {
                server: copy.server.clone(),
                object_id: copy.object_id.clone(),
            };
            match self.cluster.get(&object).await {
                Ok(array) => return Ok((info, array)),
                Err(status) => failures.push(format!("{}: {}", copy.server, status.message())),
            }
        }
        Err(Status::unavailable(format!(
            "data handle `{id}` cannot be read: {}",
            failures.join("; ")
        )))
    }

    /// Frees `owner`'s handle `id`: its bytes on every server holding them, then its
    /// record, then the bytes of any copy recorded meanwhile. In that order, a proxy that
    /// dies midway leaves the record, and the client's free sent again finishes the work;
    /// the other way round it left bytes that no record names.
    pub async fn free_data(&self, owner: &str, id: &str) -> Result<v1::DataInfo, Status> {
        let before = self.lookup_data(owner, id).await?;
        let servers = |info: &v1::DataInfo| -> BTreeSet<String> {
            info.copies.iter().map(|c| c.server.clone()).collect()
        };
        let deleted = servers(&before);
        for server in &deleted {
            self.delete_owner(server, id).await;
        }
        let info = self.forget_record(owner, id).await?;
        for server in servers(&info).difference(&deleted) {
            self.delete_owner(server, id).await;
        }
        Ok(info)
    }

    pub async fn list_data(&self, owner: &str) -> Result<Vec<v1::DataInfo>, Status> {
        let request = v1::ListDataRecordsRequest {
            owner: owner.to_string(),
        };
        match self.records(DataRecordsRequest::List(request)).await? {
            DataRecordsReply::List(list) => Ok(list.data),
            _ => Err(unexpected("a list")),
        }
    }

    /// Those of `ids` that are handles of `owner`'s, in order.
    pub async fn find_data(
        &self,
        owner: &str,
        ids: &[String],
    ) -> Result<Vec<v1::DataInfo>, Status> {
        let mut found = Vec::with_capacity(ids.len());
        for id in ids {
            match self.lookup_data(owner, id).await {
                Ok(info) => found.push(info),
                Err(status) if ninf_proto::net::missing_data(&status).is_some() => {}
                Err(status) => return Err(status),
            }
        }
        Ok(found)
    }

    /// Renews `owner`'s handles (all when `ids` is empty): their records, and their bytes'
    /// leases on the servers holding them.
    pub async fn renew_data(
        &self,
        owner: &str,
        ids: Vec<String>,
    ) -> Result<v1::RenewDataReply, Status> {
        let request = v1::RenewDataRecordsRequest {
            owner: owner.to_string(),
            ids: ids.clone(),
        };
        let DataRecordsReply::Renewed(renewed) =
            self.records(DataRecordsRequest::Renew(request)).await?
        else {
            return Err(unexpected("a renewal"));
        };
        for info in self.list_data(owner).await? {
            if !ids.is_empty() && !ids.contains(&info.id) {
                continue;
            }
            for copy in &info.copies {
                if let Err(status) = self.cluster.renew(&copy.server, &info.id).await {
                    tracing::debug!(id = %info.id, server = %copy.server, error = %status.message(), "data lease renewal failed");
                }
            }
        }
        Ok(renewed)
    }

    /// The records of every handle `arguments` name (the client's own only), by id, looked
    /// up all at once: each lookup is a round trip to the metaserver, and a transaction
    /// over kept data names several (the kept chain's `ddot` two, a kept solve's three).
    /// When some cannot be found, the error is the first one's in the order the arguments
    /// name them, as when they were looked up one after another.
    async fn lookup_named(
        &self,
        owner: &str,
        arguments: &[v1::TaskArguments],
    ) -> Result<BTreeMap<String, v1::DataInfo>, Status> {
        let mut seen = BTreeSet::new();
        let ids: Vec<&str> = arguments
            .iter()
            .flat_map(|args| &args.arguments)
            .filter_map(|argument| match &argument.source {
                Some(v1::call_argument::Source::Data(data)) => Some(data.id.as_str()),
                _ => None,
            })
            .filter(|id| seen.insert(*id))
            .collect();
        let found =
            futures_util::future::join_all(ids.iter().map(|id| self.lookup_data(owner, id))).await;
        ids.into_iter()
            .zip(found)
            .map(|(id, info)| Ok((id.to_string(), info?)))
            .collect()
    }

    /// Looks up every handle the run's arguments name (the client's own only) and tells the
    /// metaserver where those it reads are, in the graph's tasks.
    pub(crate) async fn resolve_data(
        &self,
        owner: &str,
        graph: &mut v1::TaskGraph,
        arguments: &[v1::TaskArguments],
    ) -> Result<DataUses, Status> {
        let mut uses = DataUses {
            handles: self.lookup_named(owner, arguments).await?,
            ..DataUses::default()
        };
        for (task, args) in arguments.iter().enumerate() {
            for (parameter, argument) in args.arguments.iter().enumerate() {
                let Some(v1::call_argument::Source::Data(data)) = &argument.source else {
                    continue;
                };
                let Some(info) = uses.handles.get(&data.id) else {
                    continue;
                };
                let parameter = parameter as u32;
                if data.reads {
                    uses.reads.push((task, parameter, data.id.clone()));
                }
                if data.writes {
                    uses.writes.push((task, parameter, data.id.clone()));
                }
                if let Some(t) = graph.tasks.get_mut(task) {
                    t.data.push(v1::GraphData {
                        parameter,
                        id: data.id.clone(),
                        bytes: info.spec.as_ref().map_or(0, |s| s.bytes),
                        servers: info.copies.iter().map(|c| c.server.clone()).collect(),
                        reads: data.reads,
                        writes: data.writes,
                        // Only persistent data may move; an unset mode is the default, sticky.
                        sticky: info.spec.as_ref().is_some_and(|s| {
                            v1::DataMode::try_from(s.mode) != Ok(v1::DataMode::Persistent)
                        }),
                    });
                }
            }
        }
        Ok(uses)
    }

    /// Copies a persistent handle's new value from `object` to each of `servers`, server to
    /// server, and records each copy. The servers a copy failed on are handed to the
    /// metaserver's repair, which copies the value to others: left with the one copy it was
    /// written to, the value would be lost with that server (seen under `ninf chaos`, a
    /// replica's server restarting and then the writer's killed).
    pub(super) async fn replicate(
        &self,
        owner: &str,
        id: &str,
        object: &v1::ObjectRef,
        servers: &[String],
    ) {
        let mut failed = Vec::new();
        for server in servers {
            let copied = match self.copy_for(server, object, id).await {
                Ok(copied) => copied,
                Err(status) => {
                    tracing::warn!(%id, %server, error = %status.message(), "cannot copy a data handle's new value; the metaserver copies it elsewhere");
                    failed.push(server.clone());
                    continue;
                }
            };
            if let Err(status) = self
                .add_copy(owner, id, copied.clone(), (false, false), Vec::new())
                .await
            {
                tracing::warn!(%id, %server, error = %status.message(), "cannot record a data handle's copy");
                let stale = v1::DataCopy {
                    server: copied.server,
                    object_id: copied.object_id,
                };
                self.delete_copies(&[stale]).await;
            }
        }
        if !failed.is_empty() {
            self.repair_elsewhere(owner, id, failed).await;
        }
    }

    /// Asks the metaserver to copy handle `id` to servers other than `avoid`, those its
    /// replicas could not be copied to; said in the log when it cannot.
    async fn repair_elsewhere(&self, owner: &str, id: &str, avoid: Vec<String>) {
        let request = v1::RepairDataRequest {
            id: id.to_string(),
            owner: owner.to_string(),
            avoid,
        };
        match self.records(DataRecordsRequest::Repair(request)).await {
            Ok(DataRecordsReply::Repaired(reply)) => {
                tracing::info!(%id, copies = reply.copies_made, "a data handle's new value copied elsewhere");
            }
            Ok(_) => tracing::warn!(%id, "{}", unexpected("a repair").message()),
            Err(status) => {
                tracing::warn!(%id, error = %status.message(), "cannot have a data handle's new value copied elsewhere");
            }
        }
    }

    /// Has `server` copy `object` as a copy of handle `id`: under an owner of its own
    /// first, adopted by the handle once it arrived, so that a copy whose reply was lost
    /// can be deleted without touching the handle's other objects there.
    async fn copy_for(
        &self,
        server: &str,
        object: &v1::ObjectRef,
        id: &str,
    ) -> Result<v1::ObjectRef, Status> {
        let provisional = format!(
            "{}/copy-{}",
            self.name,
            COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let copied = match self.cluster.copy_from(server, object, &provisional).await {
            Ok(copied) => copied,
            Err(status) => {
                self.delete_leftover_later(Leftover::owner(server, &provisional));
                return Err(status);
            }
        };
        if let Err(status) = self.cluster.adopt(&copied, id).await {
            self.delete_leftover_later(Leftover::Object(copied));
            return Err(status);
        }
        Ok(copied)
    }
}

/// Copies made by this process, for their provisional owners' names.
static COPIES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl DataUses {
    /// A run whose `task` reads handle `info` at `parameter`, as [`Proxy::resolve_data`] finds.
    #[cfg(test)]
    pub(crate) fn reading(task: usize, parameter: u32, info: v1::DataInfo) -> DataUses {
        DataUses {
            reads: vec![(task, parameter, info.id.clone())],
            handles: [(info.id.clone(), info)].into_iter().collect(),
            ..DataUses::default()
        }
    }

    /// A run whose `task` writes handle `info` with its output `parameter`.
    #[cfg(test)]
    pub(crate) fn writing(task: usize, parameter: u32, info: v1::DataInfo) -> DataUses {
        DataUses {
            writes: vec![(task, parameter, info.id.clone())],
            handles: [(info.id.clone(), info)].into_iter().collect(),
            ..DataUses::default()
        }
    }

    /// The server of the handle copy stored as `object_id`, if it is one of the run's.
    pub(crate) fn copy_server(&self, object_id: &str) -> Option<&str> {
        self.handles
            .values()
            .flat_map(|info| &info.copies)
            .find(|c| c.object_id == object_id)
            .map(|c| c.server.as_str())
    }

    /// Points `task`'s reads of handles away from copies that were lost (`lost`, by object
    /// id) and, where another copy is, from servers not trusted now (`distrusted`): a retry
    /// reads a copy that is there. A read whose only copies were lost is an error naming the
    /// handle and where its copy was.
    pub(crate) fn rebind(
        &self,
        task: usize,
        arguments: &mut [v1::CallArgument],
        lost: &std::collections::HashSet<String>,
        distrusted: &std::collections::HashSet<String>,
    ) -> Result<(), Status> {
        for (_, parameter, id) in self.reads.iter().filter(|(t, _, _)| *t == task) {
            let (Some(info), Some(argument)) =
                (self.handles.get(id), arguments.get_mut(*parameter as usize))
            else {
                continue;
            };
            let Some(v1::call_argument::Source::Object(bound)) = &argument.source else {
                continue;
            };
            let is_lost = lost.contains(&bound.object_id);
            if !is_lost && !distrusted.contains(&bound.server) {
                continue;
            }
            let live = |c: &&v1::DataCopy| !lost.contains(&c.object_id);
            let better = info
                .copies
                .iter()
                .filter(live)
                .find(|c| !distrusted.contains(&c.server))
                .or_else(|| info.copies.iter().find(|c| is_lost && live(c)));
            match better {
                Some(copy) => {
                    argument.source = Some(v1::call_argument::Source::Object(v1::ObjectRef {
                        server: copy.server.clone(),
                        object_id: copy.object_id.clone(),
                    }));
                }
                None if is_lost => {
                    return Err(Status::failed_precondition(format!(
                        "data handle `{id}` has no copy left: the one on {} was lost with its server",
                        bound.server
                    )));
                }
                None => {}
            }
        }
        Ok(())
    }
}

/// The reads that make a replica, of those bound to a copy on another server than the
/// task's, `(task, parameter, handle, task's server)`: of a persistent handle, by an argument
/// that only reads it, of a handle no task of the run writes; one per handle and server.
fn choose_replicas(
    uses: &DataUses,
    remote: &[(usize, u32, String, String)],
) -> Vec<(usize, u32, String)> {
    let mut chosen: Vec<(usize, u32, String)> = Vec::new();
    let mut at: Vec<(&str, &str)> = Vec::new();
    for (task, parameter, id, on) in remote {
        let persistent = uses.handles.get(id).is_some_and(|info| {
            info.spec
                .as_ref()
                .is_some_and(|s| v1::DataMode::try_from(s.mode) == Ok(v1::DataMode::Persistent))
        });
        let written = uses.writes.iter().any(|(_, _, w)| w == id);
        if !persistent || written || at.contains(&(id.as_str(), on.as_str())) {
            continue;
        }
        at.push((id, on));
        chosen.push((*task, *parameter, id.clone()));
    }
    chosen
}

/// The run's arguments with each handle it reads replaced by a copy (the one on the task's
/// server when there is one, else one on a server the run was placed on, which the
/// metaserver saw up, else the first) and each it only writes by nothing: what the servers
/// see.
/// The reads of persistent handles from other servers are noted in `uses.replicas`: the
/// tasks' servers keep them.
pub(crate) fn bind_data(
    uses: &mut DataUses,
    arguments: &mut [v1::TaskArguments],
    servers: &[String],
) {
    for args in arguments.iter_mut() {
        for argument in &mut args.arguments {
            if matches!(&argument.source, Some(v1::call_argument::Source::Data(d)) if !d.reads) {
                argument.source = None;
            }
        }
    }
    let mut remote = Vec::new();
    for (task, parameter, id) in &uses.reads {
        let (Some(info), Some(server)) = (uses.handles.get(id), servers.get(*task)) else {
            continue;
        };
        let copy = info
            .copies
            .iter()
            .find(|c| &c.server == server)
            .or_else(|| info.copies.iter().find(|c| servers.contains(&c.server)))
            .or_else(|| info.copies.first());
        let Some(copy) = copy else {
            continue;
        };
        if &copy.server != server {
            remote.push((*task, *parameter, id.clone(), server.clone()));
        }
        if let Some(argument) = arguments
            .get_mut(*task)
            .and_then(|a| a.arguments.get_mut(*parameter as usize))
        {
            argument.source = Some(v1::call_argument::Source::Object(v1::ObjectRef {
                server: copy.server.clone(),
                object_id: copy.object_id.clone(),
            }));
        }
    }
    uses.replicas = choose_replicas(uses, &remote);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(id: &str, mode: v1::DataMode, on: &[&str]) -> (String, v1::DataInfo) {
        let info = v1::DataInfo {
            id: id.into(),
            spec: Some(v1::DataSpec {
                bytes: 8,
                mode: mode as i32,
                ..Default::default()
            }),
            copies: on
                .iter()
                .map(|s| v1::DataCopy {
                    server: s.to_string(),
                    object_id: format!("{id}@{s}"),
                })
                .collect(),
            ..Default::default()
        };
        (id.to_string(), info)
    }

    fn read(id: &str) -> v1::CallArgument {
        v1::CallArgument {
            source: Some(v1::call_argument::Source::Data(v1::DataArgument {
                id: id.into(),
                reads: true,
                ..Default::default()
            })),
        }
    }

    #[test]
    fn persistent_reads_from_another_server_become_replicas_once_per_server_and_sticky_never() {
        let mut uses = DataUses {
            handles: [
                handle("p", v1::DataMode::Persistent, &["a"]),
                handle("s", v1::DataMode::Sticky, &["a"]),
                handle("w", v1::DataMode::Persistent, &["a"]),
            ]
            .into_iter()
            .collect(),
            // Tasks 0 and 1 on b read p; task 2 on a reads p where it is; task 3 on b reads
            // s and w, which task 2 writes.
            reads: vec![
                (0, 0, "p".into()),
                (1, 0, "p".into()),
                (2, 0, "p".into()),
                (3, 0, "s".into()),
                (3, 1, "w".into()),
            ],
            writes: vec![(2, 1, "w".into())],
            replicas: Vec::new(),
        };
        let mut arguments: Vec<v1::TaskArguments> = [
            vec![read("p")],
            vec![read("p")],
            vec![read("p"), v1::CallArgument::default()],
            vec![read("s"), read("w")],
        ]
        .into_iter()
        .map(|arguments| v1::TaskArguments {
            arguments,
            ..Default::default()
        })
        .collect();
        let servers: Vec<String> = ["b", "b", "a", "b"].map(String::from).into();
        bind_data(&mut uses, &mut arguments, &servers);
        assert_eq!(uses.replicas, vec![(0, 0, "p".to_string())]);
        let Some(v1::call_argument::Source::Object(object)) = &arguments[1].arguments[0].source
        else {
            panic!("p is bound to a copy");
        };
        assert_eq!(object.object_id, "p@a");
    }
}

#[cfg(test)]
mod leftover_tests;
