//! Data kept on the grid between transactions (docs/data.md), at the proxy: a client's put,
//! get, free, list and renewal of its handles, and the handles in its runs. The metaserver
//! records every handle and its copies (`DataRecords`); the bytes live in the compute
//! servers' storage under the handle's id as their owner, so that freeing a handle is
//! deleting one owner and its lease is that owner's lease.
//!
//! In a run, a handle an argument reads becomes one of its copies (the one on the task's
//! server when there is one); a handle it writes becomes a kept output, given to the handle
//! once the run has succeeded, its older copies deleted. A run that fails changes no handle.

use std::collections::BTreeMap;

use bytes::Bytes;
use ninf_proto::v1;
use tonic::Status;

use crate::metaserver::{DataRecordsReply, DataRecordsRequest};
use crate::{Executed, Failed, Proxy};

/// The handles a run's arguments name, looked up once before it is placed.
#[derive(Debug, Default)]
pub(crate) struct DataUses {
    /// By handle id.
    handles: BTreeMap<String, v1::DataInfo>,
    /// (task, parameter, handle id) of every argument that reads a handle.
    reads: Vec<(usize, u32, String)>,
    /// (task, parameter, handle id) of every output that becomes a handle's value.
    pub(crate) writes: Vec<(usize, u32, String)>,
}

fn unexpected(what: &str) -> Status {
    Status::internal(format!(
        "the metaserver answered {what} with something else"
    ))
}

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

    /// Makes a handle of `spec` for `owner` and stores `data` as its value (none for an
    /// empty handle).
    pub async fn put_data(
        &self,
        owner: &str,
        spec: v1::DataSpec,
        data: Bytes,
    ) -> Result<v1::DataInfo, Status> {
        if !spec.empty && data.len() as u64 != spec.bytes {
            return Err(Status::invalid_argument(format!(
                "the put says {} bytes but sent {}",
                spec.bytes,
                data.len()
            )));
        }
        let element_type = spec.element_type;
        let empty = spec.empty;
        let request = v1::CreateDataRequest {
            owner: owner.to_string(),
            spec: Some(spec),
        };
        let DataRecordsReply::Created(created) =
            self.records(DataRecordsRequest::Create(request)).await?
        else {
            return Err(unexpected("a new handle"));
        };
        let mut info = created.info.unwrap_or_default();
        self.delete_copies(&info.id, &created.evicted).await;
        if empty {
            return Ok(info);
        }
        let servers = if created.servers.is_empty() {
            vec![created.server]
        } else {
            created.servers
        };
        let array = v1::Array { element_type, data };
        for server in &servers {
            match self.cluster.put(server, &info.id, array.clone()).await {
                Ok(object) => info = self.add_copy(owner, &info.id, object, false).await?,
                Err(status) => {
                    // Nothing is half made: the record and the copies stored go.
                    let _ = self.free_data(owner, &info.id).await;
                    return Err(Status::unavailable(format!(
                        "cannot store data handle `{}` on {server}: {}",
                        info.id,
                        status.message()
                    )));
                }
            }
        }
        Ok(info)
    }

    /// Records `object` as a copy of `owner`'s handle `id` (with `replace`, its only one:
    /// the older copies are deleted).
    async fn add_copy(
        &self,
        owner: &str,
        id: &str,
        object: v1::ObjectRef,
        replace: bool,
    ) -> Result<v1::DataInfo, Status> {
        let request = v1::AddCopyRequest {
            id: id.to_string(),
            owner: owner.to_string(),
            copy: Some(v1::DataCopy {
                server: object.server,
                object_id: object.object_id,
            }),
            replace,
        };
        let DataRecordsReply::CopyAdded(added) =
            self.records(DataRecordsRequest::AddCopy(request)).await?
        else {
            return Err(unexpected("a new copy"));
        };
        self.delete_copies(id, &added.stale).await;
        Ok(added.info.unwrap_or_default())
    }

    /// Deletes copies the records no longer list (old values, evicted replicas) from their
    /// servers; one that cannot be deleted now goes with its lease.
    async fn delete_copies(&self, id: &str, copies: &[v1::DataCopy]) {
        for copy in copies {
            let object = v1::ObjectRef {
                server: copy.server.clone(),
                object_id: copy.object_id.clone(),
            };
            if let Err(status) = self.cluster.delete(&object).await {
                tracing::warn!(%id, server = %copy.server, error = %status.message(), "cannot delete a copy the records dropped; its lease will");
            }
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

    /// Frees `owner`'s handle `id`: its record, then its bytes on every server holding them.
    pub async fn free_data(&self, owner: &str, id: &str) -> Result<v1::DataInfo, Status> {
        let info = self.forget_record(owner, id).await?;
        for copy in &info.copies {
            self.delete_owner(&copy.server, id).await;
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

    /// Looks up every handle the run's arguments name (the client's own only) and tells the
    /// metaserver where those it reads are, in the graph's tasks.
    pub(crate) async fn resolve_data(
        &self,
        owner: &str,
        graph: &mut v1::TaskGraph,
        arguments: &[v1::TaskArguments],
    ) -> Result<DataUses, Status> {
        let mut uses = DataUses::default();
        for (task, args) in arguments.iter().enumerate() {
            for (parameter, argument) in args.arguments.iter().enumerate() {
                let Some(v1::call_argument::Source::Data(data)) = &argument.source else {
                    continue;
                };
                if !uses.handles.contains_key(&data.id) {
                    let info = self.lookup_data(owner, &data.id).await?;
                    uses.handles.insert(data.id.clone(), info);
                }
                let info = &uses.handles[&data.id];
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

    /// A run's outcome once the outputs that become handles' values are given to them: a
    /// run that cannot keep them fails (and its kept objects go with its other
    /// intermediates).
    pub(crate) async fn keep_data_outputs(
        &self,
        owner: &str,
        uses: &DataUses,
        outcome: Result<Executed, Failed>,
    ) -> Result<Executed, Failed> {
        let executed = match outcome {
            Ok(executed) if !uses.writes.is_empty() => executed,
            other => return other,
        };
        match self
            .store_data_outputs(owner, uses, &executed.data_objects)
            .await
        {
            Ok(()) => Ok(executed),
            Err(status) => Err(Failed {
                status,
                actuals: executed.actuals,
                makespan: executed.makespan,
                incidents: executed.incidents,
            }),
        }
    }

    /// Gives each output that becomes a handle's value to its handle, once the run has
    /// succeeded: `objects` are where the run kept them.
    pub(crate) async fn store_data_outputs(
        &self,
        owner: &str,
        uses: &DataUses,
        objects: &[(usize, u32, v1::ObjectRef)],
    ) -> Result<(), Status> {
        for (task, parameter, id) in &uses.writes {
            let Some((_, _, object)) = objects.iter().find(|(t, p, _)| t == task && p == parameter)
            else {
                return Err(Status::internal(format!(
                    "task {task} did not keep parameter {parameter}, the new value of data \
                     handle `{id}`"
                )));
            };
            self.cluster.adopt(object, id).await.map_err(|status| {
                Status::unavailable(format!(
                    "cannot keep the new value of data handle `{id}` on {}: {}",
                    object.server,
                    status.message()
                ))
            })?;
            self.add_copy(owner, id, object.clone(), true).await?;
        }
        Ok(())
    }
}

/// The run's arguments with each handle it reads replaced by a copy (the one on the task's
/// server when there is one, else one on a server the run was placed on, which the
/// metaserver saw up, else the first) and each it only writes by nothing: what the servers
/// see.
pub(crate) fn bind_data(uses: &DataUses, arguments: &mut [v1::TaskArguments], servers: &[String]) {
    for args in arguments.iter_mut() {
        for argument in &mut args.arguments {
            if matches!(&argument.source, Some(v1::call_argument::Source::Data(d)) if !d.reads) {
                argument.source = None;
            }
        }
    }
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
}
