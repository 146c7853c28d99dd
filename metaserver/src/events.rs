//! The grid's recent events, for people: servers registering, re-registering with other
//! routines, going down and coming back, graphs failing, and the faults proxies reported
//! (retries, suspects, regenerated outputs, moved tasks), and replicas of data evicted. A
//! bounded log with sequence numbers so that a live view asks only for what it has not seen.

use std::collections::VecDeque;

use serde::Serialize;

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Increasing from 1, never reused while the metaserver runs.
    pub seq: u64,
    /// Unix seconds.
    pub time: f64,
    /// `registered`, `reloaded`, `down`, `up`, `graph-failed`, `evicted` (a data handle's
    /// replica, under a data cap), `restarted` (a server registered as a new process: its data
    /// copies dropped), `replicated` (a copy made to replace a lost one), or an incident's kind (`retry`, `suspect`, `regenerate`,
    /// `moved`).
    pub kind: String,
    /// The server concerned, if one is.
    pub server: String,
    /// The graph concerned, if one is.
    pub graph: Option<u64>,
    pub message: String,
}

/// The last `capacity` events.
#[derive(Debug)]
pub struct EventLog {
    events: VecDeque<Event>,
    next: u64,
    capacity: usize,
}

impl EventLog {
    pub fn new(capacity: usize) -> EventLog {
        EventLog {
            events: VecDeque::new(),
            next: 1,
            capacity: capacity.max(1),
        }
    }

    /// Appends an event, forgetting the oldest beyond the capacity; returns its number.
    pub fn push(
        &mut self,
        time: f64,
        kind: &str,
        server: &str,
        graph: Option<u64>,
        message: String,
    ) -> u64 {
        let seq = self.next;
        self.next += 1;
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            seq,
            time,
            kind: kind.to_string(),
            server: server.to_string(),
            graph,
            message,
        });
        seq
    }

    /// Events numbered above `seq`, oldest first, at most `limit` (the newest of them).
    pub fn since(&self, seq: u64, limit: usize) -> Vec<Event> {
        let newer: Vec<&Event> = self.events.iter().filter(|e| e.seq > seq).collect();
        let skip = newer.len().saturating_sub(limit);
        newer.into_iter().skip(skip).cloned().collect()
    }

    /// The number of the newest event (0 before the first).
    pub fn last_seq(&self) -> u64 {
        self.next - 1
    }
}

/// How a server's routines changed between two registrations: (added, removed).
pub fn routine_changes(before: &[String], after: &[String]) -> (Vec<String>, Vec<String>) {
    let added = after
        .iter()
        .filter(|r| !before.contains(r))
        .cloned()
        .collect();
    let removed = before
        .iter()
        .filter(|r| !after.contains(r))
        .cloned()
        .collect();
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_and_answers_what_a_view_has_not_seen() {
        let mut log = EventLog::new(3);
        for i in 0..5 {
            log.push(f64::from(i), "retry", "s", Some(7), format!("e{i}"));
        }
        assert_eq!(log.last_seq(), 5);
        let all: Vec<u64> = log.since(0, 10).iter().map(|e| e.seq).collect();
        assert_eq!(all, vec![3, 4, 5], "the two oldest are forgotten");
        let newer: Vec<String> = log.since(4, 10).into_iter().map(|e| e.message).collect();
        assert_eq!(newer, vec!["e4"]);
        let limited: Vec<u64> = log.since(0, 2).iter().map(|e| e.seq).collect();
        assert_eq!(limited, vec![4, 5], "a limit keeps the newest");
        assert!(log.since(5, 10).is_empty());
    }

    #[test]
    fn routine_changes_name_what_came_and_went() {
        let before = vec!["mmul".to_string(), "dgefa".to_string()];
        let after = vec!["mmul".to_string(), "dgesl".to_string()];
        assert_eq!(
            routine_changes(&before, &after),
            (vec!["dgesl".to_string()], vec!["dgefa".to_string()])
        );
    }
}

/// What changed, for live views (the dashboard's server-sent events).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Change {
    /// Event `seq` was logged.
    Event { seq: u64 },
    /// A graph was scheduled or ended.
    Graph { id: u64 },
}

/// Events kept in memory.
pub const EVENTS_KEPT: usize = 1000;

impl crate::Metaserver {
    /// Logs an event and tells live views.
    pub(crate) fn log_event(&self, kind: &str, server: &str, graph: Option<u64>, message: String) {
        let time = crate::unix_now();
        let seq = self.state().events.push(time, kind, server, graph, message);
        // Nobody listening is not an error.
        let _ = self.changes.send(Change::Event { seq });
    }

    /// Tells live views that a graph was scheduled or ended.
    pub(crate) fn graph_changed(&self, id: u64) {
        let _ = self.changes.send(Change::Graph { id });
    }

    /// Events numbered above `seq`, oldest first, at most `limit`.
    pub fn events_since(&self, seq: u64, limit: usize) -> Vec<Event> {
        self.state().events.since(seq, limit)
    }

    /// A receiver of every change from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Change> {
        self.changes.subscribe()
    }
}
