//! A run's data writes, applied once it has succeeded: each output that becomes a handle's
//! value is given to its handle (adopted by it on its server, recorded as its copy, copied to
//! the handle's other replicas), and the inputs kept where they were read become replicas.
//!
//! Writes are not idempotent as a run: a run over a handle it wrote reads the new value (a
//! `dgefa` in place would factor the factors). So a journaled transaction records what it
//! did ([`v1::JournaledCommit`], its reply and its writes) durably before the first write: a
//! proxy that restarts after that point finishes the writes from the journal and answers the
//! client from it instead of running the transaction again. Each step of applying a commit
//! can be done twice (adopting an object its handle owns already, recording a copy the
//! records list already), so applying it again after a crash midway is safe.

use ninf_proto::v1;
use tonic::Status;

use super::DataUses;
use crate::leftovers::Leftover;
use crate::{Executed, Failed, Proxy, journal};

impl Proxy {
    /// A run's outcome once the outputs that become handles' values are given to them: a
    /// run that cannot keep them fails (and its kept objects go with its other
    /// intermediates). A run resumed from its journaled commit (`executed.commit`) only
    /// applies it; another journals its commit first when it writes any handle and has a
    /// journal `key`.
    pub(crate) async fn keep_data_outputs(
        &self,
        key: Option<&str>,
        owner: &str,
        uses: &DataUses,
        outcome: Result<Executed, Failed>,
    ) -> Result<Executed, Failed> {
        let mut executed = match outcome {
            Ok(executed)
                if !uses.writes.is_empty()
                    || !executed.data_replicas.is_empty()
                    || executed.commit.is_some() =>
            {
                executed
            }
            other => return other,
        };
        let commit = match executed.commit.take() {
            Some(commit) => commit,
            None => match uses.commit(&executed) {
                Ok(commit) => {
                    self.journal_commit(key, &commit, &executed).await;
                    commit
                }
                Err(status) => return Err(executed.failed(status)),
            },
        };
        match self.apply_commit(owner, &commit).await {
            Ok(()) => Ok(executed),
            Err(status) => Err(executed.failed(status)),
        }
    }

    /// Records `commit`, with the run's reply, before any of its writes is applied.
    async fn journal_commit(
        &self,
        key: Option<&str>,
        commit: &v1::JournaledCommit,
        executed: &Executed,
    ) {
        let Some(key) = key else {
            return;
        };
        if commit.writes.is_empty() {
            // Only reads: running it again changes nothing.
            return;
        }
        let journaled = v1::JournaledCommit {
            tasks: executed.reports.clone(),
            makespan: executed.makespan,
            ..commit.clone()
        };
        self.journal
            .record_durably(journal::Entry::Committed {
                transaction_id: key.to_string(),
                commit: journaled,
            })
            .await;
    }

    /// Applies `commit` for the handles' `owner`: its writes (an error if one cannot be
    /// kept), then its replicas (each kept where it fits, or dropped).
    pub(crate) async fn apply_commit(
        &self,
        owner: &str,
        commit: &v1::JournaledCommit,
    ) -> Result<(), Status> {
        for write in &commit.writes {
            let id = &write.handle;
            let written = write.object.clone().unwrap_or_default();
            let (object, further) = self
                .adopt_new_value(id, written, &commit.written_copies)
                .await?;
            let added = self
                .add_copy(owner, id, object.clone(), (true, false), further)
                .await?;
            self.delete_old_copies(id, commit, &added).await;
            self.replicate(owner, id, &object, &added.replicate_to)
                .await;
        }
        for replica in &commit.replicas {
            self.keep_replica(owner, replica).await;
        }
        Ok(())
    }

    /// Deletes handle `id`'s old copies the run found (`commit.old_copies`) that its
    /// records, now holding the new value (`added`), no longer name. The records named them
    /// as stale too, the first time; this also reaches those whose deletion a proxy that
    /// died after the record never asked for.
    async fn delete_old_copies(
        &self,
        id: &str,
        commit: &v1::JournaledCommit,
        added: &v1::AddCopyReply,
    ) {
        let recorded = added.info.as_ref().map_or(&[][..], |i| &i.copies[..]);
        let old: Vec<v1::DataCopy> = commit
            .old_copies
            .iter()
            .filter(|c| c.handle == id)
            .filter_map(|c| c.object.as_ref())
            .map(|o| v1::DataCopy {
                server: o.server.clone(),
                object_id: o.object_id.clone(),
            })
            .filter(|c| !recorded.contains(c) && !added.stale.contains(c))
            .collect();
        self.delete_copies(&old).await;
    }

    /// Gives handle `id` its new value: the object its writer kept (`written`), and the
    /// copies made before the commit. Where the writer's server cannot adopt it (it died
    /// since the run), the first copy stands in for it; an error where there is none.
    async fn adopt_new_value(
        &self,
        id: &str,
        written: v1::ObjectRef,
        copies: &[v1::HandleObject],
    ) -> Result<(v1::ObjectRef, Vec<v1::DataCopy>), Status> {
        let adopted = self.cluster.adopt(&written, id).await;
        let mut further = self.adopt_written_copies(id, copies).await;
        let Err(status) = adopted else {
            return Ok((written, further));
        };
        // Adopted or not (its reply may be what was lost), the writer's object is no one's.
        self.delete_leftover_later(Leftover::Object(written.clone()));
        if further.is_empty() {
            return Err(Status::unavailable(format!(
                "cannot keep the new value of data handle `{id}` on {}: {}",
                written.server,
                status.message()
            )));
        }
        let stand_in = further.remove(0);
        tracing::warn!(%id, server = %written.server, copy = %stand_in.server, error = %status.message(), "the new value's writer cannot keep it; its copy stands in");
        let object = v1::ObjectRef {
            server: stand_in.server,
            object_id: stand_in.object_id,
        };
        Ok((object, further))
    }

    /// Gives handle `id` the copies of its new value made before the commit (`copies` lists
    /// every written handle's): those adopted, to be recorded with the value. One that
    /// cannot be adopted (its server died since) is deleted when its server answers.
    async fn adopt_written_copies(
        &self,
        id: &str,
        copies: &[v1::HandleObject],
    ) -> Vec<v1::DataCopy> {
        let mut adopted = Vec::new();
        for copy in copies.iter().filter(|c| c.handle == id) {
            let object = copy.object.clone().unwrap_or_default();
            match self.cluster.adopt(&object, id).await {
                Ok(()) => adopted.push(v1::DataCopy {
                    server: object.server,
                    object_id: object.object_id,
                }),
                Err(status) => {
                    tracing::warn!(%id, server = %object.server, error = %status.message(), "a copy of a new value made before the commit is lost");
                    self.delete_leftover_later(Leftover::Object(object));
                }
            }
        }
        adopted
    }

    /// Records an input a server kept as a replica of the handle it read, if it fits; else
    /// it stays the run's intermediate, deleted with them. A replica not recorded costs
    /// nothing but its transfer, which the call paid already.
    async fn keep_replica(&self, owner: &str, replica: &v1::HandleObject) {
        let object = replica.object.clone().unwrap_or_default();
        let id = &replica.handle;
        if let Err(status) = self.cluster.adopt(&object, id).await {
            tracing::debug!(%id, server = %object.server, error = %status.message(), "replica not adopted");
            // A lost reply may have given it to the handle all the same, which would keep it
            // from going with the run's intermediates.
            self.delete_leftover_later(Leftover::Object(object));
            return;
        }
        match self
            .add_copy(owner, id, object.clone(), (false, true), Vec::new())
            .await
        {
            Ok(added)
                if added
                    .info
                    .as_ref()
                    .is_some_and(|i| i.copies.iter().any(|c| c.object_id == object.object_id)) =>
            {
                tracing::debug!(%id, server = %object.server, "replica kept");
            }
            Ok(_) => {}
            Err(status) => {
                tracing::debug!(%id, server = %object.server, error = %status.message(), "replica not recorded");
                let stale = v1::DataCopy {
                    server: object.server.clone(),
                    object_id: object.object_id.clone(),
                };
                self.delete_copies(&[stale]).await;
            }
        }
    }
}

impl DataUses {
    /// What a run that succeeded writes: each handle it writes with the object its new
    /// value was kept as, and each replica it kept with its handle (no reply: see
    /// [`Proxy::keep_data_outputs`]). An error if a written output was not kept.
    fn commit(&self, executed: &Executed) -> Result<v1::JournaledCommit, Status> {
        let mut writes = Vec::with_capacity(self.writes.len());
        for (task, parameter, id) in &self.writes {
            let Some((_, _, object)) = executed
                .data_objects
                .iter()
                .find(|(t, p, _)| t == task && p == parameter)
            else {
                return Err(Status::internal(format!(
                    "task {task} did not keep parameter {parameter}, the new value of data \
                     handle `{id}`"
                )));
            };
            writes.push(v1::HandleObject {
                handle: id.clone(),
                object: Some(object.clone()),
            });
        }
        let replicas = executed
            .data_replicas
            .iter()
            .filter_map(|(task, parameter, object)| {
                let (_, _, id) = self
                    .replicas
                    .iter()
                    .find(|(t, p, _)| t == task && p == parameter)?;
                Some(v1::HandleObject {
                    handle: id.clone(),
                    object: Some(object.clone()),
                })
            })
            .collect();
        let written_copies = executed
            .written_copies
            .iter()
            .filter_map(|(task, parameter, object)| {
                Some(v1::HandleObject {
                    handle: self.written_handle(*task, *parameter)?.to_string(),
                    object: Some(object.clone()),
                })
            })
            .collect();
        let old_copies = writes
            .iter()
            .filter_map(|write| self.handles.get(&write.handle))
            .flat_map(|info| {
                info.copies.iter().map(|copy| v1::HandleObject {
                    handle: info.id.clone(),
                    object: Some(v1::ObjectRef {
                        server: copy.server.clone(),
                        object_id: copy.object_id.clone(),
                    }),
                })
            })
            .collect();
        Ok(v1::JournaledCommit {
            writes,
            replicas,
            written_copies,
            old_copies,
            ..Default::default()
        })
    }
}
