//! Large copies and fills spread over the host's cores. One core's copy does not reach the
//! memory's bandwidth here (64 MiB: 10.3 ms on one thread, 5.4-6.5 ms on two, on the 2-core
//! Intel Xeon of docs/performance.md); Ray's object store splits its large copies the same
//! way. Arrays below [`PARALLEL_FROM`] bytes are copied on the caller's thread: starting a
//! thread costs more than it saves there.

use std::sync::OnceLock;

/// Copies and fills of this many bytes or more use several threads.
pub const PARALLEL_FROM: usize = 4 << 20;

/// The fewest bytes one thread takes.
const PER_THREAD: usize = 2 << 20;

/// The most threads one copy takes unless `NINF_COPY_THREADS` says otherwise.
const MAX_THREADS: usize = 4;

/// Copies `src` into `dst`, of the same length (as `copy_from_slice`, which panics
/// otherwise).
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "a copy between slices of unequal lengths"
    );
    let chunk = chunk_for(dst.len());
    if chunk >= dst.len() {
        dst.copy_from_slice(src);
        return;
    }
    let mut parts = dst.chunks_mut(chunk).zip(src.chunks(chunk));
    let first = parts.next();
    spread(parts, |(to, from)| to.copy_from_slice(from), first);
}

/// Sets every byte of `dst` to zero.
pub fn zero(dst: &mut [u8]) {
    let chunk = chunk_for(dst.len());
    if chunk >= dst.len() {
        dst.fill(0);
        return;
    }
    let mut parts = dst.chunks_mut(chunk);
    let first = parts.next();
    spread(parts, |part| part.fill(0), first);
}

/// Runs `work` on `first` here and on each of `rest` on a thread of its own; a part whose
/// thread cannot start (a process out of threads) is done here too.
fn spread<T: Send>(rest: impl Iterator<Item = T>, work: impl Fn(T) + Sync, first: Option<T>) {
    // Each part waits in its slot for the thread that takes it, or for this one.
    let slots: Vec<std::sync::Mutex<Option<T>>> =
        rest.map(|part| std::sync::Mutex::new(Some(part))).collect();
    let run = |slot: &std::sync::Mutex<Option<T>>| {
        if let Some(part) = crate::sync::lock(slot).take() {
            work(part);
        }
    };
    std::thread::scope(|scope| {
        for slot in &slots {
            let started = std::thread::Builder::new().spawn_scoped(scope, || run(slot));
            if started.is_err() {
                run(slot);
            }
        }
        first.into_iter().for_each(&work);
    });
}

/// The bytes each thread takes of a copy of `len` bytes: `len` itself for one thread.
fn chunk_for(len: usize) -> usize {
    if len < PARALLEL_FROM {
        return len.max(1);
    }
    let threads = copy_threads().min(len / PER_THREAD).max(1);
    len.div_ceil(threads).max(1)
}

/// The threads a large copy may take, read once: `NINF_COPY_THREADS` when set to a positive
/// number (1: the caller's thread alone), else the cores this process may run on, at most
/// [`MAX_THREADS`].
pub fn copy_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let set = std::env::var(COPY_THREADS_VARIABLE).ok();
        set.and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                cores.min(MAX_THREADS)
            })
    })
}

/// The environment variable that sets how many threads a large copy may take.
pub const COPY_THREADS_VARIABLE: &str = "NINF_COPY_THREADS";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_copied_and_zeroed_at_every_size_around_the_threshold() {
        for len in [
            0,
            1,
            4095,
            PARALLEL_FROM - 1,
            PARALLEL_FROM,
            PARALLEL_FROM + 17,
            9 << 20,
        ] {
            let src: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut dst = vec![0xAAu8; len];
            copy(&mut dst, &src);
            assert!(dst == src, "copy of {len}");
            zero(&mut dst);
            assert!(dst.iter().all(|&b| b == 0), "zero of {len}");
        }
    }

    #[test]
    fn large_copies_are_split_into_parts_of_at_least_two_mib() {
        assert_eq!(chunk_for(1 << 20), 1 << 20);
        let chunk = chunk_for(64 << 20);
        assert!((PER_THREAD..=64 << 20).contains(&chunk), "{chunk}");
        assert_eq!((64usize << 20).div_ceil(chunk), copy_threads());
    }
}
