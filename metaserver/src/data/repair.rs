//! Which persistent handles are short of their replicas, and from which copy each is made
//! whole again: pure, over the records and what each server is. A copy on a server that is
//! down, or that restarted with empty storage (its copies are dropped from the records), no
//! longer counts, nor does one on a server that is draining (it will be gone); the operation
//! (`operations/data_repair.rs`) copies from a copy that can still be read to servers with
//! room, as the proxy does after a write.

use ninf_proto::v1;

/// A persistent handle with fewer live copies than its `replicas`.
#[derive(Debug, Clone, PartialEq)]
pub struct Shortfall {
    pub handle: String,
    pub bytes: u64,
    /// The live copy the new ones are copied from: the first by server, so that a repair
    /// is the same whichever metaserver decides it.
    pub source: v1::DataCopy,
    /// Copies to make.
    pub missing: usize,
    /// Servers the records list a copy on, up or not: no new copy goes there.
    pub listed: Vec<String>,
}

/// Where a copy is, for a repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Up and staying: the copy counts toward the handle's replicas.
    Staying,
    /// Up but draining (its batch job ends soon): the copy can still be read, but it does not
    /// count, so that it is copied away before the server goes.
    Leaving,
    /// Down, or not known.
    Gone,
}

/// The persistent handles among `handles` that are short of their replicas, with `holder`
/// saying what each server is. A handle with no copy left to read cannot be repaired and is
/// left out (its calls fail naming where its copies were).
pub fn shortfalls(handles: &[v1::DataInfo], holder: impl Fn(&str) -> Holder) -> Vec<Shortfall> {
    handles
        .iter()
        .filter_map(|info| {
            let spec = info.spec.as_ref()?;
            if spec.mode != v1::DataMode::Persistent as i32 || spec.empty {
                return None;
            }
            let wanted = spec.replicas.max(1) as usize;
            let mut readable: Vec<(Holder, &v1::DataCopy)> = info
                .copies
                .iter()
                .map(|c| (holder(&c.server), c))
                .filter(|(h, _)| *h != Holder::Gone)
                .collect();
            let counted = readable
                .iter()
                .filter(|(h, _)| *h == Holder::Staying)
                .count();
            let missing = wanted.checked_sub(counted).filter(|&m| m > 0)?;
            // A staying copy first (it is not busy leaving), then by server.
            readable.sort_by(|(ha, a), (hb, b)| {
                (*ha != Holder::Staying, &a.server).cmp(&(*hb != Holder::Staying, &b.server))
            });
            let source = readable.first()?.1.clone();
            Some(Shortfall {
                handle: info.id.clone(),
                bytes: spec.bytes,
                source,
                missing,
                listed: info.copies.iter().map(|c| c.server.clone()).collect(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(id: &str, mode: v1::DataMode, replicas: u32, on: &[&str]) -> v1::DataInfo {
        v1::DataInfo {
            id: id.into(),
            spec: Some(v1::DataSpec {
                bytes: 800,
                mode: mode as i32,
                replicas,
                ..Default::default()
            }),
            copies: on
                .iter()
                .map(|s| v1::DataCopy {
                    server: (*s).into(),
                    object_id: format!("{id}@{s}"),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn only_persistent_handles_short_of_live_copies_with_one_left_are_repaired() {
        let handles = [
            // Two of three copies on down servers: two to make, from the live one.
            handle("p3", v1::DataMode::Persistent, 3, &["c", "a", "b"]),
            // Whole.
            handle("p2", v1::DataMode::Persistent, 2, &["d", "c"]),
            // Sticky data is never copied, even when its server is down.
            handle("s", v1::DataMode::Sticky, 1, &["a"]),
            // No live copy: nothing to copy from.
            handle("gone", v1::DataMode::Persistent, 2, &["a", "b"]),
            // Restarted holders' copies were dropped: one left of two.
            handle("p2b", v1::DataMode::Persistent, 2, &["d"]),
        ];
        let up = |s: &str| {
            if s == "c" || s == "d" {
                Holder::Staying
            } else {
                Holder::Gone
            }
        };
        let found = shortfalls(&handles, up);
        let summary: Vec<(&str, &str, usize, usize)> = found
            .iter()
            .map(|s| {
                (
                    s.handle.as_str(),
                    s.source.server.as_str(),
                    s.missing,
                    s.listed.len(),
                )
            })
            .collect();
        assert_eq!(summary, [("p3", "c", 2, 3), ("p2b", "d", 1, 1)]);
        assert_eq!(found[0].source.object_id, "p3@c");
        assert_eq!(found[0].bytes, 800);
    }

    #[test]
    fn live_copies_beyond_the_count_need_nothing() {
        let handles = [handle("p", v1::DataMode::Persistent, 2, &["a", "b", "c"])];
        let all_but_a = |s: &str| {
            if s == "a" {
                Holder::Gone
            } else {
                Holder::Staying
            }
        };
        assert!(shortfalls(&handles, all_but_a).is_empty());
        let only_a = |s: &str| {
            if s == "a" {
                Holder::Staying
            } else {
                Holder::Gone
            }
        };
        assert_eq!(shortfalls(&handles, only_a)[0].missing, 1);
    }

    #[test]
    fn a_leaving_servers_copy_is_copied_away_from_it_when_it_is_the_only_one_left() {
        let handles = [handle("p", v1::DataMode::Persistent, 2, &["a", "b"])];
        let (a_leaves, b_gone) = (Holder::Leaving, Holder::Gone);
        let found = shortfalls(&handles, |s| if s == "a" { a_leaves } else { b_gone });
        assert_eq!(
            (found[0].source.server.as_str(), found[0].missing),
            ("a", 2)
        );
        // A staying copy is read first, even if a leaving one sorts before it.
        let found = shortfalls(&handles, |s| {
            if s == "a" {
                Holder::Leaving
            } else {
                Holder::Staying
            }
        });
        assert_eq!(
            (found[0].source.server.as_str(), found[0].missing),
            ("b", 1)
        );
    }
}
