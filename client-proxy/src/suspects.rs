//! Servers the proxy has recently seen fail, shared by every graph it runs.
//!
//! A graph that loses a call to a server's failure suspects that server for the rest of its
//! run. Without sharing, every other graph learns the same only by losing a call of its
//! own (a connect timeout when the server hangs rather than refuses), and new graphs keep
//! being placed there until the metaserver has missed enough heartbeats to mark it down.
//! The board lets the first failure warn them all: new graphs ask the metaserver to place
//! around the server, and running graphs move a task off it before issuing the task.
//!
//! A suspicion ends when the server is seen working again, that is when a call, probe or
//! health check that *started after* the failure succeeds on it (one that started before
//! proves nothing about the failure), or `hold` seconds after the last failure, whichever
//! comes first. The proxy checks a newly suspect server's health every fraction of a second,
//! so a server that restarts is back in use at once: avoiding it longer would cost more
//! capacity than the retries it saves. Pure: times are seconds on the caller's clock.

use std::collections::BTreeMap;

/// Recently failed servers and when each last failed.
#[derive(Debug, Clone)]
pub struct SuspectBoard {
    /// Seconds a suspicion lasts without news.
    hold: f64,
    /// Server address to the time of its latest failure.
    since: BTreeMap<String, f64>,
    /// Server address to the start of the latest work that succeeded on it: a graph's own
    /// suspicion of a server ends when work that started after the graph's failure there
    /// succeeds.
    worked_at: BTreeMap<String, f64>,
}

impl SuspectBoard {
    pub fn new(hold_seconds: f64) -> SuspectBoard {
        SuspectBoard {
            hold: hold_seconds.max(0.0),
            since: BTreeMap::new(),
            worked_at: BTreeMap::new(),
        }
    }

    /// `server` failed (a call, an upload or a fetch) as of `now`. Returns whether it has
    /// just become suspect: the caller then starts watching its health.
    pub fn suspect(&mut self, server: &str, now: f64) -> bool {
        let fresh = !self.is_suspect(server, now);
        let since = self.since.entry(server.to_string()).or_insert(now);
        *since = if fresh { now } else { since.max(now) };
        fresh && self.hold > 0.0
    }

    /// Something that started on `server` at `started` succeeded: if it started after the
    /// latest failure, the server works again.
    pub fn worked(&mut self, server: &str, started: f64) {
        if self.since.get(server).is_some_and(|&since| started > since) {
            self.since.remove(server);
        }
        let latest = self.worked_at.entry(server.to_string()).or_insert(started);
        *latest = latest.max(started);
    }

    /// Whether work that started on `server` after `failed` has succeeded: it works again
    /// since a failure seen then.
    pub fn worked_since(&self, server: &str, failed: f64) -> bool {
        self.worked_at
            .get(server)
            .is_some_and(|&started| started > failed)
    }

    /// Whether `server` is suspect at `now`.
    pub fn is_suspect(&self, server: &str, now: f64) -> bool {
        self.since
            .get(server)
            .is_some_and(|&since| now < since + self.hold)
    }

    /// Every server suspect at `now`, in address order; forgets expired suspicions.
    pub fn current(&mut self, now: f64) -> Vec<String> {
        let hold = self.hold;
        self.since.retain(|_, since| now < *since + hold);
        self.since.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_suspect_until_it_expires() {
        let mut board = SuspectBoard::new(30.0);
        assert!(!board.is_suspect("a:1", 0.0));
        assert!(board.suspect("a:1", 10.0), "a new suspicion");
        assert!(board.is_suspect("a:1", 10.0));
        assert!(board.is_suspect("a:1", 39.9));
        assert!(!board.is_suspect("a:1", 40.0));
        assert_eq!(board.current(20.0), vec!["a:1".to_string()]);
        assert!(board.current(40.0).is_empty());
        // Forgotten, not just hidden: a late success changes nothing.
        board.worked("a:1", 41.0);
        assert!(!board.is_suspect("a:1", 41.0));
    }

    #[test]
    fn a_later_failure_extends_the_suspicion_and_an_earlier_one_does_not_shorten_it() {
        let mut board = SuspectBoard::new(30.0);
        assert!(board.suspect("a:1", 10.0));
        assert!(
            !board.suspect("a:1", 25.0),
            "already suspect: already watched"
        );
        assert!(board.is_suspect("a:1", 54.0));
        // A graph reporting late, about a failure it saw earlier.
        board.suspect("a:1", 12.0);
        assert!(board.is_suspect("a:1", 54.0));
        assert!(!board.is_suspect("a:1", 55.0));
        // Expired, then failing again: a new suspicion, from then.
        assert!(board.suspect("a:1", 100.0));
        assert!(board.is_suspect("a:1", 129.0));
        assert!(!board.is_suspect("a:1", 130.0));
    }

    #[test]
    fn only_work_started_after_the_failure_clears_it() {
        let mut board = SuspectBoard::new(30.0);
        board.suspect("a:1", 10.0);
        board.suspect("b:1", 10.0);
        // A call that began before the failure and ended well says nothing about it.
        board.worked("a:1", 9.0);
        board.worked("a:1", 10.0);
        assert!(board.is_suspect("a:1", 11.0));
        // A probe that began after it does.
        board.worked("a:1", 10.5);
        assert!(!board.is_suspect("a:1", 11.0));
        assert_eq!(board.current(11.0), vec!["b:1".to_string()]);
        // News about a server never suspected is ignored.
        board.worked("c:1", 11.0);
        assert_eq!(board.current(11.0), vec!["b:1".to_string()]);
    }

    #[test]
    fn work_started_after_a_failure_is_remembered_for_graphs_that_saw_it() {
        let mut board = SuspectBoard::new(0.0);
        assert!(!board.worked_since("a:1", 5.0), "no news yet");
        board.worked("a:1", 4.0);
        assert!(
            !board.worked_since("a:1", 5.0),
            "started before the failure"
        );
        board.worked("a:1", 7.0);
        board.worked("a:1", 6.0);
        assert!(board.worked_since("a:1", 5.0));
        assert!(
            !board.worked_since("a:1", 7.0),
            "the latest start counts, strictly after"
        );
        assert!(!board.worked_since("b:1", 0.0));
    }

    #[test]
    fn a_zero_hold_suspects_nothing() {
        let mut board = SuspectBoard::new(0.0);
        assert!(!board.suspect("a:1", 1.0), "nothing to watch");
        assert!(!board.is_suspect("a:1", 1.0));
        assert!(board.current(1.0).is_empty());
    }
}
