//! Room under a server's data cap (docs/data.md, "Memory"): which replicas it drops so that
//! new data fits. Replicas go least recently used first; a handle's last copy never goes.

use std::collections::HashMap;

/// A copy of a handle that a server keeps.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    pub handle: String,
    pub bytes: u64,
    /// Copies the handle has on all servers, this one included.
    pub copies: usize,
    /// When the handle was last made, read or written (seconds).
    pub used_at: f64,
}

/// Copies each handle has left as evictions on several servers are chosen, so that two
/// servers never both drop the last two copies of one handle.
pub type Remaining = HashMap<String, usize>;

fn copies_left(kept: &Kept, remaining: &Remaining) -> usize {
    remaining.get(&kept.handle).copied().unwrap_or(kept.copies)
}

/// The copies a server keeping `kept` under `cap` bytes (0: no cap) drops so that `bytes`
/// more fit: none when they fit already; else replicas, least recently used first (the
/// lower id among equals); `None` when they would not fit with every replica gone.
pub fn evictions<'k>(
    cap: u64,
    kept: &'k [Kept],
    bytes: u64,
    remaining: &Remaining,
) -> Option<Vec<&'k Kept>> {
    let (evicted, fits) = drop_until_fits(cap, kept, bytes, remaining);
    fits.then_some(evicted)
}

/// [`evictions`] for data already there (a call's output): when even every replica gone
/// is not enough, every replica goes and the server stays over its cap with last copies.
pub fn make_room<'k>(
    cap: u64,
    kept: &'k [Kept],
    bytes: u64,
    remaining: &Remaining,
) -> Vec<&'k Kept> {
    drop_until_fits(cap, kept, bytes, remaining).0
}

fn drop_until_fits<'k>(
    cap: u64,
    kept: &'k [Kept],
    bytes: u64,
    remaining: &Remaining,
) -> (Vec<&'k Kept>, bool) {
    if cap == 0 {
        return (Vec::new(), true);
    }
    let mut used: u64 = kept.iter().map(|k| k.bytes).sum();
    let mut replicas: Vec<&Kept> = kept
        .iter()
        .filter(|k| copies_left(k, remaining) >= 2)
        .collect();
    replicas.sort_by(|a, b| {
        a.used_at
            .total_cmp(&b.used_at)
            .then_with(|| a.handle.cmp(&b.handle))
    });
    let mut evicted = Vec::new();
    for replica in replicas {
        if used.saturating_add(bytes) <= cap {
            break;
        }
        used = used.saturating_sub(replica.bytes);
        evicted.push(replica);
    }
    (evicted, used.saturating_add(bytes) <= cap)
}

/// Handles made whose copies are being stored: they count against their servers' caps
/// before the records list them as copies, so that puts made together do not overfill a
/// server.
#[derive(Debug, Default)]
pub struct Reserved {
    /// By handle: the servers still to store a copy, its bytes, and when it was made.
    handles: HashMap<String, (Vec<String>, u64, f64)>,
}

impl Reserved {
    pub fn reserve(&mut self, handle: &str, servers: Vec<String>, bytes: u64, now: f64) {
        self.handles
            .insert(handle.to_string(), (servers, bytes, now));
    }

    /// A copy of `handle` is stored on `server`: the records count it from now on.
    pub fn stored(&mut self, handle: &str, server: &str) {
        if let Some((servers, _, _)) = self.handles.get_mut(handle) {
            servers.retain(|s| s != server);
            if servers.is_empty() {
                self.handles.remove(handle);
            }
        }
    }

    /// Forgets `handle`'s reservation; returns the servers it was still to store a copy on.
    pub fn forget(&mut self, handle: &str) -> Vec<String> {
        self.handles
            .remove(handle)
            .map(|(servers, _, _)| servers)
            .unwrap_or_default()
    }

    /// Forgets reservations made before `since` (a put that never finished).
    pub fn prune(&mut self, since: f64) {
        self.handles.retain(|_, (_, _, made)| *made >= since);
    }

    /// What is being stored on `server`, as copies it keeps that cannot be evicted.
    pub fn on<'a>(&'a self, server: &'a str) -> impl Iterator<Item = Kept> + 'a {
        self.handles
            .iter()
            .filter(move |(_, (servers, _, _))| servers.iter().any(|s| s == server))
            .map(|(handle, (_, bytes, made))| Kept {
                handle: handle.clone(),
                bytes: *bytes,
                copies: 1,
                used_at: *made,
            })
    }
}

/// The most bytes a server keeping `kept` under `cap` can take with every replica it may
/// drop gone (`u64::MAX` with no cap).
pub fn room(cap: u64, kept: &[Kept], remaining: &Remaining) -> u64 {
    if cap == 0 {
        return u64::MAX;
    }
    let last_copies: u64 = kept
        .iter()
        .filter(|k| copies_left(k, remaining) < 2)
        .map(|k| k.bytes)
        .sum();
    cap.saturating_sub(last_copies)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(handle: &str, bytes: u64, copies: usize, used_at: f64) -> Kept {
        Kept {
            handle: handle.into(),
            bytes,
            copies,
            used_at,
        }
    }

    fn names(evicted: Option<Vec<&Kept>>) -> Option<Vec<&str>> {
        evicted.map(|e| e.iter().map(|k| k.handle.as_str()).collect())
    }

    #[test]
    fn replicas_go_least_recently_used_first_and_only_as_many_as_needed() {
        let on = [
            kept("a", 40, 2, 3.0),
            kept("b", 40, 2, 1.0),
            kept("c", 40, 2, 2.0),
        ];
        let none = Remaining::new();
        assert_eq!(names(evictions(200, &on, 80, &none)), Some(vec![]));
        assert_eq!(names(evictions(200, &on, 81, &none)), Some(vec!["b"]));
        assert_eq!(names(evictions(200, &on, 130, &none)), Some(vec!["b", "c"]));
        assert_eq!(
            names(evictions(200, &on, 200, &none)),
            Some(vec!["b", "c", "a"])
        );
        assert_eq!(names(evictions(200, &on, 201, &none)), None);
        assert_eq!(room(200, &on, &none), 200);
        // No cap: everything fits, nothing goes.
        assert_eq!(names(evictions(0, &on, 10_000, &none)), Some(vec![]));
        assert_eq!(room(0, &on, &none), u64::MAX);
    }

    #[test]
    fn data_already_there_drops_every_replica_when_that_is_not_enough() {
        let on = [kept("only", 50, 1, 0.0), kept("replica", 50, 2, 9.0)];
        let none = Remaining::new();
        assert_eq!(make_room(80, &on, 10, &none).len(), 1);
        assert!(make_room(200, &on, 10, &none).is_empty());
    }

    #[test]
    fn a_put_being_stored_counts_on_its_servers_until_its_copies_are_recorded() {
        let mut reserved = Reserved::default();
        reserved.reserve("h", vec!["a".into(), "b".into()], 70, 5.0);
        assert_eq!(reserved.on("a").map(|k| k.bytes).sum::<u64>(), 70);
        reserved.stored("h", "a");
        assert_eq!(reserved.on("a").count(), 0);
        assert_eq!(reserved.on("b").count(), 1);
        reserved.prune(6.0);
        assert_eq!(reserved.on("b").count(), 0);
    }

    #[test]
    fn a_last_copy_never_goes_even_when_it_is_the_oldest() {
        let on = [kept("only", 50, 1, 0.0), kept("replica", 50, 3, 9.0)];
        let none = Remaining::new();
        assert_eq!(names(evictions(120, &on, 60, &none)), Some(vec!["replica"]));
        assert_eq!(names(evictions(120, &on, 71, &none)), None);
        assert_eq!(room(120, &on, &none), 70);
        // Its other copy was dropped elsewhere a moment ago: this one is the last now.
        let remaining = Remaining::from([("replica".to_string(), 1)]);
        assert_eq!(names(evictions(120, &on, 60, &remaining)), None);
        assert_eq!(room(120, &on, &remaining), 20);
    }
}
