//! The storage role: arrays kept on this server for later calls, here or on other servers.
//! Objects live in memory up to a byte limit; past it, new objects go to the spill
//! directory. Every object has an owner (a transaction id) so a transaction's intermediates
//! are deleted together. Unknown ids are errors that name the id.
//!
//! Owners hold leases: a proxy renews its running transactions' leases, and an owner whose
//! lease runs out (its proxy or client disappeared) loses every object, so storage never
//! leaks. Times are seconds on a clock the caller passes in, so the rule is tested without
//! waiting.
//!
//! Large arrays kept in memory live in the server's store region ([`region`]) where there is
//! room, so that the executables read and write them in place; the host's other servers
//! borrow them there ([`lending`], [`borrowing`]) instead of fetching copies.

pub mod borrowing;
pub mod lending;
pub mod put;
pub mod region;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use ninf_idl::ElementType;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StorageError {
    #[error("unknown object id `{0}` (never stored here, or already deleted)")]
    UnknownObject(String),
    #[error(
        "cannot spill object `{id}` of {bytes} bytes to {path}: {reason} (memory holds \
         {memory_bytes} of its {memory_limit} bytes; calls whose outputs fit there still run)"
    )]
    Spill {
        id: String,
        bytes: u64,
        path: PathBuf,
        reason: String,
        memory_bytes: u64,
        memory_limit: u64,
    },
    #[error("cannot read spilled object `{id}` from {path}: {reason}")]
    ReadSpill {
        id: String,
        path: PathBuf,
        reason: String,
    },
    #[error("object of {bytes} bytes is not a whole number of {element} elements")]
    Ragged { bytes: u64, element: &'static str },
    #[error(
        "the objects of `{0}` were deleted while this call ran (its transaction ended or was \
         given up): its outputs are not kept"
    )]
    OwnerDeleted(String),
}

impl StorageError {
    /// The gRPC status a caller gets: a store that cannot take more is out of a resource
    /// (RESOURCE_EXHAUSTED: a proxy moves the call to another server), not a routine's error.
    pub fn status(self) -> tonic::Status {
        let message = self.to_string();
        match self {
            StorageError::UnknownObject(_) => tonic::Status::not_found(message),
            StorageError::Ragged { .. } => tonic::Status::invalid_argument(message),
            StorageError::Spill { .. } => tonic::Status::resource_exhausted(message),
            StorageError::ReadSpill { .. } => tonic::Status::internal(message),
            StorageError::OwnerDeleted(_) => tonic::Status::failed_precondition(message),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ObjectInfo {
    pub id: String,
    pub owner: String,
    pub element_type: ElementType,
    pub bytes: u64,
    pub spilled: bool,
}

#[derive(Debug)]
enum Location {
    Memory(Bytes),
    Spilled(PathBuf),
}

#[derive(Debug)]
struct StoredObject {
    owner: String,
    element_type: ElementType,
    bytes: u64,
    location: Location,
}

#[derive(Debug, Default)]
struct Objects {
    by_id: HashMap<String, StoredObject>,
    memory_bytes: u64,
    spilled_bytes: u64,
    /// When each owner's lease runs out (seconds on the caller's clock).
    leases: HashMap<String, f64>,
    /// Calls running now, by owner.
    calls: HashMap<String, u32>,
    /// Owners deleted while calls of theirs ran: a call whose caller has given up on it (a
    /// link cut off, a task moved elsewhere) may end after its transaction's clean-up, and
    /// what it keeps then would be no one's. Forgotten when the last of those calls ends.
    deleted_while_running: HashSet<String>,
}

/// A call of an owner's, running ([`ObjectStore::call_started`]).
#[derive(Debug)]
pub struct OwnerCall<'a> {
    store: &'a ObjectStore,
    owner: String,
}

impl Drop for OwnerCall<'_> {
    fn drop(&mut self) {
        if self.owner.is_empty() {
            return;
        }
        let mut objects = self.store.lock();
        let ended = match objects.calls.get_mut(&self.owner) {
            Some(running) if *running > 1 => {
                *running -= 1;
                false
            }
            _ => true,
        };
        if ended {
            objects.calls.remove(&self.owner);
            objects.deleted_while_running.remove(&self.owner);
        }
    }
}

/// The objects of one server.
#[derive(Debug)]
pub struct ObjectStore {
    objects: Mutex<Objects>,
    memory_limit: u64,
    spill_dir: PathBuf,
    /// Distinguishes this server run's ids from a previous run's.
    id_prefix: String,
    next_id: AtomicU64,
}

impl ObjectStore {
    /// A store keeping up to `memory_limit` bytes in memory and the rest in `spill_dir`.
    /// Spill files a previous run left there (a server killed before it could clean up)
    /// are removed: no one can name them any more, since ids carry a per-run nonce.
    pub fn new(memory_limit: u64, spill_dir: PathBuf) -> ObjectStore {
        let stale = remove_stale_spill_files(&spill_dir);
        if stale > 0 {
            tracing::info!(dir = %spill_dir.display(), files = stale, "removed spill files of an earlier run");
        }
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id()) << 32;
        ObjectStore {
            objects: Mutex::new(Objects::default()),
            memory_limit,
            spill_dir,
            id_prefix: format!("{nonce:016x}-"),
            next_id: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Objects> {
        // A panic while holding the lock cannot leave the map half-updated (every update is
        // a single insert or remove), so a poisoned lock is still usable.
        ninf_proto::sync::lock(&self.objects)
    }

    /// Stores an array; returns its id and where it went.
    pub fn put(
        &self,
        owner: &str,
        element_type: ElementType,
        data: Bytes,
    ) -> Result<ObjectInfo, StorageError> {
        let bytes = data.len() as u64;
        let size = element_type.size_bytes().unwrap_or(1);
        if !bytes.is_multiple_of(size) {
            return Err(StorageError::Ragged {
                bytes,
                element: element_type.keyword(),
            });
        }
        let id = format!(
            "{}{}",
            self.id_prefix,
            self.next_id.fetch_add(1, Ordering::Relaxed)
        );
        let memory_bytes = self.lock().memory_bytes;
        let location = if memory_bytes.saturating_add(bytes) <= self.memory_limit {
            Location::Memory(data)
        } else {
            let path = self.spill_dir.join(&id);
            let written = std::fs::create_dir_all(&self.spill_dir)
                .and_then(|()| std::fs::write(&path, &data));
            if let Err(e) = written {
                // A full disk leaves part of the file: it must not hold the space.
                let _ = std::fs::remove_file(&path);
                return Err(StorageError::Spill {
                    id,
                    bytes,
                    path,
                    reason: e.to_string(),
                    memory_bytes,
                    memory_limit: self.memory_limit,
                });
            }
            Location::Spilled(path)
        };
        let spilled = matches!(location, Location::Spilled(_));
        let mut objects = self.lock();
        if objects.deleted_while_running.contains(owner) {
            if let Location::Spilled(path) = &location {
                let _ = std::fs::remove_file(path);
            }
            return Err(StorageError::OwnerDeleted(owner.to_string()));
        }
        if spilled {
            objects.spilled_bytes += bytes;
        } else {
            objects.memory_bytes += bytes;
        }
        tracing::debug!(object = %id, owner, bytes, "object stored");
        objects.by_id.insert(
            id.clone(),
            StoredObject {
                owner: owner.to_string(),
                element_type,
                bytes,
                location,
            },
        );
        Ok(ObjectInfo {
            id,
            owner: owner.to_string(),
            element_type,
            bytes,
            spilled,
        })
    }

    fn info(id: &str, object: &StoredObject) -> ObjectInfo {
        ObjectInfo {
            id: id.to_string(),
            owner: object.owner.clone(),
            element_type: object.element_type,
            bytes: object.bytes,
            spilled: matches!(object.location, Location::Spilled(_)),
        }
    }

    pub fn stat(&self, id: &str) -> Result<ObjectInfo, StorageError> {
        let objects = self.lock();
        let object = objects
            .by_id
            .get(id)
            .ok_or_else(|| StorageError::UnknownObject(id.to_string()))?;
        Ok(Self::info(id, object))
    }

    /// The object's data (read back from disk if it was spilled).
    pub fn get(&self, id: &str) -> Result<(ObjectInfo, Bytes), StorageError> {
        let (info, spilled_path) = {
            let objects = self.lock();
            let object = objects
                .by_id
                .get(id)
                .ok_or_else(|| StorageError::UnknownObject(id.to_string()))?;
            match &object.location {
                Location::Memory(data) => return Ok((Self::info(id, object), data.clone())),
                Location::Spilled(path) => (Self::info(id, object), path.clone()),
            }
        };
        let data = std::fs::read(&spilled_path).map_err(|e| StorageError::ReadSpill {
            id: id.to_string(),
            path: spilled_path.clone(),
            reason: e.to_string(),
        })?;
        Ok((info, Bytes::from(data)))
    }

    fn remove(objects: &mut Objects, id: &str) -> Option<u64> {
        let object = objects.by_id.remove(id)?;
        match object.location {
            Location::Memory(_) => objects.memory_bytes -= object.bytes,
            Location::Spilled(path) => {
                objects.spilled_bytes -= object.bytes;
                let _ = std::fs::remove_file(path);
            }
        }
        Some(object.bytes)
    }

    /// Gives object `id` to `owner`.
    pub fn adopt(&self, id: &str, owner: &str) -> Result<ObjectInfo, StorageError> {
        let mut objects = self.lock();
        let object = objects
            .by_id
            .get_mut(id)
            .ok_or_else(|| StorageError::UnknownObject(id.to_string()))?;
        tracing::debug!(object = id, from = %object.owner, to = owner, "object adopted");
        object.owner = owner.to_string();
        Ok(Self::info(id, object))
    }

    pub fn delete(&self, id: &str) -> Result<u64, StorageError> {
        tracing::debug!(object = id, "object deleted");
        Self::remove(&mut self.lock(), id)
            .ok_or_else(|| StorageError::UnknownObject(id.to_string()))
    }

    /// Deletes every object of `owner`; returns how many objects and bytes went.
    pub fn delete_owner(&self, owner: &str) -> (u64, u64) {
        let mut objects = self.lock();
        let ids: Vec<String> = objects
            .by_id
            .iter()
            .filter(|(_, o)| o.owner == owner)
            .map(|(id, _)| id.clone())
            .collect();
        let mut bytes = 0;
        for id in &ids {
            bytes += Self::remove(&mut objects, id).unwrap_or(0);
        }
        tracing::debug!(owner, objects = ids.len(), bytes, "owner's objects deleted");
        objects.leases.remove(owner);
        if objects.calls.contains_key(owner) {
            objects.deleted_while_running.insert(owner.to_string());
        }
        (ids.len() as u64, bytes)
    }

    /// Counts a call of `owner` as running until the guard returned drops: if the owner is
    /// deleted meanwhile, the call keeps nothing more for it.
    pub fn call_started(&self, owner: &str) -> OwnerCall<'_> {
        if !owner.is_empty() {
            *self.lock().calls.entry(owner.to_string()).or_insert(0) += 1;
        }
        OwnerCall {
            store: self,
            owner: owner.to_string(),
        }
    }

    /// Renews `owner`'s lease to run out no sooner than `now + lease`; returns how many
    /// objects it holds.
    pub fn renew(&self, owner: &str, now: f64, lease: f64) -> u64 {
        let mut objects = self.lock();
        let until = now + lease;
        let entry = objects.leases.entry(owner.to_string()).or_insert(until);
        *entry = entry.max(until);
        objects.by_id.values().filter(|o| o.owner == owner).count() as u64
    }

    /// Deletes the objects of every owner whose lease ran out by `now`. An owner seen for
    /// the first time gets a lease of `lease` from `now`. Returns the owners that expired,
    /// with the objects and bytes deleted.
    pub fn expire(&self, now: f64, lease: f64) -> Vec<(String, u64, u64)> {
        let mut objects = self.lock();
        let owners: std::collections::BTreeSet<String> =
            objects.by_id.values().map(|o| o.owner.clone()).collect();
        let mut expired = Vec::new();
        for owner in owners {
            let until = *objects.leases.entry(owner.clone()).or_insert(now + lease);
            if until <= now {
                expired.push(owner);
            }
        }
        // Leases of owners with nothing stored only keep a renewal alive; drop stale ones.
        let holding: std::collections::HashSet<&String> =
            objects.by_id.values().map(|o| &o.owner).collect();
        let stale: Vec<String> = objects
            .leases
            .iter()
            .filter(|(owner, until)| !holding.contains(owner) && **until <= now)
            .map(|(owner, _)| owner.clone())
            .collect();
        for owner in stale {
            objects.leases.remove(&owner);
        }
        drop(objects);
        expired
            .into_iter()
            .map(|owner| {
                let (count, bytes) = self.delete_owner(&owner);
                (owner, count, bytes)
            })
            .collect()
    }

    /// Bytes held in memory and in the spill directory.
    pub fn usage(&self) -> (u64, u64) {
        let objects = self.lock();
        (objects.memory_bytes, objects.spilled_bytes)
    }

    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for ObjectStore {
    fn drop(&mut self) {
        let objects = self.lock();
        for object in objects.by_id.values() {
            if let Location::Spilled(path) = &object.location {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

/// An object id as [`ObjectStore::put`] makes them: 16 hex digits, a dash, a number.
fn is_object_id(name: &str) -> bool {
    match name.split_once('-') {
        Some((nonce, number)) => {
            nonce.len() == 16
                && nonce.bytes().all(|b| b.is_ascii_hexdigit())
                && !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Removes the files in `dir` named like object ids; returns how many.
fn remove_stale_spill_files(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(is_object_id))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_removes_the_spill_files_of_an_earlier_run_and_nothing_else() {
        let dir = temp_dir("stale");
        let old = ObjectStore::new(0, dir.clone());
        let spilled = old
            .put("t1", ElementType::Double, Bytes::from(vec![1u8; 8]))
            .unwrap();
        assert!(dir.join(&spilled.id).exists());
        // The old server is killed: its store is never dropped or cleaned.
        std::mem::forget(old);
        std::fs::write(dir.join("notes.txt"), b"keep me").unwrap();
        let _new = ObjectStore::new(0, dir.clone());
        assert!(!dir.join(&spilled.id).exists());
        assert!(dir.join("notes.txt").exists());
        assert!(is_object_id("0123456789abcdef-42"));
        assert!(!is_object_id("0123456789abcdef-"));
        assert!(!is_object_id("notes-1"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn temp_dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("ninf-store-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn objects_spill_past_the_memory_limit_and_come_back() {
        let dir = temp_dir("spill");
        let store = ObjectStore::new(16, dir.clone());
        let a = store
            .put("t1", ElementType::Double, Bytes::from(vec![1u8; 16]))
            .unwrap();
        assert!(!a.spilled);
        let b = store
            .put("t1", ElementType::Double, Bytes::from(vec![2u8; 8]))
            .unwrap();
        assert!(b.spilled, "16 + 8 bytes exceeds the 16-byte limit");
        assert_eq!(store.usage(), (16, 8));
        assert_eq!(store.get(&b.id).unwrap().1, Bytes::from(vec![2u8; 8]));
        assert!(dir.join(&b.id).exists());
        store.delete(&b.id).unwrap();
        assert!(
            !dir.join(&b.id).exists(),
            "deleting a spilled object removes its file"
        );
        assert_eq!(store.usage(), (16, 0));
    }

    #[test]
    fn an_owner_deleted_while_its_calls_run_gets_nothing_kept_until_the_last_ends() {
        let store = ObjectStore::new(1 << 20, temp_dir("running"));
        let data = |n: usize| Bytes::from(vec![0u8; n]);
        let put = |owner: &str| store.put(owner, ElementType::Char, data(4));
        let first = store.call_started("g1");
        let second = store.call_started("g1");
        let other = store.call_started("g2");
        put("g1").unwrap();
        assert_eq!(store.delete_owner("g1"), (1, 4));
        // The calls still running end after the clean-up: what they keep is refused.
        assert_eq!(put("g1"), Err(StorageError::OwnerDeleted("g1".into())));
        put("g2").unwrap();
        drop(first);
        assert_eq!(put("g1"), Err(StorageError::OwnerDeleted("g1".into())));
        drop(second);
        // No call of g1's left: the name is free again, as it was before.
        put("g1").unwrap();
        // Deleted with no call running: nothing is remembered.
        drop(other);
        store.delete_owner("g2");
        put("g2").unwrap();
        assert_eq!(store.usage().0, 8, "nothing refused was stored");
    }

    #[test]
    fn an_owner_whose_lease_runs_out_loses_its_objects() {
        let store = ObjectStore::new(1 << 20, temp_dir("leases"));
        let data = |n: usize| Bytes::from(vec![0u8; n]);
        store.put("t1", ElementType::Char, data(10)).unwrap();
        store.put("t2", ElementType::Char, data(20)).unwrap();
        store.put("t2", ElementType::Char, data(5)).unwrap();
        // First sight at 0 s: both get a 10 s lease.
        assert!(store.expire(0.0, 10.0).is_empty());
        // t1 is renewed at 8 s (its proxy is alive); t2's proxy is gone.
        assert_eq!(store.renew("t1", 8.0, 10.0), 1);
        assert!(store.expire(9.9, 10.0).is_empty());
        assert_eq!(store.expire(10.0, 10.0), vec![("t2".to_string(), 2, 25)]);
        assert_eq!(store.len(), 1);
        // A renewal never shortens a lease.
        assert_eq!(store.renew("t1", 1.0, 1.0), 1);
        assert!(store.expire(17.9, 10.0).is_empty());
        assert_eq!(store.expire(18.0, 10.0), vec![("t1".to_string(), 1, 10)]);
        assert!(store.is_empty());
        assert_eq!(store.usage(), (0, 0));
        // An owner deleted on purpose takes its lease with it; a new object starts afresh.
        store.renew("t3", 20.0, 10.0);
        store.put("t3", ElementType::Char, data(1)).unwrap();
        assert_eq!(store.delete_owner("t3"), (1, 1));
        store.put("t3", ElementType::Char, data(1)).unwrap();
        assert!(
            store.expire(35.0, 10.0).is_empty(),
            "a fresh lease from 35 s"
        );
        assert_eq!(store.expire(45.0, 10.0).len(), 1);
    }

    #[test]
    fn owners_delete_together_and_unknown_ids_are_errors() {
        let store = ObjectStore::new(1 << 20, temp_dir("owners"));
        let a = store
            .put("t1", ElementType::Int, Bytes::from(vec![0u8; 8]))
            .unwrap();
        store
            .put("t1", ElementType::Int, Bytes::from(vec![0u8; 4]))
            .unwrap();
        let c = store
            .put("t2", ElementType::Int, Bytes::from(vec![0u8; 4]))
            .unwrap();
        assert_eq!(store.delete_owner("t1"), (2, 12));
        assert_eq!(store.len(), 1);
        assert_eq!(store.stat(&c.id).unwrap().owner, "t2");
        // An adopted object goes with its new owner, not its old one.
        assert_eq!(store.adopt(&c.id, "data-1").unwrap().owner, "data-1");
        assert_eq!(store.delete_owner("t2"), (0, 0));
        assert_eq!(store.delete_owner("data-1"), (1, 4));
        assert!(store.adopt(&c.id, "x").is_err());
        let error = store.get(&a.id).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "unknown object id `{}` (never stored here, or already deleted)",
                a.id
            )
        );
        assert!(store.delete(&a.id).is_err());
        assert!(
            store
                .put("t3", ElementType::Double, Bytes::from(vec![0u8; 7]))
                .is_err()
        );
    }
}
