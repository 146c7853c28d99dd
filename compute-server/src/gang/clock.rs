//! Clocks of the live gang scheduler. The server and its agents read the machine's monotonic
//! clock (`CLOCK_MONOTONIC`, shared by every process on one machine, so the times agents
//! report can be compared). An agent may run on an emulated clock of its own, offset and
//! running at a different rate, to behave as an agent on another host would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ninf_gang::{Clock, ClockSync};

/// Nanoseconds on the machine's monotonic clock.
pub fn monotonic_ns() -> i64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists
    // on Linux.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now);
    }
    now.tv_sec * 1_000_000_000 + now.tv_nsec
}

/// The machine's monotonic clock in seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineClock;

impl Clock for MachineClock {
    fn now(&self) -> f64 {
        monotonic_ns() as f64 * 1e-9
    }
}

/// An agent's own clock: the machine's, shifted by `offset` seconds and running `rate_ppm`
/// parts per million fast (both zero for an agent on the server's machine).
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentClock {
    pub offset: f64,
    pub rate_ppm: f64,
}

impl AgentClock {
    /// The agent's time at machine time `machine` (seconds).
    pub fn at(&self, machine: f64) -> f64 {
        machine * (1.0 + self.rate_ppm * 1e-6) + self.offset
    }

    /// The machine time at which the agent's clock shows `local`.
    pub fn machine_at(&self, local: f64) -> f64 {
        (local - self.offset) / (1.0 + self.rate_ppm * 1e-6)
    }
}

impl Clock for AgentClock {
    fn now(&self) -> f64 {
        self.at(MachineClock.now())
    }
}

/// A node's reading of the server's clock: its own clock corrected by the offset (and rate)
/// its clock checks estimate. What the switching thread and the node's broker follow the
/// table by.
#[derive(Clone)]
pub struct NodeTime {
    pub clock: AgentClock,
    pub sync: Arc<Mutex<ClockSync>>,
}

impl NodeTime {
    /// The server's time now, as this node reckons it.
    pub fn master_now(&self) -> f64 {
        let local = self.clock.now();
        ninf_proto::sync::lock(&self.sync).to_master(local)
    }

    /// How long from now until the server's clock shows `master`, as this node reckons it.
    pub fn until(&self, master: f64) -> Duration {
        let local = ninf_proto::sync::lock(&self.sync).to_local(master);
        let machine = self.clock.machine_at(local);
        Duration::from_secs_f64((machine - MachineClock.now()).clamp(0.0, 3600.0))
    }
}
