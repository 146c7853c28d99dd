//! How a client process's allocator treats the large buffers a call moves. Every array a
//! transaction sends is copied into a buffer, encoded into another and decoded from a third
//! on the way back; with glibc's defaults each of those is a fresh mapping above 32 MiB (and
//! in a thread's arena, whose heaps stop at 64 MiB, often below it), returned to the kernel
//! when freed and faulted in page by page the next time. Measured on the peer benchmark
//! (docs/performance.md, "Freed buffers kept for the next call"), that was a sixth of the
//! cascade's time at n = 1000 as the Python client saw it.
//!
//! [`keep_freed_buffers`] has the process's threads share glibc's main arena (which grows
//! without that limit), serves blocks up to [`MMAP_THRESHOLD`] from it, and gives memory
//! back to the kernel only when more than [`TRIM_THRESHOLD`] is free at its top. The process
//! keeps up to that much more resident than before; `NINF_CLIENT_MALLOC=system` leaves the
//! allocator as it was.

/// The environment variable that leaves the process's allocator alone when set to `system`.
pub const MALLOC_ENV: &str = "NINF_CLIENT_MALLOC";
/// Blocks up to this size come from the heap and are reused; larger ones are mapped and
/// returned on their own.
pub const MMAP_THRESHOLD: i32 = 256 << 20;
/// Free memory at the heap's top beyond this is returned to the kernel.
pub const TRIM_THRESHOLD: i32 = 1 << 30;

/// Whether `setting` (the value of [`MALLOC_ENV`]) asks to keep freed buffers: anything but
/// `system`.
pub fn keeps_freed_buffers(setting: Option<&str>) -> bool {
    setting.is_none_or(|s| s.trim() != "system")
}

/// Tunes glibc's allocator for moving large arrays (module doc), unless [`MALLOC_ENV`] says
/// `system`; a no-op outside glibc. Returns whether it did. Call it before the process starts
/// the threads that move arrays: a thread keeps the arena it first allocated from.
pub fn keep_freed_buffers() -> bool {
    let setting = std::env::var(MALLOC_ENV).ok();
    if !keeps_freed_buffers(setting.as_deref()) {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator tuning parameters and has no memory-safety
        // preconditions; blocks allocated before keep working under the new settings.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1) == 1
                && libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_system_leaves_the_allocator_alone() {
        assert!(keeps_freed_buffers(None));
        assert!(keeps_freed_buffers(Some("keep")));
        assert!(!keeps_freed_buffers(Some("system")));
        assert!(!keeps_freed_buffers(Some(" system\n")));
    }
}
