//! An executable ends when the process that started it is gone. A compute server killed
//! outright (SIGKILL, a crash) cannot stop its executables, and the kernel's parent-death
//! signal follows the thread that forked, not the process, so a server cannot ask for it
//! from the runtime threads that start its executables. Without this, one in the middle of a
//! long call would run it to the end as an orphan, holding a processor and its memory for a
//! call nobody waits for.

use std::time::Duration;

/// How often the parent is checked: a killed server's executables end within this.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// The exit status of an executable whose parent died (`EX_SOFTWARE`-like, for the log).
const ORPHANED: i32 = 70;

/// Watches, on a thread of its own, for the parent to go (the process is then re-parented,
/// to init or a subreaper) and ends the process at once, whatever the routine is doing. A
/// process already orphaned, or started by init itself, is not watched.
pub fn exit_with_parent() {
    let parent = std::os::unix::process::parent_id();
    if parent <= 1 {
        return;
    }
    let watch = move || loop {
        std::thread::sleep(CHECK_EVERY);
        if std::os::unix::process::parent_id() != parent {
            // Not `exit`: the main thread may be inside a routine or writing to the dead
            // server's pipe; nothing of it is worth flushing.
            // SAFETY: `_exit` ends the process without touching any Rust state.
            unsafe { libc::_exit(ORPHANED) };
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("ninf-parent-watch".into())
        .spawn(watch)
    {
        eprintln!("ninf executable: cannot watch for the server's death: {e}");
    }
}
