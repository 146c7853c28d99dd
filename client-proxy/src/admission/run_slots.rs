//! The proxy's limit on graphs placed and running at once, over all clients
//! (`max_running_transactions`). An admitted transaction past it waits here, in arrival
//! order, before the metaserver places it: the queue is the proxy's, and visible
//! (`ninf_transactions_waiting_to_run`), rather than calls piling up on the servers' cores
//! where the metaserver's predictions cannot see which graph will meet them.
//!
//! Off (0) by default, since it trades throughput for predictions that hold: under `ninf
//! load` on two cores, 3 slots for the three one-processor servers cut the median
//! prediction errors by about 11 points, at about 12% fewer transactions per second
//! (`docs/performance.md`, "Graphs waiting at the proxy"); and on a grid whose graphs
//! mostly wait for the network, a slot held during a transfer is a core left idle.

use std::sync::Arc;

use ninf_telemetry::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The slots, shared by every transaction of the proxy.
#[derive(Debug)]
pub struct RunSlots {
    /// `None`: no limit.
    slots: Option<Arc<Semaphore>>,
    /// Transactions waiting for a slot now.
    waiting: Gauge,
}

/// A transaction's slot, given back when dropped.
#[derive(Debug)]
pub struct RunSlot {
    _permit: Option<OwnedSemaphorePermit>,
}

/// A place among the waiting, counted while it lasts (a waiter that gives up included).
struct Waiting<'a>(&'a Gauge);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl RunSlots {
    /// `limit` slots (0: no limit), the waiting counted on `waiting`.
    pub fn new(limit: usize, waiting: Gauge) -> RunSlots {
        let slots =
            (limit > 0).then(|| Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS))));
        RunSlots { slots, waiting }
    }

    /// A slot, once one is free; waiters are served first come, first served (tokio's
    /// semaphore is fair). Dropping the future gives up the place in line.
    pub async fn take(&self) -> RunSlot {
        let Some(slots) = &self.slots else {
            return RunSlot { _permit: None };
        };
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return RunSlot {
                _permit: Some(permit),
            };
        }
        self.waiting.inc();
        let _waiting = Waiting(&self.waiting);
        // The semaphore is never closed, so acquiring fails only if it were; then no limit.
        let permit = slots.clone().acquire_owned().await.ok();
        RunSlot { _permit: permit }
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
        let slots = Arc::new(RunSlots::new(2, Gauge::default()));
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
        let slots = Arc::new(RunSlots::new(1, Gauge::default()));
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
        let slots = RunSlots::new(0, Gauge::default());
        let held: Vec<RunSlot> =
            futures_util::future::join_all((0..1000).map(|_| slots.take())).await;
        assert_eq!(held.len(), 1000);
        assert_eq!(slots.waiting(), 0);
    }
}
