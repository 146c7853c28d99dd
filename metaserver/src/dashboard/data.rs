//! The data page: the handles kept on the grid, summed by the server holding their copies and
//! by their owner, and listed one by one. A pure view of the resource DB's records and the
//! servers' caps, so tests check it without a browser.

use std::collections::BTreeMap;

use ninf_proto::v1;
use serde::Serialize;

/// How many characters of a handle's id the page shows: enough to tell handles apart, not the
/// whole id (the page is for people; ids are used only by their owner anyway).
const ID_SHOWN: usize = 12;

/// The data page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataPage {
    pub servers: Vec<ServerData>,
    pub owners: Vec<OwnerData>,
    pub handles: Vec<HandleView>,
}

/// What one server keeps: copies of handles, their bytes, and its cap (0: none).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerData {
    pub server: String,
    pub copies: u64,
    pub bytes: u64,
    pub data_cap_bytes: u64,
}

/// What one client keeps: its handles, and their bytes over every copy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OwnerData {
    pub owner: String,
    pub handles: u64,
    pub bytes: u64,
}

/// One handle.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HandleView {
    /// The start of its id.
    pub id: String,
    pub owner: String,
    /// `sticky`, `unique-sticky` or `persistent`.
    pub mode: &'static str,
    pub bytes: u64,
    /// Servers holding a copy; empty until it holds a value.
    pub servers: Vec<String>,
    pub lease_left: f64,
}

fn mode_name(mode: i32) -> &'static str {
    match v1::DataMode::try_from(mode) {
        Ok(v1::DataMode::Persistent) => "persistent",
        Ok(v1::DataMode::UniqueSticky) => "unique-sticky",
        _ => "sticky",
    }
}

/// The page from every handle's record and each server's cap (`(address, cap)`, the servers
/// listed first in that order, then any other a copy names). Handles whose lease has run out
/// at `now` are left out: they are being deleted.
pub fn data_page(data: &[v1::DataInfo], caps: &[(String, u64)], now: f64) -> DataPage {
    let mut servers: Vec<ServerData> = caps
        .iter()
        .map(|(server, cap)| ServerData {
            server: server.clone(),
            copies: 0,
            bytes: 0,
            data_cap_bytes: *cap,
        })
        .collect();
    let mut owners: BTreeMap<&str, OwnerData> = BTreeMap::new();
    let mut handles = Vec::new();
    for d in data.iter().filter(|d| d.lease_until >= now) {
        let spec = d.spec.clone().unwrap_or_default();
        let owner = owners.entry(&d.owner).or_insert_with(|| OwnerData {
            owner: d.owner.clone(),
            handles: 0,
            bytes: 0,
        });
        owner.handles += 1;
        owner.bytes += spec.bytes * d.copies.len() as u64;
        for copy in &d.copies {
            let row = match servers.iter().position(|s| s.server == copy.server) {
                Some(i) => &mut servers[i],
                None => {
                    servers.push(ServerData {
                        server: copy.server.clone(),
                        copies: 0,
                        bytes: 0,
                        data_cap_bytes: 0,
                    });
                    servers.last_mut().expect("just pushed")
                }
            };
            row.copies += 1;
            row.bytes += spec.bytes;
        }
        handles.push(HandleView {
            id: d.id.chars().take(ID_SHOWN).collect(),
            owner: d.owner.clone(),
            mode: mode_name(spec.mode),
            bytes: spec.bytes,
            servers: d.copies.iter().map(|c| c.server.clone()).collect(),
            lease_left: (d.lease_until - now).max(0.0),
        });
    }
    handles.sort_by(|a, b| (&a.owner, &a.id).cmp(&(&b.owner, &b.id)));
    DataPage {
        servers,
        owners: owners.into_values().collect(),
        handles,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(id: &str, owner: &str, bytes: u64, mode: v1::DataMode, on: &[&str]) -> v1::DataInfo {
        v1::DataInfo {
            id: id.into(),
            owner: owner.into(),
            spec: Some(v1::DataSpec {
                bytes,
                mode: mode as i32,
                ..Default::default()
            }),
            copies: on
                .iter()
                .map(|s| v1::DataCopy {
                    server: s.to_string(),
                    object_id: format!("{id}@{s}"),
                })
                .collect(),
            lease_until: 200.0,
            created: 0.0,
        }
    }

    #[test]
    fn sums_copies_by_server_and_bytes_by_owner_and_leaves_out_expired_handles() {
        let mut expired = handle("0000dead", "b", 5, v1::DataMode::Sticky, &["s1"]);
        expired.lease_until = 50.0;
        let data = vec![
            handle(
                "ffff0000111122223333",
                "a",
                100,
                v1::DataMode::Persistent,
                &["s1", "s2"],
            ),
            handle("aaaa", "a", 10, v1::DataMode::Sticky, &["s2"]),
            handle("bbbb", "b", 7, v1::DataMode::Sticky, &[]),
            expired,
        ];
        let caps = vec![("s1".to_string(), 1000), ("s2".to_string(), 0)];
        let page = data_page(&data, &caps, 100.0);
        let servers: Vec<(&str, u64, u64, u64)> = page
            .servers
            .iter()
            .map(|s| (s.server.as_str(), s.copies, s.bytes, s.data_cap_bytes))
            .collect();
        assert_eq!(servers, vec![("s1", 1, 100, 1000), ("s2", 2, 110, 0)]);
        let owners: Vec<(&str, u64, u64)> = page
            .owners
            .iter()
            .map(|o| (o.owner.as_str(), o.handles, o.bytes))
            .collect();
        assert_eq!(owners, vec![("a", 2, 210), ("b", 1, 0)]);
        let ids: Vec<&str> = page.handles.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, vec!["aaaa", "ffff00001111", "bbbb"]);
        assert_eq!(page.handles[1].mode, "persistent");
        assert_eq!(page.handles[1].servers, vec!["s1", "s2"]);
        assert_eq!(page.handles[1].lease_left, 100.0);
    }

    #[test]
    fn a_copy_on_a_server_no_longer_registered_still_counts() {
        let data = vec![handle("cc", "a", 8, v1::DataMode::Sticky, &["gone"])];
        let page = data_page(&data, &[], 0.0);
        assert_eq!(page.servers.len(), 1);
        assert_eq!((page.servers[0].copies, page.servers[0].bytes), (1, 8));
    }
}
