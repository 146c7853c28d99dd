//! Resource limits on executables, from the server's configuration: address space and open
//! files are set once on the process as it starts (through `setrlimit` between fork and
//! exec), while CPU time is a per-call budget: before each call the executable sets its own
//! soft CPU limit to what it has used so far plus the budget, so a warm process that served
//! many calls is not killed for their sum. A call over its budget gets SIGXCPU and dies; the
//! server reports the signal and starts a fresh executable.

use std::io;
use std::process::Command;

/// Environment variable carrying the per-call CPU budget, in whole seconds.
pub const CPU_SECONDS_ENV: &str = "NINF_EXEC_CPU_SECONDS";

/// Limits applied to every executable a server starts; `None` leaves the server's own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessLimits {
    /// Address space (RLIMIT_AS), bytes.
    pub memory_bytes: Option<u64>,
    /// Open file descriptors (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// CPU seconds one call may use.
    pub cpu_seconds_per_call: Option<u64>,
}

impl ProcessLimits {
    /// Makes `command` start under these limits.
    pub fn apply(&self, command: &mut Command) {
        use std::os::unix::process::CommandExt;
        if let Some(seconds) = self.cpu_seconds_per_call {
            command.env(CPU_SECONDS_ENV, seconds.to_string());
        }
        let fixed: Vec<(libc::__rlimit_resource_t, u64)> = [
            (libc::RLIMIT_AS, self.memory_bytes),
            (libc::RLIMIT_NOFILE, self.open_files),
        ]
        .into_iter()
        .filter_map(|(resource, value)| value.map(|v| (resource, v)))
        .collect();
        if fixed.is_empty() {
            return;
        }
        // SAFETY: the closure runs in the child between fork and exec and calls only
        // setrlimit, which is async-signal-safe; `fixed` was built before the fork.
        unsafe {
            command.pre_exec(move || {
                for &(resource, value) in &fixed {
                    let limit = libc::rlimit {
                        rlim_cur: value,
                        rlim_max: value,
                    };
                    if libc::setrlimit(resource, &limit) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

/// The per-call CPU budget from the environment; a value that is not a positive whole
/// number of seconds is an error naming it.
pub fn cpu_budget_from_env() -> Result<Option<u64>, String> {
    match std::env::var(CPU_SECONDS_ENV) {
        Err(_) => Ok(None),
        Ok(text) => match text.trim().parse::<u64>() {
            Ok(seconds) if seconds > 0 => Ok(Some(seconds)),
            _ => Err(format!(
                "{CPU_SECONDS_ENV} is `{text}`; it must be a whole number of seconds above 0"
            )),
        },
    }
}

/// Arms this process's CPU limit for one call: `budget` seconds past what it has used.
pub fn arm_cpu_budget(budget: u64) {
    let used = crate::slowdown::process_cpu_time().as_secs();
    let soft = used.saturating_add(budget);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_CPU, &mut limit) != 0 {
            return;
        }
        // The soft limit may not exceed the hard one.
        limit.rlim_cur = soft.min(limit.rlim_max);
        libc::setrlimit(libc::RLIMIT_CPU, &limit);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_child_starts_under_the_limits() {
        let limits = ProcessLimits {
            memory_bytes: Some(512 << 20),
            open_files: Some(64),
            cpu_seconds_per_call: Some(3),
        };
        let mut command = Command::new("sh");
        command.args(["-c", "ulimit -n; ulimit -v; echo $NINF_EXEC_CPU_SECONDS"]);
        limits.apply(&mut command);
        let output = command.output().unwrap();
        assert!(output.status.success());
        // `ulimit -v` reports KiB.
        assert_eq!(String::from_utf8_lossy(&output.stdout), "64\n524288\n3\n");
    }

    #[test]
    fn the_cpu_limit_is_armed_past_the_time_already_used() {
        arm_cpu_budget(1000);
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut limit) }, 0);
        let used = crate::slowdown::process_cpu_time().as_secs();
        assert!(limit.rlim_cur >= 1000 && limit.rlim_cur <= used + 1000);
        // Leave the test process unlimited again.
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_CPU, &limit) };
    }
}
