//! The servers a proxy keeps connections to, at most so many. A proxy on a grid of
//! 10,000 servers calls and probes them all in time, and with four HTTP/2 connections to
//! each it ran out of file descriptors ("tcp open error") within a minute of `ninf scale`.
//! Past the cap the least recently used servers' connections are let go: a call still on
//! one holds its own handle and finishes, and the next call to that server connects again.
//! Pure: a counter, not a clock, orders the uses.

use std::collections::HashMap;

/// Values (a server's connections) by address, with when each was last used.
#[derive(Debug)]
pub struct ConnectionCache<V> {
    entries: HashMap<String, (V, u64)>,
    uses: u64,
    cap: usize,
}

impl<V: Clone> ConnectionCache<V> {
    pub fn new(cap: usize) -> ConnectionCache<V> {
        ConnectionCache {
            entries: HashMap::new(),
            uses: 0,
            cap: cap.max(1),
        }
    }

    /// `address`'s value, made by `open` if it has none; noted as the latest used.
    pub fn get_or_open<E>(
        &mut self,
        address: &str,
        open: impl FnOnce() -> Result<V, E>,
    ) -> Result<V, E> {
        self.uses += 1;
        if let Some((value, used)) = self.entries.get_mut(address) {
            *used = self.uses;
            return Ok(value.clone());
        }
        let value = open()?;
        if self.entries.len() >= self.cap {
            self.let_go_of_least_used();
        }
        self.entries
            .insert(address.to_string(), (value.clone(), self.uses));
        Ok(value)
    }

    /// Lets go of the least recently used tenth (at least one), so that a proxy going
    /// round a large grid sorts its entries once per tenth of the cap, not at every call.
    fn let_go_of_least_used(&mut self) {
        let count = (self.cap / 10).max(1);
        let mut uses: Vec<u64> = self.entries.values().map(|(_, used)| *used).collect();
        let nth = count.min(uses.len()) - 1;
        let (_, &mut last, _) = uses.select_nth_unstable(nth);
        self.entries.retain(|_, (_, used)| *used > last);
    }

    /// Lets go of every value.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(cache: &mut ConnectionCache<String>, address: &str, opened: &mut Vec<String>) {
        let made: Result<String, ()> = cache.get_or_open(address, || {
            opened.push(address.to_string());
            Ok(format!("connection to {address}"))
        });
        assert_eq!(made.unwrap(), format!("connection to {address}"));
    }

    #[test]
    fn past_the_cap_the_least_recently_used_are_let_go_and_opened_again_when_called() {
        let mut cache = ConnectionCache::new(20);
        let mut opened = Vec::new();
        for i in 0..20 {
            open(&mut cache, &format!("s{i}"), &mut opened);
        }
        // s0 and s1 are used again: s2 and s3 are now the least recently used.
        open(&mut cache, "s0", &mut opened);
        open(&mut cache, "s1", &mut opened);
        assert_eq!(opened.len(), 20);
        open(&mut cache, "s20", &mut opened);
        assert_eq!(cache.len(), 19);
        open(&mut cache, "s0", &mut opened);
        open(&mut cache, "s4", &mut opened);
        assert_eq!(opened.len(), 21);
        open(&mut cache, "s2", &mut opened);
        open(&mut cache, "s3", &mut opened);
        assert_eq!(&opened[21..], ["s2", "s3"]);
    }

    #[test]
    fn a_server_that_cannot_be_opened_takes_no_place() {
        let mut cache: ConnectionCache<String> = ConnectionCache::new(2);
        let failed: Result<String, &str> = cache.get_or_open("bad", || Err("no address"));
        assert_eq!(failed, Err("no address"));
        assert!(cache.is_empty());
    }
}
