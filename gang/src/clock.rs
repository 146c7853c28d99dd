//! Time for the gang core: the live server reads a monotonic clock, tests and the simulator
//! move a fake one by hand. Seconds as `f64` from an arbitrary origin.

use std::cell::Cell;

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

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct FakeClock(Cell<f64>);

impl FakeClock {
    pub fn new(start: f64) -> FakeClock {
        FakeClock(Cell::new(start))
    }

    pub fn set(&self, now: f64) {
        self.0.set(now);
    }

    pub fn advance(&self, seconds: f64) {
        self.0.set(self.0.get() + seconds);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> f64 {
        self.0.get()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> f64 {
        (**self).now()
    }
}
