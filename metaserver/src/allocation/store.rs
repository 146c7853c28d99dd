//! Allocation queues and their jobs in the resource DB: a queue survives the metaserver's
//! restart and a fail-over to another metaserver of the same PostgreSQL DB.

use ninf_proto::v1;
use prost::Message;
use sqlx::Row;

use super::{Job, JobState, Queue, QueueSpec};
use crate::db::{DbError, ResourceDb};

/// A stored spec that no longer reads (a newer or damaged row).
fn bad_spec(name: &str, reason: impl std::fmt::Display) -> DbError {
    DbError::Descriptor {
        routine: format!("allocation queue {name}"),
        reason: reason.to_string(),
    }
}

impl ResourceDb {
    /// Adds a queue; `false` if one of that name exists.
    pub async fn add_queue(&self, spec: &QueueSpec, now: f64) -> Result<bool, DbError> {
        let _turn = self.write_turn().await;
        let inserted = sqlx::query(
            "INSERT INTO alloc_queues (name, spec, state, created_at) VALUES ($1, $2, 'active', $3)
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(&spec.name)
        .bind(spec.to_proto().encode_to_vec())
        .bind(now)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(inserted == 1)
    }

    /// Forgets a queue and its jobs.
    pub async fn remove_queue(&self, name: &str) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        for sql in [
            "DELETE FROM alloc_jobs WHERE queue = $1",
            "DELETE FROM alloc_queues WHERE name = $1",
        ] {
            sqlx::query(sql).bind(name).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Records whether a queue is paused, its failures in a row and the last one's message.
    pub async fn set_queue_state(
        &self,
        name: &str,
        paused: bool,
        failures: u32,
        last_error: &str,
    ) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "UPDATE alloc_queues SET state = $2, failures = $3, last_error = $4 WHERE name = $1",
        )
        .bind(name)
        .bind(if paused { "paused" } else { "active" })
        .bind(i64::from(failures))
        .bind(last_error)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records a job, or its new state and reason.
    pub async fn save_job(&self, queue: &str, job: &Job) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        sqlx::query(
            "INSERT INTO alloc_jobs (queue, job_id, state, submitted_at, script, output, reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (queue, job_id) DO UPDATE SET state = excluded.state,
                 reason = excluded.reason",
        )
        .bind(queue)
        .bind(&job.id)
        .bind(job.state.name())
        .bind(job.submitted_at)
        .bind(&job.script)
        .bind(&job.output)
        .bind(&job.reason)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Every queue with its jobs, oldest first.
    pub async fn queues(&self) -> Result<Vec<Queue>, DbError> {
        let rows = sqlx::query(
            "SELECT name, spec, state, failures, last_error FROM alloc_queues ORDER BY created_at, name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut queues = Vec::with_capacity(rows.len());
        for row in rows {
            let name: String = row.try_get(0)?;
            let bytes: Vec<u8> = row.try_get(1)?;
            let spec = v1::AllocQueueSpec::decode(bytes.as_slice())
                .map_err(|e| bad_spec(&name, e))
                .and_then(|s| QueueSpec::from_proto(&s).map_err(|e| bad_spec(&name, e)))?;
            let state: String = row.try_get(2)?;
            queues.push(Queue {
                jobs: self.jobs(&name).await?,
                spec,
                paused: state == "paused",
                failures: u32::try_from(row.try_get::<i64, _>(3)?).unwrap_or(0),
                last_error: row.try_get(4)?,
            });
        }
        Ok(queues)
    }

    async fn jobs(&self, queue: &str) -> Result<Vec<Job>, DbError> {
        let rows = sqlx::query(
            "SELECT job_id, state, submitted_at, script, output, reason FROM alloc_jobs
             WHERE queue = $1 ORDER BY submitted_at, job_id",
        )
        .bind(queue)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let state: String = row.try_get(1)?;
                Ok(Job {
                    id: row.try_get(0)?,
                    state: JobState::parse(&state).unwrap_or(JobState::Ended),
                    submitted_at: row.try_get(2)?,
                    script: row.try_get(3)?,
                    output: row.try_get(4)?,
                    reason: row.try_get(5)?,
                })
            })
            .collect()
    }
}

/// A placement on a server with a batch job's end, as the resource DB recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct WalltimePlacement {
    pub graph_id: i64,
    pub label: String,
    pub server: String,
    /// The task's predicted finish and its server's job end (Unix seconds), and how long
    /// before the end the server drains.
    pub predicted_finish: f64,
    pub walltime_end: f64,
    pub drain_seconds: f64,
}

impl WalltimePlacement {
    /// Whether the task was predicted to end past the server's deadline: its end less the
    /// longer of `margin` and its drain time.
    pub fn past_deadline(&self, margin: f64) -> bool {
        self.predicted_finish > self.walltime_end - margin.max(self.drain_seconds) + 1e-6
    }
}

impl ResourceDb {
    /// Every recorded placement on a server whose batch job ends: what the walltime rule
    /// is audited against (docs/slurm.md, "Walltime").
    pub async fn walltime_placements(&self) -> Result<Vec<WalltimePlacement>, DbError> {
        let rows = sqlx::query(
            "SELECT g.id, p.label, p.server_address, g.created + p.predicted_finish,
                    s.walltime_end, s.drain_seconds
             FROM placements p JOIN graphs g ON g.id = p.graph_id
                  JOIN servers s ON s.address = p.server_address
             WHERE s.walltime_end > 0 ORDER BY g.id, p.task",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(WalltimePlacement {
                    graph_id: row.try_get(0)?,
                    label: row.try_get(1)?,
                    server: row.try_get(2)?,
                    predicted_finish: row.try_get(3)?,
                    walltime_end: row.try_get(4)?,
                    drain_seconds: row.try_get(5)?,
                })
            })
            .collect()
    }
}
