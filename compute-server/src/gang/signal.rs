//! Signals to the processes of gang jobs: how the master and the node agents stop, continue
//! and kill them.

/// Sends `signal` to a process; `false` if it could not be delivered (the process is gone).
pub fn signal(pid: u32, signal: i32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill has no memory-safety preconditions; a positive pid names one process.
    unsafe { libc::kill(pid, signal) == 0 }
}
