//! What the proxy does when a task's call fails: whether the failure is the server's (retry
//! elsewhere), a lost input (regenerate its producer, then retry), or the call's own (the
//! transaction fails); how long to back off before a retry; and which server takes a task
//! whose server is suspect. Pure decisions; the proxy's run loop acts on them.

use std::collections::HashSet;
use std::time::Duration;

use tonic::Code;

/// Why a call failed, as far as recovery is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallFailure {
    /// The server or the path to it failed (it died, restarted, dropped the connection):
    /// the same call may succeed elsewhere.
    Server,
    /// The routine's process ended during the call (it exited or was killed by a signal):
    /// the routine's fault, or maybe its server's, so it is tried once more elsewhere.
    Crashed,
    /// The server could not read these stored inputs (by object id) from where they were
    /// kept: their producers must run again.
    LostInputs(Vec<String>),
    /// The call itself is wrong (bad arguments, a routine error, a limit): retrying cannot
    /// help.
    Fatal,
}

/// Classifies a failed call. `inputs` are the object ids the call read from storage.
pub fn classify(code: Code, message: &str, inputs: &[&str]) -> CallFailure {
    match code {
        Code::FailedPrecondition if message.contains("cannot fetch object") => {
            let lost: Vec<String> = inputs
                .iter()
                .filter(|id| message.contains(**id))
                .map(|id| id.to_string())
                .collect();
            if lost.is_empty() {
                CallFailure::Fatal
            } else {
                CallFailure::LostInputs(lost)
            }
        }
        code if ninf_proto::net::crash::is_crash(code, message) => CallFailure::Crashed,
        // A connection refused or reset, a stream cut off, a job the gang table killed: all
        // say more about the server's health than about the call.
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted => CallFailure::Server,
        // The server could not keep an output (its spill directory is full) or take the
        // request: another server may.
        Code::ResourceExhausted => CallFailure::Server,
        Code::Internal
            if message.contains("h2 protocol error")
                || message.contains("transport error")
                || message.contains("connection") =>
        {
            CallFailure::Server
        }
        _ => CallFailure::Fatal,
    }
}

/// The wait before attempt `attempt` (1 for the first retry): `base` doubled per attempt,
/// at most `cap`.
pub fn backoff(attempt: u32, base: Duration, cap: Duration) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
    base.saturating_mul(factor).min(cap)
}

/// A server that might take a task.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub address: String,
    /// Processors × MFLOPS per processor.
    pub mflops: f64,
    /// Running plus queued jobs at the last sample.
    pub load: f64,
    pub functions: Vec<String>,
}

/// The server to run `function` on after a fault: the fastest per job (MFLOPS shared by
/// its load plus this task) among those that offer it and are not suspect; `None` if
/// every such server is suspect or none offers it.
pub fn replacement<'a>(
    function: &str,
    candidates: &'a [Candidate],
    suspects: &HashSet<String>,
) -> Option<&'a Candidate> {
    candidates
        .iter()
        .filter(|c| c.functions.iter().any(|f| f == function))
        .filter(|c| !suspects.contains(&c.address))
        .max_by(|a, b| {
            let score = |c: &Candidate| c.mflops / (1.0 + c.load.max(0.0));
            score(a)
                .total_cmp(&score(b))
                .then_with(|| b.address.cmp(&a.address))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_told_apart_by_code_and_message() {
        assert_eq!(
            classify(Code::Unavailable, "transport error", &[]),
            CallFailure::Server
        );
        assert_eq!(
            classify(Code::Aborted, "`dgefa`: killed by signal 9", &[]),
            CallFailure::Server
        );
        let crash = ninf_proto::net::crash::crashed("exit", "the process exited with status 10");
        assert_eq!(
            classify(crash.code(), crash.message(), &[]),
            CallFailure::Crashed
        );
        assert_eq!(
            classify(
                Code::Internal,
                "h2 protocol error: error reading a body from connection",
                &[]
            ),
            CallFailure::Server
        );
        assert_eq!(
            classify(Code::Internal, "reply without a result", &[]),
            CallFailure::Fatal
        );
        assert_eq!(
            classify(
                Code::InvalidArgument,
                "argument `a` of `dgefa`: expected 4 elements, got 3",
                &[]
            ),
            CallFailure::Fatal
        );
        let message = "argument `a` of `dgesl`: cannot fetch object `ab-7` from 10.0.0.2:7001: \
                       transport error";
        assert_eq!(
            classify(Code::FailedPrecondition, message, &["ab-6", "ab-7"]),
            CallFailure::LostInputs(vec!["ab-7".into()])
        );
        // A precondition failure that names none of the call's inputs is the call's own.
        assert_eq!(
            classify(Code::FailedPrecondition, message, &["cd-1"]),
            CallFailure::Fatal
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(1);
        let waits: Vec<u128> = (1..=6).map(|a| backoff(a, base, cap).as_millis()).collect();
        assert_eq!(waits, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(u32::MAX, base, cap), cap);
    }

    #[test]
    fn the_replacement_is_the_fastest_healthy_server_offering_the_routine() {
        let server = |address: &str, mflops: f64, load: f64, functions: &[&str]| Candidate {
            address: address.into(),
            mflops,
            load,
            functions: functions.iter().map(|f| f.to_string()).collect(),
        };
        let candidates = vec![
            server("a", 1000.0, 0.0, &["dgefa", "dgesl"]),
            server("b", 3000.0, 2.0, &["dgefa"]),
            server("c", 1800.0, 0.0, &["dgefa"]),
            server("d", 9000.0, 0.0, &["mmul"]),
        ];
        let none = HashSet::new();
        // b: 3000 / 3 = 1000 per job; c: 1800.
        assert_eq!(
            replacement("dgefa", &candidates, &none).map(|c| c.address.as_str()),
            Some("c")
        );
        let suspects: HashSet<String> = ["c".to_string()].into();
        assert_eq!(
            replacement("dgefa", &candidates, &suspects).map(|c| c.address.as_str()),
            Some("a"),
            "a ties b at 1000 per job and wins on its name"
        );
        assert_eq!(
            replacement("dgesl", &candidates, &["a".to_string()].into()),
            None
        );
        assert_eq!(replacement("dsyev", &candidates, &none), None);
    }
}
