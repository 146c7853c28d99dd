//! Giving memory back to the system when the proxy falls idle. A burst of transactions
//! leaves the proxy's resident size where the burst took it (a 100-client run left it 89%
//! above its size before): freed buffers stay in glibc's free lists, and a few hundred small
//! objects still in use, scattered over the heap, keep whole pages resident. So:
//!
//! - `malloc_trim` returns the free pages, but only those free when it runs: the clients'
//!   connections close, and the clean-ups finish, after the last transaction ends. The proxy
//!   trims again while it stays idle, at growing intervals ([`IdleSchedule`]).
//! - The connections to the compute servers keep stream tables and channel buffers sized for
//!   the most calls they ever carried. An idle proxy closes them (`idle_connection_seconds`)
//!   and opens them again for its next transaction.
//! - glibc's per-thread caches keep up to 7 freed chunks of every small size on each worker
//!   thread; the trim cannot return them. The proxy turns them off ([`prepare_allocator`]).
//! - A fixed mmap threshold keeps large buffers out of the heap, where they would be freed
//!   among small live objects and leave pages the trim cannot return.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

/// The longest wait between two trims of an idle proxy, in seconds.
const LONGEST_WAIT: u64 = 64;

/// What an idle proxy does at one of its once-a-second looks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IdleActions {
    /// Close the connections to the compute servers: their HTTP/2 stream tables and
    /// channel buffers grow to the most calls ever in flight and never shrink.
    pub release_connections: bool,
    /// Give free heap pages back.
    pub trim: bool,
}

/// When an idle proxy trims and closes its connections, looking once a second. It trims
/// after 1, 2, 4, ... 64 s of quiet and then every 64 s (a proxy that serves one client
/// after another falls idle after every transaction, and a trim walks the whole heap);
/// it closes its connections after `release_after` seconds of quiet and trims a second
/// later, once they are gone. Any transaction starts the count again. Pure: the caller
/// ticks it.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleSchedule {
    /// The count of falls into idleness at the last look.
    falls_seen: u64,
    /// Seconds of quiet so far.
    quiet: u64,
    release_after: Option<u64>,
}

impl IdleSchedule {
    /// A schedule for a proxy that has fallen idle `falls` times so far.
    pub fn new(falls: u64, release_after: Option<u64>) -> IdleSchedule {
        IdleSchedule {
            falls_seen: falls,
            quiet: 0,
            release_after: release_after.filter(|&s| s > 0),
        }
    }

    /// One look: the count of falls into idleness so far and whether the proxy is idle.
    pub fn tick(&mut self, falls: u64, idle: bool) -> IdleActions {
        if falls != self.falls_seen || !idle {
            self.falls_seen = falls;
            self.quiet = 0;
            return IdleActions::default();
        }
        self.quiet += 1;
        let q = self.quiet;
        let after_release = self.release_after.map(|r| r + 1) == Some(q);
        IdleActions {
            release_connections: self.release_after == Some(q),
            trim: (q.is_power_of_two() && q <= LONGEST_WAIT)
                || q.is_multiple_of(LONGEST_WAIT)
                || after_release,
        }
    }
}

/// Closes a proxy's idle connections.
type Release = Box<dyn Fn() + Send + Sync>;

/// The trimming of one proxy: counts its falls into idleness and runs one task that
/// looks once a second while the proxy lives.
#[derive(Default)]
pub struct Trimmer {
    state: Arc<TrimState>,
}

#[derive(Default)]
struct TrimState {
    falls: AtomicU64,
    running: AtomicBool,
    /// After how many seconds of quiet, and how, the connections close.
    release: OnceLock<(u64, Release)>,
}

impl std::fmt::Debug for Trimmer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trimmer")
            .field("falls", &self.state.falls)
            .field("running", &self.state.running)
            .finish_non_exhaustive()
    }
}

impl Trimmer {
    /// Closes the proxy's connections (`release`) after `seconds` of quiet; 0 never. Set
    /// once, before the proxy serves.
    pub fn release_connections_after(&self, seconds: u64, release: Release) {
        let _ = self.state.release.set((seconds, release));
    }

    /// The proxy fell idle; `is_idle` says whether `owner` still is. The first fall starts
    /// the task, which ends once `owner` is dropped.
    pub fn fell_idle<T: Send + Sync + 'static>(&self, owner: Weak<T>, is_idle: fn(&T) -> bool) {
        let state = &self.state;
        let falls = state.falls.fetch_add(1, Ordering::SeqCst) + 1;
        if state.running.swap(true, Ordering::SeqCst) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            state.running.store(false, Ordering::SeqCst);
            return;
        };
        let state = state.clone();
        runtime.spawn(async move {
            let release_after = state.release.get().map(|(seconds, _)| *seconds);
            let mut schedule = IdleSchedule::new(falls, release_after);
            let mut looks = tokio::time::interval(Duration::from_secs(1));
            looks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            looks.tick().await;
            loop {
                looks.tick().await;
                let Some(owner) = owner.upgrade() else { return };
                let actions = schedule.tick(state.falls.load(Ordering::SeqCst), is_idle(&owner));
                if actions.release_connections
                    && let Some((_, release)) = state.release.get()
                {
                    release();
                }
                if actions.trim {
                    trim();
                }
            }
        });
    }
}

/// Buffers of this size or more are mapped on their own and unmapped when freed. glibc's
/// default starts at 128 KiB and rises to the largest buffer freed, so after a burst of
/// large replies every buffer came from the heap.
const MMAP_THRESHOLD: usize = 64 * 1024;

/// glibc's tunable for the per-thread caches' length.
const THREAD_CACHE_TUNABLE: &str = "glibc.malloc.tcache_count";

/// Sets the allocator up for a long-lived service. Call first thing in `main`, before any
/// thread starts: glibc reads its per-thread cache's length from `GLIBC_TUNABLES` only when
/// a program starts, so unless that variable already names it, this runs the program again
/// (same process, same arguments) with the caches off. `GLIBC_TUNABLES=
/// glibc.malloc.tcache_count=7` keeps glibc's default.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn prepare_allocator() {
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if !tunables.contains(THREAD_CACHE_TUNABLE) {
        restart_with(&tunables);
    }
    // SAFETY: mallopt only sets one of the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// Replaces this program by itself with the thread caches off; returns only when it cannot,
/// and the program then runs with them.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn restart_with(tunables: &str) {
    use std::os::unix::process::CommandExt;
    let Ok(program) = std::env::current_exe() else {
        return;
    };
    let setting = format!("{THREAD_CACHE_TUNABLE}=0");
    let tunables = if tunables.is_empty() {
        setting
    } else {
        format!("{setting}:{tunables}")
    };
    let error = std::process::Command::new(program)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", tunables)
        .exec();
    eprintln!("cannot restart with glibc's thread caches off ({error}); running with them");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn prepare_allocator() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks and releases the allocator's own free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The looks at which `schedule` trims (seconds of quiet), over `seconds` looks.
    fn trims(schedule: &mut IdleSchedule, falls: u64, seconds: u64) -> Vec<u64> {
        (1..=seconds)
            .filter(|_| schedule.tick(falls, true).trim)
            .collect()
    }

    #[test]
    fn an_idle_proxy_trims_after_1_2_4_seconds_and_so_on_then_every_64() {
        let mut schedule = IdleSchedule::new(1, None);
        assert_eq!(
            trims(&mut schedule, 1, 200),
            [1, 2, 4, 8, 16, 32, 64, 128, 192]
        );
    }

    #[test]
    fn connections_close_after_their_quiet_and_a_trim_follows_them() {
        let mut schedule = IdleSchedule::new(1, Some(5));
        let looks: Vec<IdleActions> = (0..7).map(|_| schedule.tick(1, true)).collect();
        let released: Vec<usize> = (0..7).filter(|&i| looks[i].release_connections).collect();
        assert_eq!(released, [4], "closed at the fifth second of quiet only");
        assert!(looks[5].trim, "a trim the second after");
        assert!(
            !IdleSchedule::new(1, Some(0))
                .tick(1, true)
                .release_connections
        );
    }

    #[test]
    fn a_transaction_starts_the_quiet_again() {
        let mut schedule = IdleSchedule::new(1, Some(3));
        assert_eq!(trims(&mut schedule, 1, 2), [1, 2]);
        // Running a transaction at a look: nothing, and the count starts again.
        assert_eq!(schedule.tick(1, false), IdleActions::default());
        assert_eq!(trims(&mut schedule, 1, 2), [1, 2]);
        // It ran and fell idle again between two looks: likewise.
        assert_eq!(schedule.tick(2, true), IdleActions::default());
        let looks: Vec<IdleActions> = (0..4).map(|_| schedule.tick(2, true)).collect();
        assert!(looks[2].release_connections, "after three quiet seconds");
        assert!(looks[3].trim);
    }
}
