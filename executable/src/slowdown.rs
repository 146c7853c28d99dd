//! An emulated slower processor, for testbeds that model machines slower than the host
//! (issue 5: the metaserver paper's servers computed for minutes where this host takes milliseconds).
//!
//! With a slowdown of k, a routine first runs for real; the executable then holds its
//! processor for (k - 1) times the CPU time the routine used, so the call takes k times as
//! long as on the host. The hold sleeps instead of spinning: a testbed runs more emulated
//! processors than the host has cores, and spinning would make them slow each other down.
//! The gang scheduler stops and continues executables with signals; time spent stopped must
//! not count as held, or a time-shared call would finish early. The hold therefore sleeps in
//! short ticks and credits each tick with at most [`MAX_CREDIT`] of the wall time it took: a
//! stopped tick lasts a whole quantum (tens of milliseconds or more) and is credited little.

use std::time::Duration;

/// Environment variable that sets an executable's slowdown (a number, at least 1).
pub const SLOWDOWN_ENV: &str = "NINF_EXEC_CPU_SLOWDOWN";

/// Length of one sleep of the hold.
pub const TICK: Duration = Duration::from_millis(2);

/// Most wall time one tick may be credited: a tick delayed by ordinary scheduling latency
/// still counts in full, a tick spent stopped does not.
pub const MAX_CREDIT: Duration = Duration::from_millis(6);

/// The slowdown asked for by `value` (the environment variable's text): 1 (none) when unset;
/// an error naming the value when it is not a finite number of at least 1.
pub fn parse(value: Option<&str>) -> Result<f64, String> {
    let Some(text) = value else {
        return Ok(1.0);
    };
    match text.trim().parse::<f64>() {
        Ok(k) if k.is_finite() && k >= 1.0 => Ok(k),
        _ => Err(format!(
            "{SLOWDOWN_ENV} is `{text}`; it must be a number of at least 1"
        )),
    }
}

/// How long to hold after a routine that used `cpu` of processor time, under slowdown `k`.
pub fn hold_for(cpu: Duration, k: f64) -> Duration {
    if k <= 1.0 || !k.is_finite() {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(cpu.as_secs_f64() * (k - 1.0)).unwrap_or(Duration::MAX)
}

/// Holds for `total` of running time. `sleep` sleeps for the given tick and returns the wall
/// time that actually passed (a test passes a fake clock). Returns the wall time the hold took.
pub fn hold(total: Duration, mut sleep: impl FnMut(Duration) -> Duration) -> Duration {
    let mut credited = Duration::ZERO;
    let mut wall = Duration::ZERO;
    while credited < total {
        let tick = TICK.min(total - credited);
        let passed = sleep(tick);
        wall += passed;
        credited += passed.clamp(tick, MAX_CREDIT.max(tick));
    }
    wall
}

/// Processor time used by this process so far (all its threads).
pub fn process_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_PROCESS_CPUTIME_ID exists
    // on every Linux since 2.6.12.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        now.tv_sec.max(0) as u64,
        now.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// The real sleeper for [`hold`].
pub fn sleep_measured(tick: Duration) -> Duration {
    let start = std::time::Instant::now();
    std::thread::sleep(tick);
    start.elapsed()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn slowdown_values_are_checked() {
        assert_eq!(parse(None), Ok(1.0));
        assert_eq!(parse(Some("250")), Ok(250.0));
        assert_eq!(parse(Some(" 1.5 ")), Ok(1.5));
        for bad in ["0.5", "-3", "NaN", "inf", "fast", ""] {
            let error = parse(Some(bad)).unwrap_err();
            assert!(
                error.contains(SLOWDOWN_ENV) && error.contains(bad),
                "{error}"
            );
        }
    }

    #[test]
    fn the_hold_is_k_minus_one_times_the_processor_time() {
        assert_eq!(
            hold_for(Duration::from_millis(10), 250.0),
            Duration::from_millis(2490)
        );
        assert_eq!(hold_for(Duration::from_millis(10), 1.0), Duration::ZERO);
        assert_eq!(hold_for(Duration::from_secs(1), f64::NAN), Duration::ZERO);
    }

    #[test]
    fn a_hold_on_an_undisturbed_clock_sleeps_exactly_its_length() {
        let mut ticks = 0;
        let wall = hold(Duration::from_millis(101), |tick| {
            ticks += 1;
            tick
        });
        assert_eq!(wall, Duration::from_millis(101));
        assert_eq!(ticks, 51, "50 whole ticks and one of 1 ms");
    }

    #[test]
    fn time_spent_stopped_is_not_credited() {
        // The third tick is stopped by the gang scheduler for 300 ms; the hold must still
        // sleep its full 20 ms of running time, so the wall time grows by the stop.
        let mut tick_number = 0;
        let wall = hold(Duration::from_millis(20), |tick| {
            tick_number += 1;
            if tick_number == 3 {
                Duration::from_millis(300)
            } else {
                tick
            }
        });
        // Ten ticks of 2 ms would do; the stopped one is credited 6 ms, so 8 ticks run:
        // 7 of 2 ms and the stopped one of 300 ms.
        assert_eq!(wall, Duration::from_millis(314));
    }

    #[test]
    fn a_tick_late_by_scheduling_latency_counts_in_full() {
        let wall = hold(Duration::from_millis(10), |tick| {
            tick + Duration::from_millis(1)
        });
        // Each tick takes 1 ms longer and is credited in full: three 2 ms ticks take 9 ms,
        // then the last 1 ms tick takes 2 ms (11 ms credited, 11 ms of wall time).
        assert_eq!(wall, Duration::from_millis(11));
    }

    #[test]
    fn process_cpu_time_advances_with_work() {
        let before = process_cpu_time();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_time() > before);
    }
}
