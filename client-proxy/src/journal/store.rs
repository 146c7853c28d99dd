//! Where the journal is kept: a SQLite file beside the proxy by default, or a PostgreSQL
//! database (`journal = "postgres://..."`), through `ninf-db`. Rows are per proxy name.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use ninf_proto::v1;
use prost::Message;
use sqlx::{AnyPool, Row};

use super::entry::{Entry, JournaledRun};

/// Rows per multi-row statement: well under SQLite's limit of bound parameters.
const ROWS: usize = 200;

/// Splits `entries` where a transaction id is accepted again after it finished, so that
/// each segment can be written as all its acceptances, then all its tasks, then all its
/// endings: within a transaction's one life the entries come in that order.
fn segments(entries: &[Entry]) -> Vec<&[Entry]> {
    let mut segments = Vec::new();
    let mut start = 0;
    let mut finished: HashSet<&str> = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        match entry {
            Entry::Accepted(run) if finished.contains(run.transaction_id.as_str()) => {
                segments.push(&entries[start..i]);
                start = i;
                finished.clear();
            }
            Entry::Finished(id)
            | Entry::Answered {
                transaction_id: id, ..
            } => {
                finished.insert(id);
            }
            _ => {}
        }
    }
    segments.push(&entries[start..]);
    segments
}

/// One segment's changes, each row once (the latest entry for it).
struct Changes<'a> {
    accepted: Vec<&'a JournaledRun>,
    kept: Vec<(&'a str, &'a v1::TaskReport)>,
    committed: Vec<(&'a str, &'a v1::JournaledCommit)>,
    answered: Vec<(&'a str, i64)>,
    finished: Vec<&'a str>,
}

impl<'a> Changes<'a> {
    fn of(segment: &'a [Entry]) -> Changes<'a> {
        let mut accepted: BTreeMap<&str, &JournaledRun> = BTreeMap::new();
        let mut kept: BTreeMap<(&str, u32), &v1::TaskReport> = BTreeMap::new();
        let mut committed: BTreeMap<&str, &v1::JournaledCommit> = BTreeMap::new();
        let mut answered: BTreeMap<&str, i64> = BTreeMap::new();
        let mut finished = BTreeSet::new();
        for entry in segment {
            match entry {
                Entry::Accepted(run) => {
                    accepted.insert(&run.transaction_id, run);
                }
                Entry::TaskKept {
                    transaction_id,
                    report,
                } => {
                    kept.insert((transaction_id, report.task), report);
                }
                Entry::Committed {
                    transaction_id,
                    commit,
                } => {
                    committed.insert(transaction_id, commit);
                }
                Entry::Answered {
                    transaction_id,
                    at_ms,
                } => {
                    answered.insert(transaction_id, *at_ms);
                }
                Entry::Finished(id) => {
                    finished.insert(id.as_str());
                }
            }
        }
        // What a transaction that ends in this segment accepted or kept in it is deleted by
        // its ending anyway: it is not written at all. An answered one keeps its acceptance
        // and its commit, not its tasks.
        let answered: Vec<(&str, i64)> = answered
            .into_iter()
            .filter(|(id, _)| !finished.contains(id))
            .collect();
        let ended = |id: &str| finished.contains(id) || answered.iter().any(|(a, _)| *a == id);
        Changes {
            accepted: accepted
                .into_iter()
                .filter(|(id, _)| !finished.contains(id))
                .map(|(_, run)| run)
                .collect(),
            kept: kept
                .into_iter()
                .filter(|((id, _), _)| !ended(id))
                .map(|((id, _), r)| (id, r))
                .collect(),
            committed: committed
                .into_iter()
                .filter(|(id, _)| !finished.contains(id))
                .collect(),
            answered,
            finished: finished.into_iter().collect(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal: {0}")]
    Open(#[from] ninf_db::OpenError),
    #[error("journal: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("journal migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("journal holds an undecodable record of transaction `{0}`: {1}")]
    Decode(String, prost::DecodeError),
}

/// One proxy's rows of a journal database.
#[derive(Clone)]
pub struct JournalStore {
    pool: AnyPool,
    proxy: String,
}

impl JournalStore {
    /// Opens the journal at `url` (created if missing) for the proxy named `proxy`.
    pub async fn open(url: &str, proxy: &str) -> Result<JournalStore, JournalError> {
        let (pool, backend) = ninf_db::open_sized(url, ninf_db::PoolSize::SINGLE_WRITER).await?;
        match backend {
            ninf_db::Backend::Sqlite => sqlx::migrate!("./migrations/sqlite").run(&pool).await?,
            ninf_db::Backend::Postgres => {
                sqlx::migrate!("./migrations/postgres").run(&pool).await?
            }
        }
        Ok(JournalStore {
            pool,
            proxy: proxy.to_string(),
        })
    }

    /// The transactions this proxy had not finished, with their tasks' kept outputs, and
    /// those it answered and keeps (`answered_ms`).
    pub async fn load(&self) -> Result<Vec<JournaledRun>, JournalError> {
        let rows = sqlx::query(
            "SELECT transaction_id, client, graph_hash, owner, placement, accepted_ms,
                 answered_ms
             FROM journal_transactions WHERE proxy = $1 ORDER BY accepted_ms",
        )
        .bind(&self.proxy)
        .fetch_all(&self.pool)
        .await?;
        let mut runs = Vec::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0)?;
            let placement: Vec<u8> = row.try_get(4)?;
            let placement = v1::ScheduleReply::decode(placement.as_slice())
                .map_err(|e| JournalError::Decode(id.clone(), e))?;
            runs.push(JournaledRun {
                client: row.try_get(1)?,
                graph_hash: row.try_get::<i64, _>(2)? as u64,
                owner: row.try_get(3)?,
                placement,
                accepted_ms: row.try_get(5)?,
                tasks: Vec::new(),
                commit: None,
                answered_ms: row.try_get(6)?,
                transaction_id: id,
            });
        }
        let mut tasks: HashMap<String, Vec<v1::TaskReport>> = HashMap::new();
        let rows = sqlx::query(
            "SELECT transaction_id, report FROM journal_tasks WHERE proxy = $1 ORDER BY task",
        )
        .bind(&self.proxy)
        .fetch_all(&self.pool)
        .await?;
        for row in rows {
            let id: String = row.try_get(0)?;
            let report: Vec<u8> = row.try_get(1)?;
            let report = v1::TaskReport::decode(report.as_slice())
                .map_err(|e| JournalError::Decode(id.clone(), e))?;
            tasks.entry(id).or_default().push(report);
        }
        let mut commits = self.load_commits().await?;
        for run in &mut runs {
            run.tasks = tasks.remove(&run.transaction_id).unwrap_or_default();
            run.commit = commits.remove(&run.transaction_id);
        }
        Ok(runs)
    }

    async fn load_commits(&self) -> Result<HashMap<String, v1::JournaledCommit>, JournalError> {
        let rows =
            sqlx::query("SELECT transaction_id, outcome FROM journal_commits WHERE proxy = $1")
                .bind(&self.proxy)
                .fetch_all(&self.pool)
                .await?;
        let mut commits = HashMap::with_capacity(rows.len());
        for row in rows {
            let id: String = row.try_get(0)?;
            let outcome: Vec<u8> = row.try_get(1)?;
            let commit = v1::JournaledCommit::decode(outcome.as_slice())
                .map_err(|e| JournalError::Decode(id.clone(), e))?;
            commits.insert(id, commit);
        }
        Ok(commits)
    }

    /// Writes `entries`, in one database transaction, with as few statements as the order
    /// of each transaction's entries allows (one statement per kind of change per segment;
    /// see [`segments`]).
    pub async fn apply(&self, entries: &[Entry]) -> Result<(), JournalError> {
        let mut tx = self.pool.begin().await?;
        for segment in segments(entries) {
            let changes = Changes::of(segment);
            // A transaction's earlier life left no task rows: its `Finished` deleted them.
            for chunk in changes.accepted.chunks(ROWS) {
                self.upsert_transactions(&mut tx, chunk).await?;
            }
            for chunk in changes.kept.chunks(ROWS) {
                self.upsert_tasks(&mut tx, chunk).await?;
            }
            for (id, commit) in &changes.committed {
                self.upsert_commit(&mut tx, id, commit).await?;
            }
            for &(id, at_ms) in &changes.answered {
                self.mark_answered(&mut tx, id, at_ms).await?;
            }
            let answered: Vec<&str> = changes.answered.iter().map(|(id, _)| *id).collect();
            self.delete_from(&mut tx, "journal_tasks", &answered)
                .await?;
            self.delete_from(&mut tx, "journal_tasks", &changes.finished)
                .await?;
            self.delete_from(&mut tx, "journal_commits", &changes.finished)
                .await?;
            self.delete_from(&mut tx, "journal_transactions", &changes.finished)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn upsert_transactions(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        runs: &[&JournaledRun],
    ) -> Result<(), sqlx::Error> {
        let sql = format!(
            "INSERT INTO journal_transactions (proxy, transaction_id, client, graph_hash, owner,
                 placement, accepted_ms) {}
             ON CONFLICT (proxy, transaction_id) DO UPDATE SET client = excluded.client,
                 graph_hash = excluded.graph_hash, owner = excluded.owner,
                 placement = excluded.placement, accepted_ms = excluded.accepted_ms,
                 answered_ms = NULL",
            ninf_db::values_list(runs.len(), 7, 1)
        );
        // Each row count is another statement: caching them would only fill the cache.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(false);
        for run in runs {
            query = query
                .bind(&self.proxy)
                .bind(&run.transaction_id)
                .bind(&run.client)
                .bind(run.graph_hash as i64)
                .bind(&run.owner)
                .bind(run.placement.encode_to_vec())
                .bind(run.accepted_ms);
        }
        query.execute(&mut **tx).await?;
        Ok(())
    }

    async fn upsert_tasks(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        kept: &[(&str, &v1::TaskReport)],
    ) -> Result<(), sqlx::Error> {
        let sql = format!(
            "INSERT INTO journal_tasks (proxy, transaction_id, task, report) {}
             ON CONFLICT (proxy, transaction_id, task) DO UPDATE SET report = excluded.report",
            ninf_db::values_list(kept.len(), 4, 1)
        );
        // Each row count is another statement: caching them would only fill the cache.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).persistent(false);
        for (id, report) in kept {
            query = query
                .bind(&self.proxy)
                .bind(*id)
                .bind(i64::from(report.task))
                .bind(report.encode_to_vec());
        }
        query.execute(&mut **tx).await?;
        Ok(())
    }

    /// One row per commit: they are few (a transaction that writes handles has one) and
    /// may be large (its reply's arrays).
    async fn upsert_commit(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        id: &str,
        commit: &v1::JournaledCommit,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "INSERT INTO journal_commits (proxy, transaction_id, outcome) VALUES ($1, $2, $3)
             ON CONFLICT (proxy, transaction_id) DO UPDATE SET outcome = excluded.outcome",
        )
        .bind(&self.proxy)
        .bind(id)
        .bind(commit.encode_to_vec())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn mark_answered(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        id: &str,
        at_ms: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(
            "UPDATE journal_transactions SET answered_ms = $3
             WHERE proxy = $1 AND transaction_id = $2",
        )
        .bind(&self.proxy)
        .bind(id)
        .bind(at_ms)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// The placement and commit of answered transaction `id`, if the journal still keeps
    /// them.
    pub async fn answer(
        &self,
        id: &str,
    ) -> Result<Option<(v1::ScheduleReply, v1::JournaledCommit)>, JournalError> {
        let row = sqlx::query(
            "SELECT t.placement, c.outcome FROM journal_transactions t
             JOIN journal_commits c ON c.proxy = t.proxy AND c.transaction_id = t.transaction_id
             WHERE t.proxy = $1 AND t.transaction_id = $2",
        )
        .bind(&self.proxy)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let (placement, outcome): (Vec<u8>, Vec<u8>) = (row.try_get(0)?, row.try_get(1)?);
        let decode_error = |e| JournalError::Decode(id.to_string(), e);
        let placement = v1::ScheduleReply::decode(placement.as_slice()).map_err(decode_error)?;
        let commit = v1::JournaledCommit::decode(outcome.as_slice()).map_err(decode_error)?;
        Ok(Some((placement, commit)))
    }

    /// Forgets the transactions answered before `before_ms` (Unix ms).
    pub async fn forget_answered_before(&self, before_ms: i64) -> Result<(), JournalError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "DELETE FROM journal_commits WHERE proxy = $1 AND transaction_id IN
                 (SELECT transaction_id FROM journal_transactions
                  WHERE proxy = $1 AND answered_ms IS NOT NULL AND answered_ms < $2)",
        )
        .bind(&self.proxy)
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM journal_transactions
             WHERE proxy = $1 AND answered_ms IS NOT NULL AND answered_ms < $2",
        )
        .bind(&self.proxy)
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes this proxy's rows of `table` (one of the journal's tables) for `ids`.
    async fn delete_from(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        table: &'static str,
        ids: &[&str],
    ) -> Result<(), sqlx::Error> {
        for chunk in ids.chunks(ROWS) {
            let sql = format!(
                "DELETE FROM {table} WHERE proxy = $1 AND transaction_id IN ({})",
                ninf_db::placeholders(chunk.len(), 2)
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
                .persistent(false)
                .bind(&self.proxy);
            for id in chunk {
                query = query.bind(*id);
            }
            query.execute(&mut **tx).await?;
        }
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
