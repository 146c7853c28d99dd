//! Giving memory back to the system when the proxy falls idle. A burst of transactions
//! leaves glibc's heap at its high-water mark: freed request and reply buffers stay in the
//! allocator's free lists, and the proxy's resident size stays where the burst took it (a
//! 100-client run left it 89% above its size before). `malloc_trim` returns the free pages;
//! a fixed mmap threshold keeps large buffers out of the heap, where they would be freed
//! among small live objects and leave pages the trim cannot return.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long the proxy must stay idle before a trim: one that serves one client after
/// another falls idle after every transaction, and a trim walks the whole heap.
const IDLE_BEFORE_TRIM: Duration = Duration::from_secs(1);

static TRIM_PENDING: AtomicBool = AtomicBool::new(false);

/// Returns free heap memory to the system once the proxy has stayed idle for a second
/// (`still_idle` says whether it has); one trim is pending at a time.
pub fn trim_when_idle(still_idle: impl Fn() -> bool + Send + 'static) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if TRIM_PENDING.swap(true, Ordering::SeqCst) {
        return;
    }
    runtime.spawn(async move {
        tokio::time::sleep(IDLE_BEFORE_TRIM).await;
        TRIM_PENDING.store(false, Ordering::SeqCst);
        if still_idle() {
            trim();
        }
    });
}

/// Buffers of this size or more are mapped on their own and unmapped when freed. glibc's
/// default starts at 128 KiB and rises to the largest buffer freed, so after a burst of
/// large replies every buffer came from the heap.
const MMAP_THRESHOLD: usize = 64 * 1024;

/// Sets the allocator up for a long-lived service (call once, at start).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn tune_allocator() {
    // SAFETY: mallopt only sets one of the allocator's parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn tune_allocator() {}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks and releases the allocator's own free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
