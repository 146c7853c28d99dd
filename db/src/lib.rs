//! Opening the grid's databases: the metaserver's resource DB and the proxy's journal. Either
//! is SQLite (a file, in WAL mode) or PostgreSQL, named by a URL and reached through sqlx's
//! `Any` driver, so that one set of statements (numbered placeholders, SQL both speak) serves
//! both. Each service keeps its own migrations per backend.

use std::time::Duration;

use sqlx::AnyPool;
use sqlx::any::AnyPoolOptions;

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error(
        "database URL `{0}` names no database the grid keeps (sqlite:PATH, sqlite::memory: \
         or postgres://USER:PASSWORD@HOST/DB)"
    )]
    Url(String),
    #[error("{0}")]
    Sql(#[from] sqlx::Error),
}

impl Backend {
    /// The backend of `sqlite:...`, `postgres://...` or `postgresql://...`.
    pub fn of(url: &str) -> Result<Backend, OpenError> {
        if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else {
            Err(OpenError::Url(redact(url)))
        }
    }
}

/// A database URL with its password replaced, for logs and errors.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((credentials, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match credentials.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// `VALUES ($first, ...), (...)`: `rows` rows of `columns` numbered placeholders, for
/// multi-row statements both backends take.
pub fn values_list(rows: usize, columns: usize, first: usize) -> String {
    let mut sql = String::from("VALUES ");
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!("${}", first + row * columns + column));
        }
        sql.push(')');
    }
    sql
}

/// `$first, $first+1, ...`: `count` numbered placeholders, for an `IN (...)` list.
pub fn placeholders(count: usize, first: usize) -> String {
    (first..first + count)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How large a pool to keep: the metaserver serves many readers at once; the proxy's journal
/// has one writer and keeps its footprint small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSize {
    /// At most this many connections (an in-memory SQLite database always has one).
    pub max_connections: u32,
    /// SQLite's page cache per connection, in KiB (`None`: SQLite's default, 2 MiB).
    pub sqlite_cache_kib: Option<u32>,
}

impl PoolSize {
    /// Eight connections on PostgreSQL, four on a SQLite file, default caches.
    pub const SHARED: PoolSize = PoolSize {
        max_connections: 0,
        sqlite_cache_kib: None,
    };
    /// One connection with a 256 KiB cache: each SQLite connection is a thread of its own
    /// in sqlx, and its cache and statements stay allocated once made.
    pub const SINGLE_WRITER: PoolSize = PoolSize {
        max_connections: 1,
        sqlite_cache_kib: Some(256),
    };
}

/// A pool on the database at `url` (`sqlite://PATH`, created if missing, `sqlite::memory:`,
/// or `postgres://...`), and its backend. Migrations are the caller's.
pub async fn open(url: &str) -> Result<(AnyPool, Backend), OpenError> {
    open_sized(url, PoolSize::SHARED).await
}

/// [`open`], with the pool sized by `size`.
pub async fn open_sized(url: &str, size: PoolSize) -> Result<(AnyPool, Backend), OpenError> {
    sqlx::any::install_default_drivers();
    let backend = Backend::of(url)?;
    let pool = match backend {
        Backend::Sqlite => open_sqlite(url, size).await?,
        Backend::Postgres => {
            AnyPoolOptions::new()
                .max_connections(connections(size, 8))
                .acquire_timeout(Duration::from_secs(10))
                .connect(url)
                .await?
        }
    };
    Ok((pool, backend))
}

fn connections(size: PoolSize, default: u32) -> u32 {
    if size.max_connections == 0 {
        default
    } else {
        size.max_connections
    }
}

/// A SQLite pool: the file created if missing, in WAL mode.
async fn open_sqlite(url: &str, size: PoolSize) -> Result<AnyPool, sqlx::Error> {
    let memory = url.contains(":memory:");
    let url = if memory || url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    let cache = size
        .sqlite_cache_kib
        .map(|kib| format!("PRAGMA cache_size = -{kib}"));
    AnyPoolOptions::new()
        // An in-memory database lives in one connection.
        .max_connections(if memory { 1 } else { connections(size, 4) })
        .after_connect(move |connection, _| {
            let cache = cache.clone();
            Box::pin(async move {
                // WAL with `synchronous = NORMAL`, WAL's recommended setting: a commit is
                // durable against a crash of the process and waits for no fsync (which took
                // 20-50 ms per graph here); only a power cut can lose the last commits,
                // records the grid rebuilds anyway.
                for pragma in [
                    "PRAGMA journal_mode = WAL",
                    "PRAGMA synchronous = NORMAL",
                    "PRAGMA foreign_keys = ON",
                    "PRAGMA busy_timeout = 10000",
                ]
                .into_iter()
                .chain(cache.as_deref())
                {
                    sqlx::query(sqlx::AssertSqlSafe(pragma))
                        .execute(&mut *connection)
                        .await?;
                }
                Ok(())
            })
        })
        .connect(&url)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_numbered_placeholders() {
        assert_eq!(values_list(2, 3, 2), "VALUES ($2, $3, $4), ($5, $6, $7)");
        assert_eq!(values_list(1, 1, 1), "VALUES ($1)");
        assert_eq!(placeholders(3, 2), "$2, $3, $4");
    }

    #[test]
    fn backends_by_scheme_and_others_refused_without_their_password() {
        assert_eq!(Backend::of("sqlite::memory:").ok(), Some(Backend::Sqlite));
        assert_eq!(
            Backend::of("postgresql://h/db").ok(),
            Some(Backend::Postgres)
        );
        let error = Backend::of("mysql://ninf:secret@h/db")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("mysql://ninf:***@h/db"), "{error}");
        assert!(!error.contains("secret"), "{error}");
    }

    #[tokio::test]
    async fn a_sqlite_file_is_created_in_wal_mode() {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let path = dir.path().join("a.sqlite");
        let (pool, backend) = open(&format!("sqlite://{}", path.display()))
            .await
            .expect("opens");
        assert_eq!(backend, Backend::Sqlite);
        let mode: (String,) = sqlx::query_as("PRAGMA journal_mode")
            .fetch_one(&pool)
            .await
            .expect("asks");
        assert_eq!(mode.0, "wal");
        assert!(path.exists());
    }
}
