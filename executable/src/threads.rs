//! The threads a routine declared `Threads` in its IDL computes with. The host gives each
//! call a count and the cores they may run on (`ExecRequest.threads`, `.cores`): cores the
//! compute server found idle on its host when the call started. The routine asks [`count`]
//! and splits its work that many ways, for example with faer's `Par::rayon(count())`:
//!
//! ```ignore
//! let par = match ninf_executable::threads::count() {
//!     1 => Par::Seq,
//!     n => Par::rayon(n),
//! };
//! ```
//!
//! A call given more than one thread runs inside a rayon pool of that many threads, each
//! allowed on exactly the cores given. The executable's own thread stays where the gang
//! scheduler's agent pinned it (one core); only the pool's threads reach the cores lent to
//! the call. The pool is kept for the next call, and its threads are moved when a call
//! brings other cores.

use std::cell::Cell;
use std::sync::Mutex;

thread_local! {
    static COUNT: Cell<usize> = const { Cell::new(1) };
}

/// Threads the current call may compute with: 1 unless the host gave it more.
pub fn count() -> usize {
    COUNT.with(Cell::get)
}

/// The pool of the last call that had several threads, and the cores its threads may use.
struct Pool {
    pool: rayon::ThreadPool,
    cores: Vec<u32>,
}

static POOL: Mutex<Option<Pool>> = Mutex::new(None);

/// Runs `work` with `threads` threads on `cores` (see the module comment); with 0 or 1
/// thread, or when no pool can be made, on this thread alone.
pub fn run<R: Send>(threads: u32, cores: &[u32], work: impl FnOnce() -> R + Send) -> R {
    let threads = threads as usize;
    if threads <= 1 {
        return work();
    }
    let mut slot = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let reusable = slot
        .as_ref()
        .is_some_and(|p| p.pool.current_num_threads() == threads);
    if !reusable {
        match rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("ninf-routine-{i}"))
            .build()
        {
            Ok(pool) => {
                *slot = Some(Pool {
                    pool,
                    cores: Vec::new(),
                })
            }
            Err(_) => return work(),
        }
    }
    let Some(pool) = slot.as_mut() else {
        return work();
    };
    if pool.cores != cores {
        let allowed = cores.to_vec();
        pool.pool.broadcast(|_| allow_cores(&allowed));
        pool.cores = cores.to_vec();
    }
    pool.pool.install(|| {
        COUNT.with(|c| c.set(threads));
        let result = work();
        COUNT.with(|c| c.set(1));
        result
    })
}

/// A call's routine with its arguments, lent to the pool's thread. The arguments point into
/// shared regions (raw pointers, so not `Send` by themselves).
pub(crate) struct Lent<F>(F);

// SAFETY: `run` hands the closure to one pool thread and blocks the lending thread until it
// has returned, so what it points to is used by one thread at a time, within the call.
unsafe impl<F> Send for Lent<F> {}

impl<R, F: FnOnce() -> R> Lent<F> {
    pub(crate) fn new(routine: F) -> Self {
        Lent(routine)
    }

    pub(crate) fn call(self) -> R {
        (self.0)()
    }
}

/// Lets the calling thread run on `cores` (all of them: the kernel balances the pool's
/// threads over them); with none given, on every core this process may use.
fn allow_cores(cores: &[u32]) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write only into it, and
    // sched_setaffinity(0, ...) reads it for the calling thread alone.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        let all = cores.is_empty();
        let limit = libc::CPU_SETSIZE as usize;
        for core in 0..limit {
            if all || cores.contains(&(core as u32)) {
                libc::CPU_SET(core, &mut set);
            }
        }
        // A core this cgroup forbids fails the call; the thread then stays where it was.
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn affinity() -> Vec<u32> {
        // SAFETY: as in `allow_cores`; sched_getaffinity writes into the set.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .map(|c| c as u32)
                .collect()
        }
    }

    #[test]
    fn a_call_given_threads_computes_on_that_many_threads_on_the_cores_given() {
        assert_eq!(count(), 1);
        assert_eq!(run(1, &[], count), 1);
        let mine = affinity();
        let first = mine[0];
        let (threads, here, (a, b)) = run(2, &[first], || {
            (count(), affinity(), rayon::join(affinity, affinity))
        });
        assert_eq!(threads, 2);
        for cores in [here, a, b] {
            assert_eq!(
                cores,
                vec![first],
                "a pool thread runs where it was allowed"
            );
        }
        // Another call's cores move the pool's threads; the caller's thread never moves.
        let (_, a, b) = run(2, &[], || (count(), affinity(), affinity()));
        assert_eq!((a.len(), b.len()), (mine.len(), mine.len()));
        assert_eq!(affinity(), mine);
        // The count belongs to the call: after it, and on the caller's thread, it is 1.
        assert_eq!(count(), 1);
        assert_eq!(run(0, &[], count), 1);
    }
}
