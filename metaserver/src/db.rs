//! The resource DB (the metaserver paper): everything the metaserver must remember across restarts,
//! behind [`ResourceDb`] so the scheduler never sees SQL. SQLite by default (a file under the
//! data directory), or PostgreSQL when `database_url` is `postgres://...`, which several
//! metaservers can share ([`crate::leadership`]).
//!
//! One set of statements serves both, through sqlx's `Any` driver: numbered placeholders
//! (`$1`), which both accept, and SQL both speak. Each has its own migrations
//! (`migrations/sqlite`, `migrations/postgres`): their row ids and types differ.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ninf_proto::v1;
use prost::Message;
use serde_json::json;
use sqlx::AnyPool;
use sqlx::{AssertSqlSafe, Row};

/// Rows per multi-row statement: well under SQLite's limit of bound parameters.
const BATCH_ROWS: usize = 200;

pub use ninf_db::{Backend, redact};

use ninf_db::values_list;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database_url: {0}")]
    Open(#[from] ninf_db::OpenError),
    #[error("resource DB: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("resource DB migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("resource DB holds a bad descriptor for `{routine}`: {reason}")]
    Descriptor { routine: String, reason: String },
}

/// A server as stored.
#[derive(Debug, Clone)]
pub struct StoredServer {
    pub id: i64,
    pub address: String,
    pub info: v1::ServerInfo,
    pub last_heartbeat: f64,
    pub routines: Vec<v1::FunctionInterface>,
}

/// A load sample as stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredLoad {
    pub time: f64,
    pub load: f64,
    pub load_average: f64,
    pub free_memory_bytes: u64,
    pub stored_bytes: u64,
}

/// A network sample as stored; locations are addresses or [`crate::CLIENT`].
#[derive(Debug, Clone, PartialEq)]
pub struct StoredLink {
    pub from: String,
    pub to: String,
    pub throughput: f64,
    pub latency: f64,
    pub time: f64,
}

/// A graph's record, as written when it is scheduled.
#[derive(Debug, Clone)]
pub struct GraphRecord {
    pub label: String,
    pub proxy: String,
    pub scheduler: String,
    pub predictor: String,
    pub tasks: u32,
    pub edges: u32,
    pub created: f64,
    pub predicted_makespan: f64,
    pub inter_server_ratio: f64,
    /// The proxy's id for the schedule request; empty: none.
    pub request_id: String,
}

/// A graph to record as scheduled: its id, numbered by the metaserver, its record, its
/// placements and its edges.
#[derive(Debug, Clone)]
pub struct NewGraph {
    pub id: u64,
    pub graph: GraphRecord,
    pub placements: Vec<PlacementRecord>,
    pub edges: Vec<EdgeRecord>,
}

/// The error a graph gets when its schedule request was placed again.
pub const SUPERSEDED: &str =
    "placed again: the metaserver that placed it went away before the proxy had its answer";

/// One placement made.
#[derive(Debug, Clone)]
pub struct PlacementRecord {
    pub task: u32,
    pub label: String,
    pub function: String,
    pub server_address: String,
    pub processors: u32,
    pub predicted_start: f64,
    pub predicted_finish: f64,
}

/// One edge of a recorded graph: an output of `from_task` that `to_task` reads.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EdgeRecord {
    pub from_task: u32,
    pub to_task: u32,
    pub bytes: u64,
}

/// What happened to one task.
#[derive(Debug, Clone, Copy)]
pub struct ActualRecord {
    pub task: u32,
    pub start: f64,
    pub finish: f64,
    pub compute_seconds: f64,
    /// Of `compute_seconds`, the time the task's gang job stood stopped.
    pub stopped_seconds: f64,
    /// Before computing: fetching its inputs, and waiting for the gang table's admission.
    pub fetch_seconds: f64,
    pub queue_seconds: f64,
}

/// How much history to keep.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Load and network samples older than this are deleted.
    pub samples: Duration,
    /// Only this many most recent graphs (with their placements) are kept.
    pub graphs: u32,
}

/// Samples one pruning step deletes at most: a minute of 10,000 servers' samples is some
/// 400,000 rows, and a step holds the write turn, so heartbeats, network reports and
/// placements are written between the steps rather than behind all of them.
const PRUNE_BATCH_ROWS: i64 = 5_000;

/// The tables of samples kept for `retention_seconds`.
#[derive(Debug, Clone, Copy)]
enum SampleTable {
    Load,
    Network,
}

impl SampleTable {
    fn name(self) -> &'static str {
        match self {
            SampleTable::Load => "load_samples",
            SampleTable::Network => "network_samples",
        }
    }
}

/// The resource DB.
#[derive(Clone)]
pub struct ResourceDb {
    pub(crate) pool: AnyPool,
    backend: Backend,
    /// On SQLite, the turn every writer takes (see [`ResourceDb::write_turn`]); PostgreSQL
    /// has no need of one.
    writers: Option<Arc<tokio::sync::Mutex<()>>>,
}

/// Inserts a graph's placements from one JSON array of rows, unpacked by the database:
/// bound as a VALUES list, each row's eight parameters went one by one through the Any
/// driver, 20 µs a row (0.2 s for a graph of 10,000 tiny tasks, on the path to its first
/// call).
fn placements_insert(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "INSERT INTO placements (graph_id, task, label, function, server_address,
                 processors, predicted_start, predicted_finish)
             SELECT $1, value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4,
                 value ->> 5, value ->> 6
             FROM json_each($2)"
        }
        Backend::Postgres => {
            "INSERT INTO placements (graph_id, task, label, function, server_address,
                 processors, predicted_start, predicted_finish)
             SELECT $1, (e ->> 0)::BIGINT, e ->> 1, e ->> 2, e ->> 3, (e ->> 4)::BIGINT,
                 (e ->> 5)::DOUBLE PRECISION, (e ->> 6)::DOUBLE PRECISION
             FROM jsonb_array_elements($2::JSONB) AS e"
        }
    }
}

/// A graph's edges from one JSON array of rows (see [`placements_insert`]).
fn edges_insert(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "INSERT INTO graph_edges (graph_id, from_task, to_task, bytes)
             SELECT $1, value ->> 0, value ->> 1, value ->> 2 FROM json_each($2)"
        }
        Backend::Postgres => {
            "INSERT INTO graph_edges (graph_id, from_task, to_task, bytes)
             SELECT $1, (e ->> 0)::BIGINT, (e ->> 1)::BIGINT, (e ->> 2)::BIGINT
             FROM jsonb_array_elements($2::JSONB) AS e"
        }
    }
}

/// A graph's actual times from one JSON array of rows (see [`placements_insert`]).
fn actuals_update(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            // Materialized, the rows are the outer loop and each finds its placement by
            // the primary key; joined directly, SQLite scanned the rows once per placement
            // (46 s for 10,000 tasks).
            "WITH a (task, start, finish, compute, stopped, fetch, queue) AS MATERIALIZED (
                 SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4,
                     value ->> 5, value ->> 6
                 FROM json_each($2))
             UPDATE placements SET actual_start = a.start, actual_finish = a.finish,
                 compute_seconds = a.compute, stopped_seconds = a.stopped,
                 fetch_seconds = a.fetch, queue_seconds = a.queue
             FROM a WHERE placements.graph_id = $1 AND placements.task = a.task"
        }
        Backend::Postgres => {
            "UPDATE placements SET actual_start = (a ->> 1)::DOUBLE PRECISION,
                 actual_finish = (a ->> 2)::DOUBLE PRECISION,
                 compute_seconds = (a ->> 3)::DOUBLE PRECISION,
                 stopped_seconds = (a ->> 4)::DOUBLE PRECISION,
                 fetch_seconds = (a ->> 5)::DOUBLE PRECISION,
                 queue_seconds = (a ->> 6)::DOUBLE PRECISION
             FROM jsonb_array_elements($2::JSONB) AS a
             WHERE placements.graph_id = $1 AND placements.task = (a ->> 0)::BIGINT"
        }
    }
}

/// Rows as one JSON array of arrays, for the statements above.
fn json_rows(rows: impl Iterator<Item = serde_json::Value>) -> String {
    serde_json::Value::Array(rows.collect()).to_string()
}

/// JSON has no infinities: a time that is not finite is stored as the largest finite one.
fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { f64::MAX }
}

fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

impl ResourceDb {
    /// Opens the database at `url` (`sqlite://PATH`, created if missing, `sqlite::memory:`,
    /// or `postgres://...`) and brings its schema up to date.
    pub async fn open(url: &str) -> Result<ResourceDb, DbError> {
        let (pool, backend) = ninf_db::open(url).await?;
        match backend {
            Backend::Sqlite => sqlx::migrate!("./migrations/sqlite").run(&pool).await?,
            Backend::Postgres => sqlx::migrate!("./migrations/postgres").run(&pool).await?,
        }
        let writers = (backend == Backend::Sqlite).then(|| Arc::new(tokio::sync::Mutex::new(())));
        Ok(ResourceDb {
            pool,
            backend,
            writers,
        })
    }

    /// Waits for this process's turn to write, held until the write commits. SQLite lets
    /// one writer in at a time, and one that finds the file locked sleeps in SQLite's busy
    /// handler, 1, 2, 5 ... then 100 ms between its tries: at 10,000 servers a graph's rows
    /// behind a batch of heartbeats waited out those sleeps, the tail of the placement
    /// times (p99 147 ms, docs/notes/2026-12-04-placement-at-10000-servers.md). Taking turns
    /// here, the next writer starts the moment the one before commits. The busy handler
    /// still covers other processes (a `ninf` command reading the file).
    pub(crate) async fn write_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.writers {
            Some(writers) => Some(writers.lock().await),
            None => None,
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes the pool (the metaserver calls it at shutdown so the file is left clean).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The instance the server at `address` last registered with (`ServerInfo.instance`;
    /// empty when it said none), if it registered before.
    pub async fn server_instance(&self, address: &str) -> Result<Option<String>, DbError> {
        let row = sqlx::query("SELECT instance FROM servers WHERE address = $1")
            .bind(address)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => Some(row.try_get(0)?),
            None => None,
        })
    }

    /// Records a registration: inserts the server or replaces what was known about its
    /// address, with its routines. Returns its id.
    pub async fn register(
        &self,
        address: &str,
        info: &v1::ServerInfo,
        routines: &[v1::FunctionInterface],
        now: f64,
    ) -> Result<i64, DbError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        let id: i64 = sqlx::query(
            "INSERT INTO servers (address, cpus, processors, memory_bytes, mflops, benchmark_n,
                 bulk_address, registered_at, last_heartbeat, state, quantum_seconds,
                 bulk_local, walltime_end, batch_job, allocation, drain_seconds, data_cap_bytes,
                 instance, site)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'up', $10, $11, $12, $13, $14, $15,
                 $16, $17, $18)
             ON CONFLICT (address) DO UPDATE SET cpus = excluded.cpus,
                 processors = excluded.processors, memory_bytes = excluded.memory_bytes,
                 mflops = excluded.mflops, benchmark_n = excluded.benchmark_n,
                 bulk_address = excluded.bulk_address, registered_at = excluded.registered_at,
                 last_heartbeat = excluded.last_heartbeat, state = 'up',
                 quantum_seconds = excluded.quantum_seconds, bulk_local = excluded.bulk_local,
                 walltime_end = excluded.walltime_end, batch_job = excluded.batch_job,
                 allocation = excluded.allocation, drain_seconds = excluded.drain_seconds,
                 data_cap_bytes = excluded.data_cap_bytes, instance = excluded.instance,
                 site = excluded.site
             RETURNING id",
        )
        .bind(address)
        .bind(i64::from(info.cpus))
        .bind(i64::from(info.processors))
        .bind(to_i64(info.memory_bytes))
        .bind(info.mflops)
        .bind(i64::from(info.benchmark_n))
        .bind(&info.bulk_address)
        .bind(now)
        .bind(now)
        .bind(finite(info.quantum_seconds))
        .bind(&info.bulk_local)
        .bind(finite(info.walltime_end))
        .bind(&info.batch_job)
        .bind(&info.allocation)
        .bind(finite(info.drain_seconds))
        .bind(to_i64(info.data_cap_bytes))
        .bind(&info.instance)
        .bind(&info.site)
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
        sqlx::query("DELETE FROM routines WHERE server_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        for chunk in routines.chunks(BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO routines (server_id, module, name, descriptor) {}",
                values_list(chunk.len(), 4, 1)
            );
            let mut insert = sqlx::query(AssertSqlSafe(sql));
            for routine in chunk {
                insert = insert
                    .bind(id)
                    .bind(routine.module.clone())
                    .bind(routine.name.clone())
                    .bind(routine.encode_to_vec());
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(id)
    }

    /// Every registered server with its routines.
    pub async fn servers(&self) -> Result<Vec<StoredServer>, DbError> {
        let rows = sqlx::query(
            "SELECT id, address, cpus, processors, memory_bytes, mflops, benchmark_n,
                    bulk_address, last_heartbeat, quantum_seconds, bulk_local,
                    walltime_end, batch_job, allocation, drain_seconds, data_cap_bytes, instance,
                    site
             FROM servers ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut servers = Vec::with_capacity(rows.len());
        for row in rows {
            let id: i64 = row.try_get(0)?;
            let info = v1::ServerInfo {
                cpus: u32::try_from(row.try_get::<i64, _>(2)?).unwrap_or(0),
                processors: u32::try_from(row.try_get::<i64, _>(3)?).unwrap_or(0),
                memory_bytes: to_u64(row.try_get(4)?),
                mflops: row.try_get(5)?,
                benchmark_n: u32::try_from(row.try_get::<i64, _>(6)?).unwrap_or(0),
                bulk_address: row.try_get(7)?,
                quantum_seconds: row.try_get(9)?,
                // A socket the server no longer listens on (it died while the metaserver
                // was down) costs a proxy one failed connect, then the TCP port.
                bulk_local: row.try_get(10)?,
                walltime_end: row.try_get(11)?,
                batch_job: row.try_get(12)?,
                allocation: row.try_get(13)?,
                drain_seconds: row.try_get(14)?,
                data_cap_bytes: to_u64(row.try_get(15)?),
                instance: row.try_get(16)?,
                site: row.try_get(17)?,
                // Servers ask each other for it (compute-server's storage::borrowing).
                store_local: String::new(),
                // Not kept: until the server registers again, its sticky data's readers
                // run where the data is, as with a server that says no host.
                host: String::new(),
            };
            let routines = sqlx::query(
                "SELECT name, descriptor FROM routines WHERE server_id = $1 ORDER BY name",
            )
            .bind(id)
            .fetch_all(&self.pool)
            .await?
            .into_iter()
            .map(|row| {
                let name: String = row.try_get(0)?;
                let bytes: Vec<u8> = row.try_get(1)?;
                v1::FunctionInterface::decode(bytes.as_slice()).map_err(|e| DbError::Descriptor {
                    routine: name,
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, DbError>>()?;
            servers.push(StoredServer {
                id,
                address: row.try_get(1)?,
                info,
                last_heartbeat: row.try_get(8)?,
                routines,
            });
        }
        Ok(servers)
    }

    /// Records a heartbeat and its load sample.
    pub async fn heartbeat(&self, server: i64, sample: StoredLoad) -> Result<(), DbError> {
        self.heartbeats(&[(server, sample)]).await
    }

    /// Records heartbeats and their load samples, in one transaction: each server's latest
    /// time, every sample (multi-row inserts).
    pub async fn heartbeats(&self, beats: &[(i64, StoredLoad)]) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        let mut latest: HashMap<i64, f64> = HashMap::new();
        for (server, sample) in beats {
            let time = latest.entry(*server).or_insert(sample.time);
            *time = time.max(sample.time);
        }
        let mut tx = self.pool.begin().await?;
        for (server, time) in latest {
            sqlx::query("UPDATE servers SET last_heartbeat = $1, state = 'up' WHERE id = $2")
                .bind(time)
                .bind(server)
                .execute(&mut *tx)
                .await?;
        }
        for chunk in beats.chunks(BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO load_samples (server_id, time, load, load_average,
                     free_memory_bytes, stored_bytes) {}",
                values_list(chunk.len(), 6, 1)
            );
            // Each row count is another statement: caching them would only fill the cache.
            let mut insert = sqlx::query(AssertSqlSafe(sql)).persistent(false);
            for (server, sample) in chunk {
                insert = insert
                    .bind(*server)
                    .bind(sample.time)
                    .bind(sample.load)
                    .bind(sample.load_average)
                    .bind(to_i64(sample.free_memory_bytes))
                    .bind(to_i64(sample.stored_bytes));
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Records the state the metaserver decided for a server ('up' or 'down').
    pub async fn set_state(&self, server: i64, state: &str) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        sqlx::query("UPDATE servers SET state = $1 WHERE id = $2")
            .bind(state)
            .bind(server)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The most recent `limit` load samples of a server, oldest first.
    pub async fn recent_load(&self, server: i64, limit: u32) -> Result<Vec<StoredLoad>, DbError> {
        let rows = sqlx::query(
            "SELECT time, load, load_average, free_memory_bytes, stored_bytes FROM load_samples
             WHERE server_id = $1 ORDER BY time DESC LIMIT $2",
        )
        .bind(server)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let mut samples = rows
            .into_iter()
            .map(|row| {
                Ok(StoredLoad {
                    time: row.try_get(0)?,
                    load: row.try_get(1)?,
                    load_average: row.try_get(2)?,
                    free_memory_bytes: to_u64(row.try_get(3)?),
                    stored_bytes: to_u64(row.try_get(4)?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        samples.reverse();
        Ok(samples)
    }

    pub async fn add_links(&self, samples: &[StoredLink]) -> Result<(), DbError> {
        if samples.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        for chunk in samples.chunks(BATCH_ROWS) {
            let sql = format!(
                "INSERT INTO network_samples (from_location, to_location, throughput, latency, \
                 time) {}",
                values_list(chunk.len(), 5, 1)
            );
            let mut insert = sqlx::query(AssertSqlSafe(sql));
            for s in chunk {
                insert = insert
                    .bind(s.from.clone())
                    .bind(s.to.clone())
                    .bind(s.throughput)
                    .bind(s.latency)
                    .bind(s.time);
            }
            insert.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Network samples newer than `since`, oldest first.
    pub async fn links_since(&self, since: f64) -> Result<Vec<StoredLink>, DbError> {
        let rows = sqlx::query(
            "SELECT from_location, to_location, throughput, latency, time FROM network_samples
             WHERE time >= $1 ORDER BY time",
        )
        .bind(since)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(StoredLink {
                    from: row.try_get(0)?,
                    to: row.try_get(1)?,
                    throughput: row.try_get(2)?,
                    latency: row.try_get(3)?,
                    time: row.try_get(4)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(DbError::from)
    }

    /// The highest graph id recorded, 0 when none is: the metaserver numbers the graphs it
    /// places from the next one on ([`NewGraph::id`]).
    pub async fn last_graph_id(&self) -> Result<u64, DbError> {
        let last: Option<i64> = sqlx::query("SELECT MAX(id) FROM graphs")
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        Ok(last.map_or(0, to_u64))
    }

    /// Records scheduled graphs, their placements and their edges, in one transaction: all
    /// of them or, on an error, none.
    pub async fn record_graphs(&self, graphs: &[NewGraph]) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        for graph in graphs {
            self.insert_graph(&mut tx, graph).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn insert_graph(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        new: &NewGraph,
    ) -> Result<(), DbError> {
        let NewGraph {
            id,
            graph,
            placements,
            edges,
        } = new;
        let id = to_i64(*id);
        if !graph.request_id.is_empty() {
            sqlx::query(
                "UPDATE graphs SET state = 'failed', error = $3
                 WHERE proxy = $1 AND request_id = $2 AND state = 'running'",
            )
            .bind(&graph.proxy)
            .bind(&graph.request_id)
            .bind(SUPERSEDED)
            .execute(&mut **tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO graphs (id, label, proxy, scheduler, predictor, tasks, edges, created,
                 predicted_makespan, inter_server_ratio, actual_makespan, state, error,
                 request_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, 'running', '', $11)",
        )
        .bind(id)
        .bind(&graph.label)
        .bind(&graph.proxy)
        .bind(&graph.scheduler)
        .bind(&graph.predictor)
        .bind(i64::from(graph.tasks))
        .bind(i64::from(graph.edges))
        .bind(graph.created)
        .bind(graph.predicted_makespan)
        .bind(graph.inter_server_ratio)
        .bind(&graph.request_id)
        .execute(&mut **tx)
        .await?;
        let rows = placements.iter().map(|p| {
            json!([
                p.task,
                p.label,
                p.function,
                p.server_address,
                p.processors,
                finite(p.predicted_start),
                finite(p.predicted_finish)
            ])
        });
        sqlx::query(placements_insert(self.backend))
            .bind(id)
            .bind(json_rows(rows))
            .execute(&mut **tx)
            .await?;
        if !edges.is_empty() {
            let rows = edges
                .iter()
                .map(|e| json!([e.from_task, e.to_task, to_i64(e.bytes)]));
            sqlx::query(edges_insert(self.backend))
                .bind(id)
                .bind(json_rows(rows))
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Records how a graph ended and its tasks' actual times.
    pub async fn record_actuals(
        &self,
        graph: u64,
        makespan: f64,
        error: &str,
        actuals: &[ActualRecord],
    ) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        let graph = to_i64(graph);
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE graphs SET actual_makespan = $1, state = $2, error = $3 WHERE id = $4")
            .bind(makespan)
            .bind(if error.is_empty() { "done" } else { "failed" })
            .bind(error)
            .bind(graph)
            .execute(&mut *tx)
            .await?;
        let rows = actuals.iter().map(|a| {
            json!([
                a.task,
                finite(a.start),
                finite(a.finish),
                finite(a.compute_seconds),
                finite(a.stopped_seconds),
                finite(a.fetch_seconds),
                finite(a.queue_seconds)
            ])
        });
        sqlx::query(actuals_update(self.backend))
            .bind(graph)
            .bind(json_rows(rows))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The most recent graphs, newest first.
    pub async fn recent_graphs(&self, limit: u32) -> Result<Vec<v1::GraphSummary>, DbError> {
        let rows = sqlx::query(
            "SELECT id, label, scheduler, tasks, edges, predicted_makespan, actual_makespan,
                    state, inter_server_ratio, error FROM graphs ORDER BY id DESC LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(summary)
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(DbError::from)
    }

    /// One graph's summary, if it is still kept.
    pub async fn graph(&self, graph: u64) -> Result<Option<v1::GraphSummary>, DbError> {
        let row = sqlx::query(
            "SELECT id, label, scheduler, tasks, edges, predicted_makespan, actual_makespan,
                    state, inter_server_ratio, error FROM graphs WHERE id = $1",
        )
        .bind(to_i64(graph))
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| summary(&row))
            .transpose()
            .map_err(DbError::from)
    }

    /// The edges of one graph.
    pub async fn graph_edges(&self, graph: u64) -> Result<Vec<EdgeRecord>, DbError> {
        let rows = sqlx::query(
            "SELECT from_task, to_task, bytes FROM graph_edges WHERE graph_id = $1
             ORDER BY from_task, to_task",
        )
        .bind(to_i64(graph))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(EdgeRecord {
                    from_task: u32::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0),
                    to_task: u32::try_from(row.try_get::<i64, _>(1)?).unwrap_or(0),
                    bytes: to_u64(row.try_get(2)?),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(DbError::from)
    }

    /// The placements of one graph with their actual times, if reported, by task.
    pub async fn placements(&self, graph: u64) -> Result<Vec<PlacementRow>, DbError> {
        let rows = sqlx::query(
            "SELECT task, server_address, predicted_start, predicted_finish, actual_start,
                    actual_finish, label, function, processors, compute_seconds,
                    stopped_seconds, fetch_seconds, queue_seconds
             FROM placements WHERE graph_id = $1 ORDER BY task",
        )
        .bind(to_i64(graph))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok(PlacementRow {
                    task: u32::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0),
                    server_address: row.try_get(1)?,
                    predicted_start: row.try_get(2)?,
                    predicted_finish: row.try_get(3)?,
                    actual_start: row.try_get(4)?,
                    actual_finish: row.try_get(5)?,
                    label: row.try_get(6)?,
                    function: row.try_get(7)?,
                    processors: u32::try_from(row.try_get::<i64, _>(8)?).unwrap_or(0),
                    compute_seconds: row.try_get(9)?,
                    stopped_seconds: row.try_get(10)?,
                    fetch_seconds: row.try_get(11)?,
                    queue_seconds: row.try_get(12)?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()
            .map_err(DbError::from)
    }

    /// Deletes history beyond the retention bounds; returns the rows deleted.
    pub async fn prune(&self, retention: Retention, now: f64) -> Result<u64, DbError> {
        let cutoff = now - retention.samples.as_secs_f64();
        let mut deleted = 0;
        for table in [SampleTable::Load, SampleTable::Network] {
            deleted += self.prune_samples(table, cutoff).await?;
        }
        let _turn = self.write_turn().await;
        // A graph's rows in other tables first, then the graph: one transaction, so no
        // graph is left half deleted.
        let mut tx = self.pool.begin().await?;
        for graph_rows in [
            "DELETE FROM graph_edges WHERE graph_id IN
                 (SELECT id FROM graphs WHERE id NOT IN
                     (SELECT id FROM graphs ORDER BY id DESC LIMIT $1))",
            "DELETE FROM placements WHERE graph_id IN
                 (SELECT id FROM graphs WHERE id NOT IN
                     (SELECT id FROM graphs ORDER BY id DESC LIMIT $1))",
            "DELETE FROM graphs WHERE id NOT IN (SELECT id FROM graphs ORDER BY id DESC LIMIT $1)",
        ] {
            deleted += sqlx::query(graph_rows)
                .bind(i64::from(retention.graphs))
                .execute(&mut *tx)
                .await?
                .rows_affected();
        }
        tx.commit().await?;
        Ok(deleted)
    }

    /// Deletes `table`'s samples older than `cutoff`, [`PRUNE_BATCH_ROWS`] at a time, each
    /// step in a write turn of its own; the rows deleted.
    async fn prune_samples(&self, table: SampleTable, cutoff: f64) -> Result<u64, DbError> {
        let name = table.name();
        let mut deleted = 0;
        loop {
            let _turn = self.write_turn().await;
            // The time of the row just past this step's batch: the rows before it go now.
            let past_batch = sqlx::query(AssertSqlSafe(format!(
                "SELECT time FROM {name} WHERE time < $1 ORDER BY time LIMIT 1 OFFSET $2"
            )))
            .bind(cutoff)
            .bind(PRUNE_BATCH_ROWS)
            .fetch_optional(&self.pool)
            .await?
            .map(|row| row.try_get::<f64, _>(0))
            .transpose()?;
            let delete = |operator: &str, bound: f64| {
                sqlx::query(AssertSqlSafe(format!(
                    "DELETE FROM {name} WHERE time {operator} $1"
                )))
                .bind(bound)
            };
            let Some(bound) = past_batch else {
                let rows = delete("<", cutoff).execute(&self.pool).await?;
                return Ok(deleted + rows.rows_affected());
            };
            let mut rows = delete("<", bound)
                .execute(&self.pool)
                .await?
                .rows_affected();
            if rows == 0 {
                // More than a batch of samples at one time: they go together.
                rows = delete("<=", bound)
                    .execute(&self.pool)
                    .await?
                    .rows_affected();
            }
            deleted += rows;
        }
    }

    /// Rows in each history table: (load samples, network samples, graphs, placements).
    pub async fn history_sizes(&self) -> Result<(u64, u64, u64, u64), DbError> {
        let mut counts = [0u64; 4];
        for (i, table) in [
            "SELECT COUNT(*) FROM load_samples",
            "SELECT COUNT(*) FROM network_samples",
            "SELECT COUNT(*) FROM graphs",
            "SELECT COUNT(*) FROM placements",
        ]
        .into_iter()
        .enumerate()
        {
            counts[i] = to_u64(sqlx::query(table).fetch_one(&self.pool).await?.try_get(0)?);
        }
        Ok((counts[0], counts[1], counts[2], counts[3]))
    }
}

/// A stored placement with its actual times, if reported.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PlacementRow {
    pub task: u32,
    pub server_address: String,
    pub predicted_start: f64,
    pub predicted_finish: f64,
    pub actual_start: Option<f64>,
    pub actual_finish: Option<f64>,
    pub label: String,
    pub function: String,
    pub processors: u32,
    /// The server's account of the task's compute time, and the part of it its gang job
    /// stood stopped, once reported.
    pub compute_seconds: Option<f64>,
    pub stopped_seconds: Option<f64>,
    /// Before computing: fetching its inputs, and waiting for the gang table's admission,
    /// once reported.
    pub fetch_seconds: Option<f64>,
    pub queue_seconds: Option<f64>,
}

/// A `graphs` row (columns as `recent_graphs` selects them) as the status message's summary.
fn summary(row: &sqlx::any::AnyRow) -> Result<v1::GraphSummary, sqlx::Error> {
    Ok(v1::GraphSummary {
        graph_id: to_u64(row.try_get(0)?),
        label: row.try_get(1)?,
        scheduler: row.try_get(2)?,
        tasks: u32::try_from(row.try_get::<i64, _>(3)?).unwrap_or(0),
        edges: u32::try_from(row.try_get::<i64, _>(4)?).unwrap_or(0),
        predicted_makespan: row.try_get(5)?,
        actual_makespan: row.try_get::<Option<f64>, _>(6)?.unwrap_or(0.0),
        state: row.try_get(7)?,
        inter_server_ratio: row.try_get(8)?,
        error: row.try_get(9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_another_kind_is_refused_without_its_password() {
        let error = Backend::of("mysql://ninf:secret@h/db")
            .map_err(DbError::from)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some(
                "database_url: database URL `mysql://ninf:***@h/db` names no database the \
                 grid keeps (sqlite:PATH, sqlite::memory: or postgres://USER:PASSWORD@HOST/DB)"
            )
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
