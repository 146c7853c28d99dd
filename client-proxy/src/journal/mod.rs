//! The proxy's journal, after HyperQueue's: each transaction the proxy accepts (its client,
//! its id, the metaserver's placement, the owner its intermediates are stored under) and, as
//! tasks finish, the objects each kept on the servers. A proxy that restarts reads it back:
//! a client that sends the same transaction again (by its id, see
//! `ninf_proto::v1::RunRequest::transaction_id`) gets it finished from the intermediates that
//! survived, and transactions whose clients do not come back within `journal_wait_seconds`
//! have their intermediates deleted and their graphs reported failed.
//!
//! Entries are written by one task in batches ([`Journal::start`]), so concurrent runs share
//! commits. A transaction's acceptance is awaited before its first call
//! ([`Journal::record_durably`]): a restarted proxy knows the owner of everything any run
//! stored, and cleans up after runs nobody resumes. Task progress is written behind the run:
//! losing the last few entries to a crash costs only recomputation (a task not journaled runs
//! again), never a wrong result, because the restarted proxy checks that every journaled
//! object is still held before it counts its task done.
//!
//! A transaction that wrote data handles is not forgotten when it is answered: its commit
//! stays for `answer_keep_seconds` ([`answered`]), so that a resend whose reply was lost is
//! answered again from it, never run over the values it wrote.

pub mod answered;
mod entry;
pub mod restart;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use answered::{Answered, AnsweredRuns, Match};
pub use entry::{Entry, JournaledRun, graph_hash};
use ninf_proto::clock::unix_ms;
pub use store::{JournalError, JournalStore};

/// Entries written in one database transaction at most.
const BATCH: usize = 256;

/// What [`Journal::take`] found for a transaction id.
#[derive(Debug)]
pub enum Found {
    /// Nothing journaled: a new transaction.
    Nothing,
    /// The transaction to resume.
    Resume(Box<JournaledRun>),
    /// A journaled run the request does not match (another graph): to clean up before the
    /// request runs afresh.
    Stale(Box<JournaledRun>),
    /// A transaction answered already: its answer is in the journal's database.
    Answered,
}

/// How often answers older than the keep window are forgotten, at most.
const FORGET_ANSWERS_EVERY: Duration = Duration::from_secs(5);

/// The journal a proxy writes; off until [`Journal::start`].
#[derive(Default)]
pub struct Journal {
    on: OnceLock<Enabled>,
}

/// An entry for the writer, with whom to tell once it is committed.
type Queued = (Entry, Option<oneshot::Sender<()>>);

struct Enabled {
    entries: mpsc::UnboundedSender<Queued>,
    /// Transactions of the proxy's previous life, until their client sends them again or
    /// they are given up.
    orphans: Mutex<HashMap<String, JournaledRun>>,
    /// One lock per transaction id being run, so that a resend waits for the run it
    /// replaces (cancelled when its client went away) to clean up first.
    running: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Transactions that wrote data handles and were answered, within the keep window.
    answered: Arc<Mutex<AnsweredRuns>>,
    /// Where their answers are read back.
    store: JournalStore,
}

/// Held while a transaction id runs; see [`Journal::exclusive`].
pub struct Exclusive<'a> {
    journal: &'a Journal,
    id: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.guard.take();
        if let Some(on) = self.journal.on.get() {
            let mut running = ninf_proto::sync::lock(&on.running);
            if running
                .get(&self.id)
                .is_some_and(|l| Arc::strong_count(l) == 1)
            {
                running.remove(&self.id);
            }
        }
    }
}

impl Journal {
    /// Starts journaling into `store`, with `runs` read back from it (those not answered
    /// become orphans): a task writes the entries behind the runs, in batches, until the
    /// proxy stops, and forgets answers older than `keep` as it goes.
    pub fn start(
        &self,
        store: JournalStore,
        runs: Vec<JournaledRun>,
        keep: Duration,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let (entries, mut received) = mpsc::unbounded_channel();
        let mut answered = AnsweredRuns::default();
        let mut orphans = HashMap::new();
        for run in runs {
            match run.answered_ms {
                Some(at_ms) => answered.insert(
                    run.transaction_id,
                    Answered {
                        client: run.client,
                        graph_hash: run.graph_hash,
                        at_ms,
                    },
                ),
                None => {
                    orphans.insert(run.transaction_id.clone(), run);
                }
            }
        }
        let answered = Arc::new(Mutex::new(answered));
        let enabled = Enabled {
            entries,
            orphans: Mutex::new(orphans),
            running: Mutex::default(),
            answered: answered.clone(),
            store: store.clone(),
        };
        self.on.set(enabled).ok()?;
        Some(tokio::spawn(async move {
            let mut batch: Vec<Queued> = Vec::with_capacity(BATCH);
            let mut forgot = Instant::now();
            while received.recv_many(&mut batch, BATCH).await > 0 {
                if forgot.elapsed() >= FORGET_ANSWERS_EVERY {
                    forgot = Instant::now();
                    forget_old_answers(&store, &answered, keep).await;
                }
                let (entries, waiting): (Vec<Entry>, Vec<_>) = batch.drain(..).unzip();
                let began = std::time::Instant::now();
                if let Err(e) = store.apply(&entries).await {
                    tracing::warn!(error = %e, entries = entries.len(), "cannot write the journal");
                }
                tracing::debug!(
                    entries = entries.len(),
                    seconds = began.elapsed().as_secs_f64(),
                    "journal batch written"
                );
                // Told either way: a journal that cannot be written stops no transaction.
                for done in waiting.into_iter().flatten() {
                    let _ = done.send(());
                }
            }
        }))
    }

    /// Keeps transaction `id`, which wrote data handles, as answered: a resend of it by
    /// `client` with the same graph is answered from its commit.
    fn answered(&self, id: &str, client: &str, graph_hash: u64) {
        let Some(on) = self.on.get() else {
            return;
        };
        let at_ms = unix_ms();
        let answered = Answered {
            client: client.to_string(),
            graph_hash,
            at_ms,
        };
        ninf_proto::sync::lock(&on.answered).insert(id.to_string(), answered);
        self.record(Entry::Answered {
            transaction_id: id.to_string(),
            at_ms,
        });
    }

    /// The placement and commit of answered transaction `id`: an error if the journal no
    /// longer has them (they were forgotten just now) or cannot be read, so that it is
    /// never run again.
    pub async fn answer(
        &self,
        id: &str,
    ) -> Result<
        (
            ninf_proto::v1::ScheduleReply,
            ninf_proto::v1::JournaledCommit,
        ),
        String,
    > {
        let Some(on) = self.on.get() else {
            return Err("the proxy keeps no journal".into());
        };
        match on.store.answer(id).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err("its answer is no longer kept".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on.get().is_some()
    }

    /// Writes `entry` behind the run (nothing when the journal is off).
    pub fn record(&self, entry: Entry) {
        if let Some(on) = self.on.get() {
            let _ = on.entries.send((entry, None));
        }
    }

    /// Writes `entry` and waits until it is committed (or the write failed and was logged).
    pub async fn record_durably(&self, entry: Entry) {
        let Some(on) = self.on.get() else {
            return;
        };
        let (done, committed) = oneshot::channel();
        if on.entries.send((entry, Some(done))).is_ok() {
            let _ = committed.await;
        }
    }

    /// Waits until no other run of transaction `id` is going on, and holds it off until
    /// the result is dropped. Ids are per client: `client/id`.
    pub async fn exclusive(&self, id: &str) -> Option<Exclusive<'_>> {
        let on = self.on.get()?;
        if id.is_empty() {
            return None;
        }
        let lock = ninf_proto::sync::lock(&on.running)
            .entry(id.to_string())
            .or_default()
            .clone();
        let guard = lock.lock_owned().await;
        Some(Exclusive {
            journal: self,
            id: id.to_string(),
            guard: Some(guard),
        })
    }

    /// Journaled transaction `id` ended, `client`'s with a graph hashing to
    /// `graph_hash`: kept as answered when `answered` (it wrote data handles and its writes
    /// are done), forgotten otherwise.
    pub fn ended(&self, id: &str, (client, graph_hash): (&str, u64), answered: bool) {
        match answered {
            true => self.answered(id, client, graph_hash),
            false => self.record(Entry::Finished(id.to_string())),
        }
    }

    /// What the journal holds of transaction `id` (none: not journaled), `client` sending it
    /// with a graph hashing to `graph_hash`: an answer to give again, or a transaction of
    /// the previous life taken out of the orphans to resume (or, sent with another graph,
    /// to clean up).
    pub fn take(&self, id: Option<&str>, client: &str, graph_hash: u64) -> Found {
        let (Some(on), Some(id)) = (self.on.get(), id) else {
            return Found::Nothing;
        };
        match ninf_proto::sync::lock(&on.answered).find(id, client, graph_hash) {
            Match::Same => return Found::Answered,
            // The id is used again: the old answer goes before the new run is accepted.
            Match::Other => self.record(Entry::Finished(id.to_string())),
            Match::None => {}
        }
        let mut orphans = ninf_proto::sync::lock(&on.orphans);
        match orphans.get(id) {
            None => Found::Nothing,
            // Another client's transaction of the same id is not this one's to take.
            Some(run) if run.client != client => Found::Nothing,
            Some(run) if run.graph_hash != graph_hash => match orphans.remove(id) {
                Some(run) => Found::Stale(Box::new(run)),
                None => Found::Nothing,
            },
            Some(_) => match orphans.remove(id) {
                Some(run) => Found::Resume(Box::new(run)),
                None => Found::Nothing,
            },
        }
    }

    /// The orphans nobody has taken yet (owners and servers, for their lease renewals).
    pub fn orphans(&self) -> Vec<JournaledRun> {
        self.on.get().map_or_else(Vec::new, |on| {
            ninf_proto::sync::lock(&on.orphans)
                .values()
                .cloned()
                .collect()
        })
    }

    /// Takes every orphan nobody has taken: they are given up.
    pub fn give_up_orphans(&self) -> Vec<JournaledRun> {
        self.on.get().map_or_else(Vec::new, |on| {
            ninf_proto::sync::lock(&on.orphans)
                .drain()
                .map(|(_, run)| run)
                .collect()
        })
    }
}

/// Forgets, in memory and then in `store`, the answers older than `keep`.
async fn forget_old_answers(store: &JournalStore, answered: &Mutex<AnsweredRuns>, keep: Duration) {
    let before_ms = unix_ms().saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX));
    ninf_proto::sync::lock(answered).forget_before(before_ms);
    if let Err(e) = store.forget_answered_before(before_ms).await {
        tracing::warn!(error = %e, "cannot forget old answers in the journal");
    }
}

#[cfg(test)]
mod tests {
    use ninf_proto::v1;

    use super::*;

    fn run(id: &str, client: &str, hash: u64) -> JournaledRun {
        JournaledRun {
            transaction_id: id.to_string(),
            client: client.to_string(),
            graph_hash: hash,
            owner: format!("p/graph-{id}"),
            placement: v1::ScheduleReply {
                graph_id: 7,
                placements: vec![v1::TaskPlacement {
                    task: 0,
                    server: "a:1".into(),
                    ..Default::default()
                }],
                ..Default::default()
            },
            accepted_ms: 1,
            tasks: vec![v1::TaskReport {
                task: 0,
                outputs: vec![v1::CallOutput {
                    parameter: 2,
                    result: Some(v1::call_output::Result::Object(v1::ObjectRef {
                        server: "b:2".into(),
                        object_id: "o1".into(),
                    })),
                }],
                ..Default::default()
            }],
            commit: None,
            answered_ms: None,
        }
    }

    #[tokio::test]
    async fn only_its_own_client_with_its_own_graph_takes_an_orphan() {
        let dir = tempfile::tempdir().expect("a folder");
        let url = format!("sqlite://{}", dir.path().join("j.sqlite").display());
        let store = JournalStore::open(&url, "p").await.expect("opens");
        let journal = Journal::default();
        journal.start(
            store,
            vec![run("t1", "c", 5), run("t2", "c", 5)],
            Duration::from_secs(60),
        );
        assert!(matches!(
            journal.take(Some("t1"), "other", 5),
            Found::Nothing
        ));
        assert!(matches!(journal.take(Some("t1"), "c", 5), Found::Resume(_)));
        assert!(matches!(journal.take(Some("t1"), "c", 5), Found::Nothing));
        assert!(matches!(journal.take(Some("t2"), "c", 6), Found::Stale(_)));
        assert!(journal.give_up_orphans().is_empty());
    }

    #[tokio::test]
    async fn the_store_gives_back_what_was_written_and_forgets_what_finished() {
        let dir = tempfile::tempdir().expect("a folder");
        let url = format!("sqlite://{}", dir.path().join("j.sqlite").display());
        let store = JournalStore::open(&url, "p").await.expect("opens");
        let (one, two) = (run("t1", "c", 5), run("t2", "c", 6));
        let entries = [
            Entry::Accepted(Box::new(JournaledRun {
                tasks: Vec::new(),
                ..one.clone()
            })),
            Entry::TaskKept {
                transaction_id: "t1".into(),
                report: one.tasks[0].clone(),
            },
            Entry::Accepted(Box::new(two.clone())),
            Entry::Committed {
                transaction_id: "t2".into(),
                commit: v1::JournaledCommit::default(),
            },
            Entry::Finished("t2".into()),
        ];
        store.apply(&entries).await.expect("writes");
        // Another proxy's rows in the same database are apart.
        let other = JournalStore::open(&url, "q").await.expect("opens");
        assert!(other.load().await.expect("reads").is_empty());
        store.close().await;
        let reopened = JournalStore::open(&url, "p").await.expect("opens again");
        let runs = reopened.load().await.expect("reads");
        assert_eq!(runs, vec![one.clone()]);
        assert_eq!(
            runs[0].servers(),
            vec!["a:1".to_string(), "b:2".to_string()]
        );
        assert_eq!(runs[0].objects().count(), 1);
        // A commit is kept with its transaction until the transaction finishes.
        let commit = v1::JournaledCommit {
            makespan: 2.5,
            writes: vec![v1::HandleObject {
                handle: "h".into(),
                object: Some(v1::ObjectRef {
                    server: "c:3".into(),
                    object_id: "o2".into(),
                }),
            }],
            ..Default::default()
        };
        let committed = Entry::Committed {
            transaction_id: "t1".into(),
            commit: commit.clone(),
        };
        reopened.apply(&[committed]).await.expect("writes");
        let runs = reopened.load().await.expect("reads");
        assert_eq!(runs[0].commit.as_ref(), Some(&commit));
        assert!(runs[0].servers().contains(&"c:3".to_string()));
        reopened
            .apply(&[Entry::Finished("t1".into())])
            .await
            .expect("writes");
        assert!(reopened.load().await.expect("reads").is_empty());
    }

    #[tokio::test]
    async fn a_transaction_accepted_again_after_it_finished_in_one_batch_keeps_its_new_life() {
        let dir = tempfile::tempdir().expect("a folder");
        let url = format!("sqlite://{}", dir.path().join("j.sqlite").display());
        let store = JournalStore::open(&url, "p").await.expect("opens");
        let first = run("t1", "c", 5);
        let task = |task: u32| Entry::TaskKept {
            transaction_id: "t1".into(),
            report: v1::TaskReport {
                task,
                ..Default::default()
            },
        };
        let again = JournaledRun {
            graph_hash: 6,
            tasks: Vec::new(),
            ..first.clone()
        };
        let entries = [
            Entry::Accepted(Box::new(first.clone())),
            task(0),
            task(0),
            Entry::Finished("t1".into()),
            Entry::Accepted(Box::new(again.clone())),
            task(1),
        ];
        store.apply(&entries).await.expect("writes");
        let runs = store.load().await.expect("reads");
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].graph_hash, 6);
        let tasks: Vec<u32> = runs[0].tasks.iter().map(|t| t.task).collect();
        assert_eq!(tasks, [1], "the first life's task is gone with it");
    }

    #[test]
    fn a_graph_hash_changes_with_the_graph_not_with_its_maps_order() {
        let mut graph = v1::TaskGraph::default();
        let before = graph_hash(&graph);
        graph.tasks.push(v1::GraphTask::default());
        assert_ne!(before, graph_hash(&graph));
        let scalars = |names: &[&str]| -> HashMap<String, i64> {
            names
                .iter()
                .map(|n| (n.to_string(), n.len() as i64))
                .collect()
        };
        let names = ["n", "lda", "m", "ldb", "k", "incx", "incy", "job"];
        graph.tasks[0].scalars = scalars(&names);
        let one = graph_hash(&graph);
        // Maps built in another order (and other hash seeds) hash the same.
        let mut reversed = names;
        reversed.reverse();
        graph.tasks[0].scalars = scalars(&reversed);
        assert_eq!(graph_hash(&graph), one);
        graph.tasks[0].scalars.insert("n".into(), 2);
        assert_ne!(graph_hash(&graph), one);
    }
}
