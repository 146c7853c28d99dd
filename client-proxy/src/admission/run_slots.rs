//! The proxy's limit on graphs placed and running at once, over all clients
//! (`max_running_transactions`). An admitted transaction past it waits here, in arrival
//! order, before the metaserver places it: the queue is the proxy's, and visible
//! (`ninf_transactions_waiting_to_run`), rather than calls piling up on the servers' cores
//! where the metaserver's predictions cannot see which graph will meet them.
//!
//! Unset, the limit follows the grid: one graph per processor of the servers up, as each
//! placement's reply says (`ScheduleReply.grid_processors`), and none until the first
//! reply. Dask's scheduler likewise holds root tasks back once its workers are saturated.
//! Under `ninf load` on two cores, one slot per server processor now runs as many
//! transactions a second as no limit did before the metaserver's planning copy got
//! cheaper, with the median prediction errors about 10 points lower
//! (`docs/performance.md`, "A graph's planning copy without strings"). 0 turns the limit
//! off: on a grid whose graphs mostly wait for the network, a slot held during a transfer
//! is a core left idle.

use std::sync::{Arc, Mutex, PoisonError};

use ninf_telemetry::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots following the grid have before the metaserver has said how many processors
/// the grid has: in effect no limit.
const UNKNOWN_GRID: usize = 1 << 20;

/// How many graphs may run at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotLimit {
    /// No limit (`max_running_transactions = 0`).
    None,
    /// A fixed number (`max_running_transactions = N`).
    Fixed(usize),
    /// One per processor of the servers up (`max_running_transactions` unset).
    Grid,
}

impl SlotLimit {
    /// The limit `max_running_transactions` sets: unset follows the grid, 0 is none.
    pub fn from_setting(setting: Option<usize>) -> SlotLimit {
        match setting {
            None => SlotLimit::Grid,
            Some(0) => SlotLimit::None,
            Some(n) => SlotLimit::Fixed(n),
        }
    }
}

/// The slots, shared by every transaction of the proxy.
#[derive(Debug)]
pub struct RunSlots {
    /// `None`: no limit.
    slots: Option<Arc<Semaphore>>,
    follows_grid: bool,
    capacity: Arc<Mutex<Capacity>>,
    /// Transactions waiting for a slot now.
    waiting: Gauge,
    /// The slots there are now (0: no limit).
    limit: Gauge,
}

/// The slots there are, and the slots in use still to be taken away as they are given
/// back, after the limit fell below the slots in use.
#[derive(Debug, Default)]
struct Capacity {
    slots: usize,
    owed: usize,
}

/// A transaction's slot, given back when dropped.
#[derive(Debug)]
pub struct RunSlot {
    permit: Option<OwnedSemaphorePermit>,
    capacity: Option<Arc<Mutex<Capacity>>>,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let (Some(permit), Some(capacity)) = (self.permit.take(), &self.capacity) else {
            return;
        };
        let mut capacity = capacity.lock().unwrap_or_else(PoisonError::into_inner);
        if capacity.owed > 0 {
            capacity.owed -= 1;
            permit.forget();
        } else {
            drop(permit);
        }
    }
}

/// A place among the waiting, counted while it lasts (a waiter that gives up included).
struct Waiting<'a>(&'a Gauge);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl RunSlots {
    /// Slots as `limit` says, the waiting counted on `waiting` and the slots on `slots`.
    pub fn new(limit: SlotLimit, waiting: Gauge, slots: Gauge) -> RunSlots {
        let count = match limit {
            SlotLimit::None => 0,
            SlotLimit::Fixed(n) => n.min(Semaphore::MAX_PERMITS),
            SlotLimit::Grid => UNKNOWN_GRID,
        };
        slots.set(i64::try_from(count).unwrap_or(i64::MAX));
        RunSlots {
            slots: (count > 0).then(|| Arc::new(Semaphore::new(count))),
            follows_grid: limit == SlotLimit::Grid,
            capacity: Arc::new(Mutex::new(Capacity {
                slots: count,
                owed: 0,
            })),
            waiting,
            limit: slots,
        }
    }

    /// A slot, once one is free; waiters are served first come, first served (tokio's
    /// semaphore is fair). Dropping the future gives up the place in line.
    pub async fn take(&self) -> RunSlot {
        let Some(slots) = &self.slots else {
            return RunSlot {
                permit: None,
                capacity: None,
            };
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                self.waiting.inc();
                let _waiting = Waiting(&self.waiting);
                // The semaphore is never closed, so this fails only if it were; then no limit.
                slots.clone().acquire_owned().await.ok()
            }
        };
        RunSlot {
            permit,
            capacity: Some(self.capacity.clone()),
        }
    }

    /// The metaserver placed a graph on a grid of `processors` processors up: a proxy
    /// whose limit follows the grid now has that many slots. 0 (a metaserver that does not
    /// say) changes nothing. Slots in use past a lower limit are taken away as they are
    /// given back.
    pub fn follow_grid(&self, processors: u32) {
        let Some(slots) = self.slots.as_ref().filter(|_| self.follows_grid) else {
            return;
        };
        if processors == 0 {
            return;
        }
        let target = usize::try_from(processors)
            .unwrap_or(usize::MAX)
            .min(UNKNOWN_GRID);
        let mut capacity = self.capacity.lock().unwrap_or_else(PoisonError::into_inner);
        if target > capacity.slots {
            let more = target - capacity.slots;
            let repaid = more.min(capacity.owed);
            capacity.owed -= repaid;
            slots.add_permits(more - repaid);
        } else {
            let fewer = capacity.slots - target;
            let taken = slots.forget_permits(fewer);
            capacity.owed += fewer - taken;
        }
        capacity.slots = target;
        self.limit.set(i64::try_from(target).unwrap_or(i64::MAX));
    }

    /// Transactions waiting for a slot.
    pub fn waiting(&self) -> i64 {
        self.waiting.get()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    async fn until_waiting(slots: &RunSlots, count: i64) {
        while slots.waiting() < count {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn past_the_limit_transactions_wait_and_are_served_in_arrival_order() {
        let slots = Arc::new(RunSlots::new(
            SlotLimit::Fixed(2),
            Gauge::default(),
            Gauge::default(),
        ));
        let first = slots.take().await;
        let second = slots.take().await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..3 {
            let (line, order) = (slots.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let slot = line.take().await;
                order.lock().unwrap().push(i);
                slot
            }));
            until_waiting(&slots, i + 1).await;
        }
        assert!(
            order.lock().unwrap().is_empty(),
            "nobody ran past the limit"
        );
        drop(first);
        let third = waiters.remove(0).await.unwrap();
        assert_eq!(*order.lock().unwrap(), vec![0]);
        assert_eq!(slots.waiting(), 2);
        drop(second);
        drop(third);
        for waiter in waiters {
            drop(waiter.await.unwrap());
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(slots.waiting(), 0);
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_line_and_the_slots_intact() {
        let slots = Arc::new(RunSlots::new(
            SlotLimit::Fixed(1),
            Gauge::default(),
            Gauge::default(),
        ));
        let running = slots.take().await;
        let giving_up = {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take().await })
        };
        until_waiting(&slots, 1).await;
        giving_up.abort();
        assert!(giving_up.await.unwrap_err().is_cancelled());
        assert_eq!(slots.waiting(), 0);
        drop(running);
        // The slot the waiter would have had is free.
        let _next = slots.take().await;
        assert_eq!(slots.waiting(), 0);
    }

    #[tokio::test]
    async fn with_no_limit_nobody_waits() {
        let slots = RunSlots::new(SlotLimit::None, Gauge::default(), Gauge::default());
        let held: Vec<RunSlot> =
            futures_util::future::join_all((0..1000).map(|_| slots.take())).await;
        assert_eq!(held.len(), 1000);
        assert_eq!(slots.waiting(), 0);
    }

    /// Whether a slot is free now, without waiting (a slot taken is given back at once).
    fn free_now(slots: &RunSlots) -> bool {
        futures_util::FutureExt::now_or_never(slots.take()).is_some()
    }

    #[tokio::test]
    async fn following_the_grid_the_slots_are_its_processors_once_the_metaserver_says() {
        let limit = Gauge::default();
        let slots = RunSlots::new(SlotLimit::Grid, Gauge::default(), limit.clone());
        // Before any placement's reply, nobody waits.
        let held: Vec<RunSlot> =
            futures_util::future::join_all((0..100).map(|_| slots.take())).await;
        assert_eq!(slots.waiting(), 0);
        drop(held);
        slots.follow_grid(3);
        assert_eq!(limit.get(), 3);
        let held: Vec<RunSlot> = futures_util::future::join_all((0..3).map(|_| slots.take())).await;
        assert!(!free_now(&slots), "three processors, three graphs");
        // A metaserver that does not say changes nothing.
        slots.follow_grid(0);
        assert!(!free_now(&slots));
        assert_eq!(limit.get(), 3);
        // A server joins: one more slot, at once.
        slots.follow_grid(4);
        let fourth = slots.take().await;
        assert!(!free_now(&slots));
        drop(fourth);
        drop(held);
        assert_eq!(
            futures_util::future::join_all((0..4).map(|_| slots.take()))
                .await
                .len(),
            4
        );
    }

    #[tokio::test]
    async fn a_grid_that_shrinks_takes_its_slots_back_as_the_graphs_in_them_end() {
        let slots = RunSlots::new(SlotLimit::Grid, Gauge::default(), Gauge::default());
        slots.follow_grid(3);
        let mut held: Vec<RunSlot> =
            futures_util::future::join_all((0..3).map(|_| slots.take())).await;
        // Two servers go down while three graphs run: the first two to end give their
        // slots up for good.
        slots.follow_grid(1);
        held.pop();
        assert!(!free_now(&slots));
        held.pop();
        assert!(!free_now(&slots));
        held.pop();
        let only = slots.take().await;
        assert!(!free_now(&slots), "one processor, one graph");
        // They come back before the slot is given back: the debt is gone, not paid twice.
        slots.follow_grid(2);
        let second = slots.take().await;
        assert!(!free_now(&slots));
        drop((only, second));
        assert_eq!(
            futures_util::future::join_all((0..2).map(|_| slots.take()))
                .await
                .len(),
            2
        );
    }

    #[tokio::test]
    async fn a_limit_set_by_hand_does_not_follow_the_grid() {
        let slots = RunSlots::new(SlotLimit::Fixed(1), Gauge::default(), Gauge::default());
        slots.follow_grid(8);
        let _running = slots.take().await;
        assert!(!free_now(&slots));
        let none = RunSlots::new(SlotLimit::None, Gauge::default(), Gauge::default());
        none.follow_grid(1);
        let _first = none.take().await;
        assert!(free_now(&none));
    }

    #[test]
    fn max_running_transactions_unset_follows_the_grid_and_zero_is_no_limit() {
        assert_eq!(SlotLimit::from_setting(None), SlotLimit::Grid);
        assert_eq!(SlotLimit::from_setting(Some(0)), SlotLimit::None);
        assert_eq!(SlotLimit::from_setting(Some(3)), SlotLimit::Fixed(3));
    }
}
