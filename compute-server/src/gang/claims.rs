//! Cores that servers on one host lend each other. Each server of a local grid runs on cores
//! of its own (`[gang] cores`), so when one of them has nothing to do its cores idle while
//! another server's call computes alone. With `[gang] core_claims` (a directory every server
//! of the host names), each core has a file there:
//!
//! - every call of a server holds a **shared** lock on the files of the server's own cores
//!   while it runs ([`CoreClaims::own`]); it waits for a borrower to give them back;
//! - a call of a routine declared `Threads`, which its proxy says runs alone in its graph,
//!   tries an **exclusive** lock on each of `[gang] spare_cores` without waiting
//!   ([`CoreClaims::borrow`]): it gets exactly the cores whose owners run nothing now, and
//!   computes with one more thread for each.
//!
//! Locks are `flock`s on open files, so a server that dies gives its cores back at once. A
//! borrower never waits, so no two servers can wait for each other. What this costs the
//! owner: a call arriving while its core is lent waits for the borrowing call to end.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, TryLockError};

/// The cores of one server and the directory the host's servers claim cores in.
#[derive(Debug, Clone)]
pub struct CoreClaims {
    dir: PathBuf,
    own: Vec<Arc<OwnCore>>,
    spare: Vec<u32>,
}

/// One of the server's own cores: its file, opened once, and how many of the server's calls
/// hold it. The first call takes the shared lock and the last gives it up, so that a call
/// costs a counter, not a system call, while others run (10,000 tiny calls lost 11-14% of
/// their rate to a lock taken and dropped per call).
#[derive(Debug)]
struct OwnCore {
    core: u32,
    file: File,
    holders: Mutex<usize>,
}

/// Cores held for one call; dropping it gives them back.
#[derive(Debug, Default)]
pub struct Held {
    files: Vec<File>,
    /// The cores held, in the order claimed.
    pub cores: Vec<u32>,
}

/// A call's hold on its server's own cores; dropping it gives them up.
#[derive(Debug, Default)]
pub struct OwnHeld {
    cores: Vec<Arc<OwnCore>>,
}

impl CoreClaims {
    /// Claims in `dir` (created if missing) for a server on `own` cores that may borrow
    /// `spare` ones.
    pub fn new(dir: &Path, own: Vec<u32>, spare: Vec<u32>) -> io::Result<CoreClaims> {
        std::fs::create_dir_all(dir)?;
        let spare = spare.into_iter().filter(|c| !own.contains(c)).collect();
        let own = own
            .into_iter()
            .map(|core| {
                Ok(Arc::new(OwnCore {
                    core,
                    file: open(dir, core)?,
                    holders: Mutex::new(0),
                }))
            })
            .collect::<io::Result<_>>()?;
        Ok(CoreClaims {
            dir: dir.to_path_buf(),
            own,
            spare,
        })
    }

    /// Holds this server's own cores for a call, waiting while a borrower has any of them.
    pub async fn own(&self) -> io::Result<OwnHeld> {
        let mut held = OwnHeld::default();
        for core in &self.own {
            if !core.join_at_once()? {
                // Lent out (or another call is taking it): wait off the async threads.
                let waiting = core.clone();
                tokio::task::spawn_blocking(move || waiting.join_waiting())
                    .await
                    .map_err(io::Error::other)??;
            }
            held.cores.push(core.clone());
        }
        Ok(held)
    }

    /// Takes every spare core whose owner runs nothing now, without waiting.
    pub fn borrow(&self) -> Held {
        let mut held = Held::default();
        for &core in &self.spare {
            let Ok(file) = self.open(core) else { continue };
            if lock(&file, libc::LOCK_EX | libc::LOCK_NB).unwrap_or(false) {
                held.push(core, file);
            }
        }
        held
    }

    /// The threads a lone call of a `Threads` routine computes with: one on this server's
    /// core and one on each spare core idle now. Only a server of one core borrows: a call
    /// of a server with several does not know which of them its column runs on.
    pub fn lend(&self) -> Lent {
        let [mine] = &self.own[..] else {
            return Lent::default();
        };
        let mine = mine.core;
        let held = self.borrow();
        if held.cores.is_empty() {
            return Lent::default();
        }
        Lent {
            threads: 1 + held.cores.len() as u32,
            cores: std::iter::once(mine)
                .chain(held.cores.iter().copied())
                .collect(),
            _held: held,
        }
    }

    fn open(&self, core: u32) -> io::Result<File> {
        open(&self.dir, core)
    }
}

fn open(dir: &Path, core: u32) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join(format!("core-{core}")))
}

impl OwnCore {
    /// Counts one more holder if that needs no wait: others hold the core already, or its
    /// lock is free now. `false`: the caller must wait ([`OwnCore::join_waiting`]).
    fn join_at_once(&self) -> io::Result<bool> {
        let mut holders = match self.holders.try_lock() {
            Ok(holders) => holders,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(false),
        };
        if *holders == 0 && !lock(&self.file, libc::LOCK_SH | libc::LOCK_NB)? {
            return Ok(false);
        }
        *holders += 1;
        Ok(true)
    }

    /// Counts one more holder, waiting for a borrower to give the core back. The count's
    /// lock is held meanwhile: no holder exists then (a borrower had the core), so only
    /// other waiters wait for it, and each is counted once the core is back.
    fn join_waiting(&self) -> io::Result<()> {
        let mut holders = ninf_proto::sync::lock(&self.holders);
        if *holders == 0 {
            lock(&self.file, libc::LOCK_SH)?;
        }
        *holders += 1;
        Ok(())
    }
}

impl Drop for OwnHeld {
    fn drop(&mut self) {
        for core in &self.cores {
            let mut holders = ninf_proto::sync::lock(&core.holders);
            *holders = holders.saturating_sub(1);
            if *holders == 0 {
                let _ = lock(&core.file, libc::LOCK_UN);
            }
        }
    }
}

/// Threads and cores lent to one call; dropping it gives the cores back.
#[derive(Debug, Default)]
pub struct Lent {
    /// 0 when nothing was lent (the call computes as it always does, on one thread).
    pub threads: u32,
    pub cores: Vec<u32>,
    /// Kept for its locks, which dropping it releases.
    _held: Held,
}

impl Held {
    fn push(&mut self, core: u32, file: File) {
        self.cores.push(core);
        self.files.push(file);
    }
}

/// `flock(file, operation)`: `Ok(false)` when a non-blocking lock is held by someone else.
fn lock(file: &File, operation: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: flock only reads the descriptor, which `file` keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_core_is_lent_only_while_its_owner_runs_nothing_and_the_owner_waits_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = CoreClaims::new(dir.path(), vec![0], vec![1]).unwrap();
        let second = CoreClaims::new(dir.path(), vec![1], vec![0]).unwrap();

        // The second server runs a call: its core is not lent.
        let running = second.own().await.unwrap();
        assert!(first.borrow().cores.is_empty());
        // Two calls of one server hold its core together.
        let also_running = second.own().await.unwrap();
        drop(running);
        assert!(first.borrow().cores.is_empty());
        drop(also_running);

        // Idle now: the first server's lone call borrows it, and a second borrow fails.
        let _mine = first.own().await.unwrap();
        let lent = first.borrow();
        assert_eq!(lent.cores, vec![1]);
        assert!(first.borrow().cores.is_empty());

        // The owner's next call waits until the borrowing call gives the core back.
        let owner = tokio::spawn(async move { second.own().await.map(|h| h.cores.len()) });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!owner.is_finished(), "the owner ran on a lent core");
        drop(lent);
        assert_eq!(owner.await.unwrap().unwrap(), 1);
    }

    #[test]
    fn a_server_does_not_borrow_its_own_cores() {
        let dir = tempfile::tempdir().unwrap();
        let claims = CoreClaims::new(dir.path(), vec![0, 1], vec![1, 2]).unwrap();
        assert_eq!(claims.borrow().cores, vec![2]);
        // With two cores of its own it does not know its call's: it lends nothing.
        assert_eq!(claims.lend().threads, 0);
    }

    #[test]
    fn a_lone_call_computes_on_its_own_core_and_every_idle_spare_one() {
        let dir = tempfile::tempdir().unwrap();
        let claims = CoreClaims::new(dir.path(), vec![3], vec![0, 1, 2]).unwrap();
        let busy = CoreClaims::new(dir.path(), vec![1], vec![]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _running = runtime.block_on(busy.own()).unwrap();
        let lent = claims.lend();
        assert_eq!((lent.threads, lent.cores.clone()), (3, vec![3, 0, 2]));
        drop(lent);
        assert_eq!(claims.lend().cores, vec![3, 0, 2]);
    }
}
