//! The transactions that wrote data handles and were answered, kept for a while by id: a
//! client whose reply was lost (the proxy died before it left, or the link broke) sends the
//! transaction again, and must get the answer it missed rather than a second run, which
//! would read the values the first one wrote (a `dgefa` in place would factor the factors).
//! Only the ids live here; the answers themselves stay in the journal's database
//! ([`super::JournalStore::answer`]).

use std::collections::HashMap;

/// Whose an answered transaction is and which graph it ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub client: String,
    pub graph_hash: u64,
    /// When it was answered (Unix ms).
    pub at_ms: i64,
}

/// What a resend finds among the answered transactions.
#[derive(Debug, PartialEq)]
pub enum Match {
    /// No answered transaction of that id is the client's.
    None,
    /// This client's transaction, with the same graph: to answer from the journal.
    Same,
    /// This client's id, with another graph: the id was used again for a new transaction,
    /// and the old answer is forgotten.
    Other,
}

/// Answered transactions by journal key, until they are older than the keep window.
#[derive(Debug, Default)]
pub struct AnsweredRuns {
    runs: HashMap<String, Answered>,
}

impl AnsweredRuns {
    pub fn insert(&mut self, id: String, answered: Answered) {
        self.runs.insert(id, answered);
    }

    /// Whether `client` sending `id` with a graph of `graph_hash` was answered before; an
    /// `Other` is forgotten here.
    pub fn find(&mut self, id: &str, client: &str, graph_hash: u64) -> Match {
        match self.runs.get(id) {
            Some(run) if run.client == client && run.graph_hash == graph_hash => Match::Same,
            Some(run) if run.client == client => {
                self.runs.remove(id);
                Match::Other
            }
            _ => Match::None,
        }
    }

    /// Forgets those answered before `before_ms`.
    pub fn forget_before(&mut self, before_ms: i64) {
        self.runs.retain(|_, run| run.at_ms >= before_ms);
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(client: &str, graph_hash: u64, at_ms: i64) -> Answered {
        Answered {
            client: client.into(),
            graph_hash,
            at_ms,
        }
    }

    #[test]
    fn a_resend_matches_its_clients_answer_and_another_graph_under_the_id_forgets_it() {
        let mut runs = AnsweredRuns::default();
        runs.insert("c#1".into(), answered("c", 7, 1_000));
        assert_eq!(runs.find("c#1", "d", 7), Match::None, "another client's");
        assert_eq!(runs.find("c#2", "c", 7), Match::None);
        assert_eq!(runs.find("c#1", "c", 7), Match::Same);
        assert_eq!(
            runs.find("c#1", "c", 7),
            Match::Same,
            "as often as it is sent"
        );
        assert_eq!(runs.find("c#1", "c", 8), Match::Other);
        assert_eq!(runs.find("c#1", "c", 7), Match::None, "forgotten");
    }

    #[test]
    fn answers_older_than_the_window_are_forgotten() {
        let mut runs = AnsweredRuns::default();
        runs.insert("c#1".into(), answered("c", 7, 1_000));
        runs.insert("c#2".into(), answered("c", 7, 2_000));
        runs.forget_before(1_500);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs.find("c#1", "c", 7), Match::None);
        assert_eq!(runs.find("c#2", "c", 7), Match::Same);
    }
}
