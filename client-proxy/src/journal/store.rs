//! Where the journal is kept: a SQLite file beside the proxy by default, or a PostgreSQL
//! database (`journal = "postgres://..."`), through `ninf-db`. Rows are per proxy name.

use std::collections::HashMap;

use ninf_proto::v1;
use prost::Message;
use sqlx::{AnyPool, Row};

use super::{Entry, JournaledRun};

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
        let (pool, backend) = ninf_db::open(url).await?;
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

    /// The transactions this proxy had not finished, with their tasks' kept outputs.
    pub async fn load(&self) -> Result<Vec<JournaledRun>, JournalError> {
        let rows = sqlx::query(
            "SELECT transaction_id, client, graph_hash, owner, placement, accepted_ms
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
        for run in &mut runs {
            run.tasks = tasks.remove(&run.transaction_id).unwrap_or_default();
        }
        Ok(runs)
    }

    /// Writes `entries` in order, in one database transaction.
    pub async fn apply(&self, entries: &[Entry]) -> Result<(), JournalError> {
        let mut tx = self.pool.begin().await?;
        for entry in entries {
            match entry {
                Entry::Accepted(run) => {
                    self.forget_tasks(&mut tx, &run.transaction_id).await?;
                    sqlx::query(
                        "INSERT INTO journal_transactions (proxy, transaction_id, client,
                             graph_hash, owner, placement, accepted_ms)
                         VALUES ($1, $2, $3, $4, $5, $6, $7)
                         ON CONFLICT (proxy, transaction_id) DO UPDATE SET
                             client = excluded.client, graph_hash = excluded.graph_hash,
                             owner = excluded.owner, placement = excluded.placement,
                             accepted_ms = excluded.accepted_ms",
                    )
                    .bind(&self.proxy)
                    .bind(&run.transaction_id)
                    .bind(&run.client)
                    .bind(run.graph_hash as i64)
                    .bind(&run.owner)
                    .bind(run.placement.encode_to_vec())
                    .bind(run.accepted_ms)
                    .execute(&mut *tx)
                    .await?;
                }
                Entry::TaskKept {
                    transaction_id,
                    report,
                } => {
                    sqlx::query(
                        "INSERT INTO journal_tasks (proxy, transaction_id, task, report)
                         VALUES ($1, $2, $3, $4)
                         ON CONFLICT (proxy, transaction_id, task) DO UPDATE SET
                             report = excluded.report",
                    )
                    .bind(&self.proxy)
                    .bind(transaction_id)
                    .bind(i64::from(report.task))
                    .bind(report.encode_to_vec())
                    .execute(&mut *tx)
                    .await?;
                }
                Entry::Finished(transaction_id) => {
                    self.forget_tasks(&mut tx, transaction_id).await?;
                    sqlx::query(
                        "DELETE FROM journal_transactions WHERE proxy = $1 AND transaction_id = $2",
                    )
                    .bind(&self.proxy)
                    .bind(transaction_id)
                    .execute(&mut *tx)
                    .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn forget_tasks(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        transaction_id: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query("DELETE FROM journal_tasks WHERE proxy = $1 AND transaction_id = $2")
            .bind(&self.proxy)
            .bind(transaction_id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
