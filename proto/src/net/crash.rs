//! A routine's process that ended during its call (it exited, a signal killed it, or it broke
//! the frame protocol). The compute server says so with `ABORTED` and a message carrying
//! [`MARK`]; the proxy tells such a crash apart from a server's failure by it (a crash may be
//! the routine's own fault, so it is tried once more, on another server, and then reported
//! as the routine's failure), and clients report it as a failed session. The message travels
//! as text because bulk replies carry only a code and a message.

use tonic::{Code, Status};

/// What every crash's message holds, between the routine's name and how its process ended.
pub const MARK: &str = "crashed during the call";

/// The status of a call of `function` whose process crashed: `detail` names the executable
/// and how the process ended (`exited with status 10`, `killed by signal 11 (SIGSEGV)`).
pub fn crashed(function: &str, detail: &str) -> Status {
    Status::aborted(format!("`{function}` {MARK}: {detail}"))
}

/// Whether a call that failed with `code` and `message` crashed (rather than its server or
/// the path to it failing, or the gang table killing its job).
pub fn is_crash(code: Code, message: &str) -> bool {
    code == Code::Aborted && message.contains(MARK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_is_told_by_its_code_and_mark() {
        let status = crashed("exit", "the process exited with status 10");
        assert_eq!(
            status.message(),
            "`exit` crashed during the call: the process exited with status 10"
        );
        assert!(is_crash(status.code(), status.message()));
        assert!(!is_crash(Code::Unavailable, status.message()));
        assert!(!is_crash(
            Code::Aborted,
            "`pdeadlock`: all 2 ranks waited to receive (deadlock)"
        ));
    }
}
