//! Data handles and their copies in the resource DB.

use std::collections::HashMap;

use ninf_proto::v1;
use prost::Message;
use sqlx::Row;

use crate::data::Kept;
use crate::db::{DbError, ResourceDb};

fn bad_spec(id: &str, reason: impl std::fmt::Display) -> DbError {
    DbError::Descriptor {
        routine: format!("data handle {id}"),
        reason: reason.to_string(),
    }
}

impl ResourceDb {
    /// Records a new handle (with no copies yet).
    pub async fn insert_data(&self, info: &v1::DataInfo) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        let spec = info.spec.clone().unwrap_or_default();
        sqlx::query(
            "INSERT INTO data_handles (id, owner, spec, lease_until, created_at, used_at, put_id)
             VALUES ($1, $2, $3, $4, $5, $5, $6)",
        )
        .bind(&info.id)
        .bind(&info.owner)
        .bind(spec.encode_to_vec())
        .bind(info.lease_until)
        .bind(info.created)
        .bind(&spec.put_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// `owner`'s handles that a put named `put_id` made (an earlier try of it).
    pub async fn data_put_as(
        &self,
        owner: &str,
        put_id: &str,
    ) -> Result<Vec<v1::DataInfo>, DbError> {
        let rows = sqlx::query(
            "SELECT id, owner, spec, lease_until, created_at FROM data_handles
             WHERE owner = $1 AND put_id = $2 ORDER BY created_at, id",
        )
        .bind(owner)
        .bind(put_id)
        .fetch_all(&self.pool)
        .await?;
        self.with_copies(&rows).await
    }

    /// The handle `id` with its copies, if it is recorded.
    pub async fn data(&self, id: &str) -> Result<Option<v1::DataInfo>, DbError> {
        let row = sqlx::query(
            "SELECT id, owner, spec, lease_until, created_at FROM data_handles WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let mut info = info_of(&row)?;
        info.copies = self.copies(id).await?;
        Ok(Some(info))
    }

    async fn copies(&self, id: &str) -> Result<Vec<v1::DataCopy>, DbError> {
        let rows = sqlx::query(
            "SELECT server, object_id FROM data_copies WHERE handle = $1 ORDER BY server",
        )
        .bind(id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(v1::DataCopy {
                    server: r.try_get("server")?,
                    object_id: r.try_get("object_id")?,
                })
            })
            .collect()
    }

    /// Adds a copy; with `replace`, it is the handle's only copy from now on and the others
    /// are returned (for the proxy to delete).
    pub async fn add_data_copy(
        &self,
        id: &str,
        copy: &v1::DataCopy,
        replace: bool,
    ) -> Result<Vec<v1::DataCopy>, DbError> {
        let _turn = self.write_turn().await;
        let old = if replace {
            let old: Vec<v1::DataCopy> = self
                .copies(id)
                .await?
                .into_iter()
                .filter(|c| c != copy)
                .collect();
            sqlx::query("DELETE FROM data_copies WHERE handle = $1")
                .bind(id)
                .execute(&self.pool)
                .await?;
            old
        } else {
            Vec::new()
        };
        sqlx::query(
            "INSERT INTO data_copies (handle, server, object_id) VALUES ($1, $2, $3)
             ON CONFLICT (handle, server) DO UPDATE SET object_id = excluded.object_id",
        )
        .bind(id)
        .bind(&copy.server)
        .bind(&copy.object_id)
        .execute(&self.pool)
        .await?;
        Ok(old)
    }

    /// Marks the handle used at `now` (read for a call or a get, or written): replicas are
    /// evicted least recently used first.
    pub async fn touch_data(&self, id: &str, now: f64) -> Result<(), DbError> {
        self.touch_data_all(&[(id.to_string(), now)]).await
    }

    /// Marks handles used, each at its time, in one transaction: the latest mark of each
    /// handle named more than once.
    pub async fn touch_data_all(&self, marks: &[(String, f64)]) -> Result<(), DbError> {
        let mut latest: HashMap<&str, f64> = HashMap::new();
        for (id, at) in marks {
            let mark = latest.entry(id.as_str()).or_insert(*at);
            *mark = mark.max(*at);
        }
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        for (id, at) in latest {
            sqlx::query("UPDATE data_handles SET used_at = $2 WHERE id = $1")
                .bind(id)
                .bind(at)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The copies `server` keeps, each with its handle's bytes, number of copies and last
    /// use.
    pub async fn kept_on(&self, server: &str) -> Result<Vec<Kept>, DbError> {
        let rows = sqlx::query(
            "SELECT c.handle, h.spec, h.used_at,
                    (SELECT COUNT(*) FROM data_copies o WHERE o.handle = c.handle) AS copies
             FROM data_copies c JOIN data_handles h ON h.id = c.handle
             WHERE c.server = $1",
        )
        .bind(server)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let handle: String = r.try_get("handle")?;
                let spec: Vec<u8> = r.try_get("spec")?;
                let spec =
                    v1::DataSpec::decode(spec.as_slice()).map_err(|e| bad_spec(&handle, e))?;
                let copies: i64 = r.try_get("copies")?;
                Ok(Kept {
                    handle,
                    bytes: spec.bytes,
                    copies: usize::try_from(copies).unwrap_or(0),
                    used_at: r.try_get("used_at")?,
                })
            })
            .collect()
    }

    /// Drops the handle's copy on `server` from the records; the copy it was, if any.
    pub async fn remove_copy(
        &self,
        id: &str,
        server: &str,
    ) -> Result<Option<v1::DataCopy>, DbError> {
        let _turn = self.write_turn().await;
        let copy = self
            .copies(id)
            .await?
            .into_iter()
            .find(|c| c.server == server);
        sqlx::query("DELETE FROM data_copies WHERE handle = $1 AND server = $2")
            .bind(id)
            .bind(server)
            .execute(&self.pool)
            .await?;
        Ok(copy)
    }

    /// Drops from the records the copies on `server` (restarted with empty storage) of
    /// handles that have another copy; the last copy of a handle stays listed, so that a call
    /// that needs it fails naming where it was. Returns the handles whose copies went.
    pub async fn drop_copies_on(&self, server: &str) -> Result<Vec<String>, DbError> {
        let rows = sqlx::query(
            "SELECT handle FROM data_copies WHERE server = $1 AND handle IN
                 (SELECT handle FROM data_copies GROUP BY handle HAVING COUNT(*) > 1)
             ORDER BY handle",
        )
        .bind(server)
        .fetch_all(&self.pool)
        .await?;
        let handles: Vec<String> = rows
            .iter()
            .map(|r| r.try_get(0))
            .collect::<Result<_, _>>()?;
        for handle in &handles {
            self.remove_copy(handle, server).await?;
        }
        Ok(handles)
    }

    /// Forgets a handle and its copies.
    pub async fn delete_data(&self, id: &str) -> Result<(), DbError> {
        let _turn = self.write_turn().await;
        let mut tx = self.pool.begin().await?;
        for sql in [
            "DELETE FROM data_copies WHERE handle = $1",
            "DELETE FROM data_handles WHERE id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Every handle of `owner`, oldest first, with their copies.
    pub async fn data_of(&self, owner: &str) -> Result<Vec<v1::DataInfo>, DbError> {
        let rows = sqlx::query(
            "SELECT id, owner, spec, lease_until, created_at FROM data_handles
             WHERE owner = $1 ORDER BY created_at, id",
        )
        .bind(owner)
        .fetch_all(&self.pool)
        .await?;
        self.with_copies(&rows).await
    }

    /// Every handle, for status: oldest first.
    pub async fn all_data(&self) -> Result<Vec<v1::DataInfo>, DbError> {
        let rows = sqlx::query(
            "SELECT id, owner, spec, lease_until, created_at FROM data_handles
             ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        self.with_copies(&rows).await
    }

    async fn with_copies(&self, rows: &[sqlx::any::AnyRow]) -> Result<Vec<v1::DataInfo>, DbError> {
        let mut handles = Vec::with_capacity(rows.len());
        for row in rows {
            let mut info = info_of(row)?;
            info.copies = self.copies(&info.id).await?;
            handles.push(info);
        }
        Ok(handles)
    }

    /// Extends the leases of `owner`'s handles (all of them when `ids` is empty) to `until`;
    /// the number renewed.
    pub async fn renew_data(
        &self,
        owner: &str,
        ids: &[String],
        until: f64,
    ) -> Result<u32, DbError> {
        let _turn = self.write_turn().await;
        let renewed = if ids.is_empty() {
            sqlx::query("UPDATE data_handles SET lease_until = $2 WHERE owner = $1")
                .bind(owner)
                .bind(until)
                .execute(&self.pool)
                .await?
                .rows_affected()
        } else {
            let mut renewed = 0;
            for id in ids {
                renewed += sqlx::query(
                    "UPDATE data_handles SET lease_until = $3 WHERE owner = $1 AND id = $2",
                )
                .bind(owner)
                .bind(id)
                .bind(until)
                .execute(&self.pool)
                .await?
                .rows_affected();
            }
            renewed
        };
        Ok(u32::try_from(renewed).unwrap_or(u32::MAX))
    }

    /// Forgets every handle whose lease ran out before `now`; returns them, with the copies
    /// they had (the servers drop the bytes on their own lease).
    pub async fn expire_data(&self, now: f64) -> Result<Vec<v1::DataInfo>, DbError> {
        let rows = sqlx::query(
            "SELECT id, owner, spec, lease_until, created_at FROM data_handles
             WHERE lease_until < $1",
        )
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        let expired = self.with_copies(&rows).await?;
        for info in &expired {
            self.delete_data(&info.id).await?;
        }
        Ok(expired)
    }
}

fn info_of(row: &sqlx::any::AnyRow) -> Result<v1::DataInfo, DbError> {
    let id: String = row.try_get("id")?;
    let spec: Vec<u8> = row.try_get("spec")?;
    let spec = v1::DataSpec::decode(spec.as_slice()).map_err(|e| bad_spec(&id, e))?;
    Ok(v1::DataInfo {
        owner: row.try_get("owner")?,
        spec: Some(spec),
        copies: Vec::new(),
        lease_until: row.try_get("lease_until")?,
        created: row.try_get("created_at")?,
        id,
    })
}
