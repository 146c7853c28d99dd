//! Time for the gang core: the live server reads a monotonic clock, tests and the simulator
//! move a fake one by hand. Seconds as `f64` from an arbitrary origin.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub trait Clock {
    fn now(&self) -> f64;
}

/// A monotonic clock starting at 0 when created.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock(std::time::Instant);

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        MonotonicClock(std::time::Instant::now())
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> f64 {
        self.0.elapsed().as_secs_f64()
    }
}

/// A clock that moves only when told to. It may be shared between threads (behind an
/// `Arc`), so a test can drive the live server's gang master by it.
#[derive(Debug, Default)]
pub struct FakeClock(AtomicU64);

impl FakeClock {
    pub fn new(start: f64) -> FakeClock {
        FakeClock(AtomicU64::new(start.to_bits()))
    }

    pub fn set(&self, now: f64) {
        self.0.store(now.to_bits(), Ordering::SeqCst);
    }

    pub fn advance(&self, seconds: f64) {
        self.set(self.now() + seconds);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::SeqCst))
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> f64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> f64 {
        (**self).now()
    }
}
