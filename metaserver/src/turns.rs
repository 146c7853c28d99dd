//! Which of a graph's calls take turns on their server (`TaskPlacement.turns`): those that
//! compute long enough alone. The proxy issues at most as many of a graph's turn-taking
//! calls to a server as it has processors, the rest as calls end, in the order of their
//! predicted starts. Issued at once, the calls of one graph time-share the server's
//! processors among themselves: each finishes as late as the last, a short call that
//! follows one of them (a solve after its factorization) waits stopped behind the others'
//! slots, and nothing is gained, since the graph's work on that server is the same either
//! way. Taking turns, the first calls end early, the calls after them start early, and a
//! server's last call finds it alone and may borrow the cores others left idle
//! (docs/scheduling.md, "Turns").
//!
//! Shorter calls go at once. A call shorter than the gang quantum (100 ms by default) runs
//! to its end in its first slot, so its graph's calls do not share the processor anyway;
//! waiting for the call before it to end would only add the time from one call's end to
//! the next one's start (fetching its inputs, entering the table), which the server does
//! while the call before computes when both are sent at once. And thousands of tiny calls
//! ready together leave in batches only while they wait at the server side.

use ninf_scheduling::Task;
use ninf_scheduling::predictor::modelled_seconds;

/// A task's `TaskPlacement.turns` and `.alone_seconds`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TaskTurns {
    /// How many of its graph's turn-taking calls its server runs at once; 0: none, the
    /// call is issued when ready.
    pub turns: u32,
    /// The model's seconds for the call alone on the server.
    pub alone_seconds: f64,
}

/// `task`'s turns on its server: the server's `processors` when the model gives the call
/// at least `min_seconds` alone there (at `flops_per_processor` per processor), 0 (issued
/// when ready) otherwise; an infinite `min_seconds` gives no call turns.
pub fn turns_of(
    task: &Task,
    flops_per_processor: f64,
    processors: u32,
    min_seconds: f64,
) -> TaskTurns {
    let processors = processors.max(1);
    let alone_seconds = modelled_seconds(task, flops_per_processor, processors);
    let turns = if min_seconds.is_finite() && alone_seconds >= min_seconds {
        processors
    } else {
        0
    };
    TaskTurns {
        turns,
        alone_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(flops: f64) -> Task {
        Task {
            label: "dgefa#0".into(),
            function: "dgefa".into(),
            flops,
            client_in_bytes: 0,
            client_out_bytes: 0,
            processors: 1,
        }
    }

    #[test]
    fn calls_long_enough_alone_take_turns_by_their_servers_processors() {
        // 0.67 Gflop (an LU at n = 1000) at 10 Gflop/s: 67 ms alone.
        let lu = task(0.67e9);
        assert_eq!(turns_of(&lu, 10e9, 1, 0.005).turns, 1);
        assert_eq!(turns_of(&lu, 10e9, 4, 0.005).turns, 4);
        // A server reporting no processors still runs one call at a time.
        assert_eq!(turns_of(&lu, 10e9, 0, 0.005).turns, 1);
        // Past the threshold only by the model's time on that server.
        assert_eq!(turns_of(&lu, 10e9, 1, 0.1).turns, 0);
        assert_eq!(turns_of(&lu, 5e9, 1, 0.1).turns, 1);
        // Below the threshold or not, the proxy is told the model's time alone.
        assert!((turns_of(&lu, 10e9, 1, 0.1).alone_seconds - 0.067).abs() < 1e-9);
        assert!((turns_of(&lu, 5e9, 1, 0.1).alone_seconds - 0.134).abs() < 1e-9);
    }

    #[test]
    fn short_calls_and_calls_without_flops_go_at_once() {
        // A product at n = 100 (2 Mflop): 0.2 ms.
        assert_eq!(turns_of(&task(2e6), 10e9, 2, 0.005).turns, 0);
        // A routine the IDL gives no cost (a `noop`): the model cannot say it is long.
        assert_eq!(turns_of(&task(0.0), 10e9, 2, 0.005).turns, 0);
        // A threshold of infinity turns turns off.
        assert_eq!(turns_of(&task(1e12), 10e9, 2, f64::INFINITY).turns, 0);
    }

    #[test]
    fn a_call_on_a_server_without_speed_takes_turns() {
        // The model gives it forever there.
        assert_eq!(turns_of(&task(1e9), 0.0, 1, 0.005).turns, 1);
    }
}
