//! How a node agent keeps its clock's offset from the master's (the time-sync paper). Each check is a
//! Cristian exchange: the agent notes its clock when it asks and when the answer comes, and
//! takes the master's time to be at the middle of that round trip. The interval between checks
//! adapts: it doubles while checks find no drift, and after a drift it becomes a tenth of the
//! period that had been drift-free, so a stable clock is checked rarely and a drifting one
//! often.

use serde::{Deserialize, Serialize};

/// Tuning of the adaptive check interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SyncConfig {
    /// First and shortest interval between checks, seconds.
    pub min_interval: f64,
    /// Longest interval, seconds.
    pub max_interval: f64,
    /// An offset change larger than this (beyond the measurement's own uncertainty, half the
    /// round trip) counts as drift, seconds.
    pub drift_threshold: f64,
    /// Also estimate how fast the offset moves (the clocks' rate difference) and predict it
    /// between checks, so that a clock running steadily fast stops counting as drifting. Off,
    /// the agent behaves exactly as the time-sync paper describes.
    pub compensate_rate: bool,
}

impl Default for SyncConfig {
    fn default() -> SyncConfig {
        SyncConfig {
            min_interval: 0.5,
            max_interval: 3600.0,
            drift_threshold: 200e-6,
            compensate_rate: true,
        }
    }
}

/// One check's measurement: the agent's clock when it asked and when the answer arrived,
/// and the master's clock in the answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSample {
    pub sent: f64,
    pub master: f64,
    pub received: f64,
}

impl ClockSample {
    pub fn round_trip(&self) -> f64 {
        (self.received - self.sent).max(0.0)
    }

    /// master − local, assuming the master answered at the middle of the round trip.
    pub fn offset(&self) -> f64 {
        self.master - (self.sent + self.received) / 2.0
    }
}

/// What a check concluded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SyncOutcome {
    pub offset: f64,
    /// How far the offset moved since the previous check (0 for the first).
    pub change: f64,
    pub drift: bool,
    /// Seconds until the next check.
    pub interval: f64,
}

/// The offset estimate and the adaptive schedule of checks.
#[derive(Debug, Clone)]
pub struct ClockSync {
    config: SyncConfig,
    /// master − local at the last check, once measured.
    offset: Option<f64>,
    /// How fast the offset moves, seconds per second (with `compensate_rate`).
    rate: f64,
    /// The check the rate is measured from: (local time, offset).
    anchor: (f64, f64),
    interval: f64,
    /// Local time of the last check.
    last_check: f64,
    /// Local time since which no drift was found.
    drift_free_since: f64,
    checks: u64,
    drifts: u64,
}

impl ClockSync {
    pub fn new(config: SyncConfig) -> ClockSync {
        ClockSync {
            interval: config.min_interval,
            config,
            offset: None,
            rate: 0.0,
            anchor: (0.0, 0.0),
            last_check: f64::NEG_INFINITY,
            drift_free_since: 0.0,
            checks: 0,
            drifts: 0,
        }
    }

    /// master − local at the last check; `None` before the first check.
    pub fn offset(&self) -> Option<f64> {
        self.offset
    }

    /// The estimated rate difference of the two clocks (seconds per second).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// master − local predicted at local time `local`.
    fn offset_at(&self, local: f64) -> f64 {
        match self.offset {
            Some(offset) => offset + self.rate * (local - self.last_check),
            None => 0.0,
        }
    }

    /// The master's time at local time `local` (the local time itself before any check).
    pub fn to_master(&self, local: f64) -> f64 {
        local + self.offset_at(local)
    }

    /// The local time at master time `master`.
    pub fn to_local(&self, master: f64) -> f64 {
        // Solves local + offset + rate (local − last) = master.
        match self.offset {
            Some(offset) => (master - offset + self.rate * self.last_check) / (1.0 + self.rate),
            None => master,
        }
    }

    /// Local time of the next check.
    pub fn next_check(&self) -> f64 {
        self.last_check + self.interval
    }

    pub fn due(&self, local_now: f64) -> bool {
        self.offset.is_none() || local_now >= self.next_check()
    }

    pub fn interval(&self) -> f64 {
        self.interval
    }

    pub fn checks(&self) -> u64 {
        self.checks
    }

    pub fn drifts(&self) -> u64 {
        self.drifts
    }

    /// Takes a check made of one or more exchanges; the one with the shortest round trip is
    /// the most precise. Returns `None` if `samples` is empty.
    pub fn record(&mut self, samples: &[ClockSample]) -> Option<SyncOutcome> {
        let best = samples
            .iter()
            .min_by(|a, b| a.round_trip().total_cmp(&b.round_trip()))?;
        let now = best.received;
        let measured = best.offset();
        self.checks += 1;
        let (change, drift) = match self.offset {
            None => {
                self.drift_free_since = now;
                self.anchor = (now, measured);
                (0.0, false)
            }
            Some(_) => {
                let change = measured - self.offset_at(now);
                let drift = change.abs() > self.config.drift_threshold + best.round_trip() / 2.0;
                (change, drift)
            }
        };
        if self.config.compensate_rate && self.offset.is_some() {
            if drift {
                // The rate changed (or was never known): measure it afresh from the last check.
                self.anchor = (self.last_check, self.offset.unwrap_or(measured));
            }
            let baseline = now - self.anchor.0;
            // Shorter baselines would turn the round trip's noise into a large rate error.
            if baseline >= 1.0 {
                self.rate = (measured - self.anchor.1) / baseline;
            }
        }
        if drift {
            self.drifts += 1;
            let drift_free = now - self.drift_free_since;
            self.interval =
                (drift_free / 10.0).clamp(self.config.min_interval, self.config.max_interval);
            self.drift_free_since = now;
        } else if self.offset.is_some() {
            self.interval = (self.interval * 2.0).min(self.config.max_interval);
        }
        self.offset = Some(measured);
        self.last_check = now;
        Some(SyncOutcome {
            offset: measured,
            change,
            drift,
            interval: self.interval,
        })
    }
}
