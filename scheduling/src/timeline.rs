//! The intervals booked on one resource (a server's placements, a path's transfers), so
//! that the weight or count under way at an instant, and the earliest end among them, cost a
//! binary search rather than a pass.
//!
//! The bookings are kept twice, ordered by start and by finish, each with running sums: what
//! is under way at `t` is what started by `t` less what finished by `t`. A pass over all of
//! them made every prediction cost as much as the placements already made: scheduling 10,000
//! calls on two servers passed over 5,000 placements per prediction. A window of the longest
//! booking's length before `t` helped only while bookings were short: on a live grid every
//! call of a transaction of tiny tasks is issued at once and overlaps all those before it.
//!
//! Bookings mostly come in order of start and of finish, and schedulers withdraw their
//! tentative ones newest first, so keeping the sums is mostly an append or a pop; one that
//! lands earlier costs an addition to each sum after it, beside the insertion's move.

/// Identifies a recorded placement, so a scheduler can withdraw a tentative one.
pub type PlacementId = usize;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Booking {
    start: f64,
    finish: f64,
    weight: u32,
    id: PlacementId,
}

impl Booking {
    /// Whether it is ever under way: a booking that ends before it starts, or whose end is
    /// not a number, never is.
    fn counts(&self) -> bool {
        self.start < self.finish
    }
}

/// Bookings ordered by one of their times, with the running weight and count up to each.
#[derive(Debug, Clone, Default)]
struct Ordered {
    bookings: Vec<Booking>,
    /// `(weight, count)` of the bookings up to and including each, of those that count.
    sums: Vec<(u64, u64)>,
}

impl Ordered {
    /// Inserts `booking` after those whose `key` is at most its own.
    fn insert(&mut self, booking: Booking, key: impl Fn(&Booking) -> f64) {
        let at = self.bookings.partition_point(|b| key(b) <= key(&booking));
        let before = at
            .checked_sub(1)
            .and_then(|i| self.sums.get(i))
            .copied()
            .unwrap_or((0, 0));
        let (weight, count) = Self::share(&booking);
        self.bookings.insert(at, booking);
        self.sums.insert(at, (before.0 + weight, before.1 + count));
        for sum in &mut self.sums[at + 1..] {
            *sum = (sum.0 + weight, sum.1 + count);
        }
    }

    /// Removes the booking at `index`.
    fn remove(&mut self, index: usize) {
        let (weight, count) = Self::share(&self.bookings[index]);
        self.bookings.remove(index);
        self.sums.remove(index);
        for sum in &mut self.sums[index..] {
            *sum = (sum.0 - weight, sum.1 - count);
        }
    }

    /// What `booking` adds to the sums of those after it.
    fn share(booking: &Booking) -> (u64, u64) {
        if booking.counts() {
            (u64::from(booking.weight), 1)
        } else {
            (0, 0)
        }
    }

    /// `(weight, count)` of the bookings that count whose `key` is at most `at`.
    fn up_to(&self, at: f64, key: impl Fn(&Booking) -> f64) -> (u64, u64) {
        let end = self.bookings.partition_point(|b| key(b) <= at);
        end.checked_sub(1)
            .and_then(|i| self.sums.get(i))
            .copied()
            .unwrap_or((0, 0))
    }
}

/// Intervals `[start, finish)` with a weight each (processors, or 1 for a transfer).
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    by_start: Ordered,
    /// Only the bookings that count.
    by_finish: Ordered,
}

impl Timeline {
    /// Books `[start, finish)`. An interval whose start is not a number is never under way,
    /// and is not kept.
    pub fn insert(&mut self, id: PlacementId, start: f64, finish: f64, weight: u32) {
        if start.is_nan() {
            return;
        }
        let booking = Booking {
            start,
            finish,
            weight,
            id,
        };
        self.by_start.insert(booking, |b| b.start);
        if booking.counts() {
            self.by_finish.insert(booking, |b| b.finish);
        }
    }

    /// Takes out the booking `id` made with `start`; nothing if there is none.
    pub fn remove(&mut self, id: PlacementId, start: f64) {
        let bookings = &self.by_start.bookings;
        let first = bookings.partition_point(|b| b.start < start);
        let last = bookings.partition_point(|b| b.start <= start);
        // From the end of the run of equal starts: a scheduler trying a server withdraws
        // the booking it made last, which goes after its equals. Scanned from the front,
        // 10,000 calls all starting at 0 cost 10,000 steps each to try.
        let Some(offset) = bookings[first..last].iter().rposition(|b| b.id == id) else {
            return;
        };
        let booking = bookings[first + offset];
        self.by_start.remove(first + offset);
        if booking.counts() {
            let finishes = &self.by_finish.bookings;
            let from = finishes.partition_point(|b| b.finish < booking.finish);
            let to = finishes.partition_point(|b| b.finish <= booking.finish);
            if let Some(at) = finishes[from..to].iter().rposition(|b| *b == booking) {
                self.by_finish.remove(from + at);
            }
        }
    }

    /// The total weight of the bookings under way at `at` (`start <= at < finish`).
    pub fn weight_at(&self, at: f64) -> u32 {
        let weight = self.under_way(at).0;
        u32::try_from(weight).unwrap_or(u32::MAX)
    }

    /// How many bookings are under way at `at`.
    pub fn count_at(&self, at: f64) -> usize {
        usize::try_from(self.under_way(at).1).unwrap_or(usize::MAX)
    }

    /// The earliest end of the bookings under way at `at`, if any is: the first of those
    /// ending after `at` that had started by then, mostly the very first.
    pub fn first_end_after(&self, at: f64) -> Option<f64> {
        let finishes = &self.by_finish.bookings;
        let from = finishes.partition_point(|b| b.finish <= at);
        finishes[from..]
            .iter()
            .find(|b| b.start <= at)
            .map(|b| b.finish)
    }

    /// `(weight, count)` under way at `at`: what started by then less what finished by then
    /// (a booking that counts finishes after it starts, so all of the second are in the
    /// first).
    fn under_way(&self, at: f64) -> (u64, u64) {
        let started = self.by_start.up_to(at, |b| b.start);
        let finished = self.by_finish.up_to(at, |b| b.finish);
        (
            started.0.saturating_sub(finished.0),
            started.1.saturating_sub(finished.1),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::SplitMix;

    #[test]
    fn counts_and_first_ends_agree_with_a_pass_over_every_booking() {
        let mut random = SplitMix::new(3);
        let mut timeline = Timeline::default();
        let mut all: Vec<(PlacementId, f64, f64, u32)> = Vec::new();
        let time = |random: &mut SplitMix| (random.next_u64() % 1_000) as f64 / 10.0;
        for id in 0..2_000 {
            if id % 5 == 4 && !all.is_empty() {
                let victim = all.remove((random.next_u64() % all.len() as u64) as usize);
                timeline.remove(victim.0, victim.1);
            } else {
                let start = time(&mut random);
                let finish = start + time(&mut random) / 4.0;
                let weight = 1 + (random.next_u64() % 3) as u32;
                timeline.insert(id, start, finish, weight);
                all.push((id, start, finish, weight));
            }
            let at = time(&mut random);
            let under_way = all.iter().filter(|b| b.1 <= at && at < b.2);
            assert_eq!(
                timeline.weight_at(at),
                under_way.clone().map(|b| b.3).sum::<u32>()
            );
            assert_eq!(timeline.count_at(at), under_way.clone().count());
            let first_end = under_way.map(|b| b.2).reduce(f64::min);
            assert_eq!(timeline.first_end_after(at), first_end);
        }
    }

    #[test]
    fn an_endless_booking_counts_from_its_start_and_an_unknown_start_never() {
        let mut timeline = Timeline::default();
        timeline.insert(0, 1.0, f64::INFINITY, 2);
        timeline.insert(1, f64::NAN, 5.0, 7);
        timeline.insert(2, 2.0, 3.0, 1);
        timeline.insert(3, f64::NEG_INFINITY, 0.75, 4);
        assert_eq!(timeline.weight_at(0.5), 4);
        timeline.remove(3, f64::NEG_INFINITY);
        assert_eq!(timeline.weight_at(0.5), 0);
        assert_eq!(timeline.weight_at(2.5), 3);
        assert_eq!(timeline.weight_at(1e9), 2);
        timeline.remove(0, 1.0);
        timeline.remove(1, f64::NAN);
        assert_eq!(timeline.weight_at(1e9), 0);
        assert_eq!(timeline.count_at(2.5), 1);
    }
}
