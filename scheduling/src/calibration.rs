//! Learning from what ran. The predictor's model of a call (flops over the server's measured
//! speed, shared by its load, after the inputs arrive) misses two things a real grid has: a
//! routine runs at its own fraction of the speed the server's benchmark measured (LINPACK's
//! `dgefa` at n = 400 ran 5-7 times slower here than the benchmark promised), and every call
//! pays a fixed cost the flops do not count (the RPC, argument encoding, admission into the
//! gang table). Both are learned per server from the times the proxies report: a factor on
//! the modelled compute time per (server, routine), and a per-call overhead per server.
//! GridSolve and DIET's FAST learn per-routine performance the same way.
//!
//! The overhead has two parts, fitted to how it grew with the load each call was predicted
//! to meet ([`Overhead`]): a part that waits for the server's processors as the compute does
//! (decoding, the executable's hand-over, admission), and a part that does not (the RPC and
//! the proxy's own latency). Under `ninf load` four calls issued together to a
//! one-processor server each took 1.4 ms against 1.0 ms alone: had all of it stretched with
//! the processors' share, the prediction would have been 4 ms.
//!
//! Each figure is the median of its last [`WINDOW`] observations: on a shared machine one
//! call in a few runs two or three times slower than its neighbours (and the very first call
//! of a server, cold, slower still), and a mean would carry those into every prediction.
//!
//! A server nobody has learned yet, or whose figures have not been refreshed for
//! [`STALE_AFTER`] observations of the whole grid, is assumed to cost what the servers with
//! fresh figures cost (their median). Without that, a fresh server is predicted to cost
//! nothing, so a burst of graphs all lands on it; and a server that had one bad burst keeps
//! its bad figures for ever, since no call goes there to correct them.
//!
//! Pure and deterministic: observations in, figures out; no clock (age is counted in
//! observations).

use std::collections::{HashMap, VecDeque};

/// Observations each figure keeps: enough for a median to ignore the odd slow call, few
/// enough to follow a server whose speed changes within a few dozen calls.
pub const WINDOW: usize = 15;
/// Observations the overhead's fit keeps: a line needs more points than a median does.
pub const OVERHEAD_WINDOW: usize = 2 * WINDOW;
/// Points whose x spread less than this share of the largest show a fit no slope.
const SPREAD: f64 = 0.05;
/// A factor stays within these bounds, whatever a report says. The upper one is high: a
/// routine of few flops (LINPACK's `dgesl`) spends its call moving data, hundreds of times
/// what its flops take.
const FACTOR_RANGE: (f64, f64) = (1e-3, 1e4);
/// A per-call overhead stays below this (seconds).
const MAX_OVERHEAD: f64 = 10.0;
/// A server's figures are set aside once the grid has made this many observations since
/// its last one: twenty windows.
pub const STALE_AFTER: u64 = 20 * WINDOW as u64;

/// What one finished call teaches: the prediction it was placed with and what happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// The server's address.
    pub server: String,
    pub function: String,
    /// The model's compute time on the server alone, before calibration (seconds).
    pub modelled_compute: f64,
    /// How many times longer than alone the prediction had the call take for the load it
    /// saw on the server (at least 1; [`crate::LoadPredictor::stretch`]).
    pub predicted_stretch: f64,
    /// The transfer time the prediction assumed before the call could start (seconds).
    pub predicted_transfer: f64,
    /// From the proxy issuing the call to its reply (seconds).
    pub actual_call: f64,
    /// The server's own account of the call's computing and of its wait for processors.
    pub actual_compute: f64,
    pub actual_queue: f64,
}

/// The last observations of one figure, and their median.
#[derive(Debug, Clone, Default, PartialEq)]
struct Recent {
    values: VecDeque<f64>,
}

impl Recent {
    /// Adds `value` (dropping the oldest beyond [`WINDOW`]) and returns the new median.
    fn push(&mut self, value: f64) -> f64 {
        if self.values.len() == WINDOW {
            self.values.pop_front();
        }
        self.values.push_back(value);
        median(self.values.iter().copied().collect()).unwrap_or(value)
    }
}

/// The robust line `y = intercept + slope * x` through `points`: the median of the pairwise
/// slopes (Theil-Sen), then the median intercept, neither negative. A slope steeper than
/// the origin allows becomes the line through the origin. Points whose x spread less than
/// [`SPREAD`] of the largest show no slope: all of y is the intercept (its median).
fn fit_line(points: &[(f64, f64)]) -> (f64, f64) {
    let high = points.iter().map(|&(x, _)| x).fold(0.0, f64::max);
    let low = points.iter().map(|&(x, _)| x).fold(high, f64::min);
    if high - low <= SPREAD * high {
        let ys = points.iter().map(|&(_, y)| y).collect();
        return (median(ys).unwrap_or(0.0), 0.0);
    }
    let mut slopes = Vec::with_capacity(points.len() * points.len() / 2);
    for (i, &(x1, y1)) in points.iter().enumerate() {
        for &(x2, y2) in &points[i + 1..] {
            if (x2 - x1).abs() > SPREAD * high {
                slopes.push((y2 - y1) / (x2 - x1));
            }
        }
    }
    let slope = median(slopes).unwrap_or(0.0).max(0.0);
    match median(points.iter().map(|&(x, y)| y - slope * x).collect()) {
        Some(intercept) if intercept >= 0.0 => (intercept, slope),
        _ => {
            let ratios = points
                .iter()
                .filter(|&&(x, _)| x > 0.0)
                .map(|&(x, y)| y / x);
            (0.0, median(ratios.collect()).unwrap_or(0.0).max(0.0))
        }
    }
}

/// Seconds a call costs beyond its compute and its transfers, at a stretch `s` (how many
/// times longer than alone the load makes the server's work): `fixed + shared * s`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Overhead {
    /// What no load on the server changes: the RPC's and the proxy's latency.
    pub fixed: f64,
    /// What waits for the server's processors, as its compute does (at stretch 1).
    pub shared: f64,
}

impl Overhead {
    /// The overhead of a call the load stretches `stretch` times.
    pub fn at(&self, stretch: f64) -> f64 {
        self.fixed + self.shared * stretch
    }

    /// The line through `(stretch, overhead)` points ([`fit_line`]). Without a spread of
    /// stretches to read a slope from, all of it is fixed (the median).
    pub fn fit(points: &[(f64, f64)]) -> Overhead {
        let (fixed, shared) = fit_line(points);
        Overhead {
            fixed: fixed.min(MAX_OVERHEAD),
            shared: shared.min(MAX_OVERHEAD),
        }
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    median_of_sorted(&values)
}

fn median_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The learned figures, by server address.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calibration {
    factor_history: HashMap<(String, String), Recent>,
    /// Each server's last (predicted stretch, overhead) pairs.
    overhead_history: HashMap<String, VecDeque<(f64, f64)>>,
    /// The medians, by server and routine, and the fitted overheads: what predictions use.
    factors: HashMap<String, HashMap<String, f64>>,
    overheads: HashMap<String, Overhead>,
    /// Observations made so far, and each server's count at its last one.
    observed: u64,
    last_observed: HashMap<String, u64>,
}

impl Calibration {
    /// Learns from one finished call. Calls without a usable account (no compute time
    /// reported, nothing modelled, non-finite figures) teach nothing.
    pub fn observe(&mut self, o: &Observation) {
        let figures = [
            o.modelled_compute,
            o.predicted_stretch,
            o.predicted_transfer,
            o.actual_call,
            o.actual_compute,
            o.actual_queue,
        ];
        // A server always reports some compute time; none means no account at all.
        if figures.iter().any(|f| !f.is_finite()) || o.actual_call <= 0.0 || o.actual_compute <= 0.0
        {
            return;
        }
        self.observed += 1;
        self.last_observed.insert(o.server.clone(), self.observed);
        // The factor is of a call alone: the prediction stretches the compute by the load
        // it sees, so what it saw is taken out of what happened.
        let stretch = o.predicted_stretch.max(1.0);
        // The model shares a server's processors among the calls placed on it; the server
        // may instead queue a call until a processor is free. Either way the call holds the
        // server for its wait and its compute, so both count. A routine the model gives no
        // flops has no factor to learn: what it holds is overhead.
        let mut held = o.actual_compute + o.actual_queue;
        if o.modelled_compute > 0.0 {
            let observed =
                (held / (o.modelled_compute * stretch)).clamp(FACTOR_RANGE.0, FACTOR_RANGE.1);
            let key = (o.server.clone(), o.function.clone());
            let median = self.factor_history.entry(key).or_default().push(observed);
            self.factors
                .entry(o.server.clone())
                .or_default()
                .insert(o.function.clone(), median);
        } else {
            held = 0.0;
        }
        let overhead = (o.actual_call - held - o.predicted_transfer).clamp(0.0, MAX_OVERHEAD);
        let history = self.overhead_history.entry(o.server.clone()).or_default();
        if history.len() == OVERHEAD_WINDOW {
            history.pop_front();
        }
        history.push_back((stretch, overhead));
        let fitted = Overhead::fit(history.make_contiguous());
        self.overheads.insert(o.server.clone(), fitted);
    }

    /// Whether `server`'s own figures are recent enough to use.
    fn fresh(&self, server: &str) -> bool {
        self.last_observed
            .get(server)
            .is_some_and(|&last| self.observed - last <= STALE_AFTER)
    }

    /// The median of `figure` over the servers with fresh figures that have it.
    fn prior(&self, figure: impl Fn(&str) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self
            .last_observed
            .keys()
            .filter(|s| self.fresh(s))
            .filter_map(|s| figure(s))
            .collect();
        median(values)
    }

    /// The factor on `function`'s modelled compute time on `server`: its own, or the other
    /// servers' median until it has fresh figures (1 when nobody has one).
    pub fn factor(&self, server: &str, function: &str) -> f64 {
        let own = |s: &str| self.factors.get(s).and_then(|f| f.get(function)).copied();
        if self.fresh(server)
            && let Some(factor) = own(server)
        {
            return factor;
        }
        self.prior(own).unwrap_or(1.0)
    }

    /// Every routine's factor on `server` ([`Calibration::factor`]), by routine, for every
    /// routine any server has a figure for.
    pub fn factors(&self, server: &str) -> HashMap<String, f64> {
        let functions: std::collections::HashSet<&String> =
            self.factors.values().flat_map(|f| f.keys()).collect();
        functions
            .into_iter()
            .map(|f| (f.clone(), self.factor(server, f)))
            .collect()
    }

    /// What every call on `server` costs beyond its compute and its transfers: its own, or
    /// the other servers' medians (of each part) until it has fresh figures (none when
    /// nobody has one).
    pub fn overhead(&self, server: &str) -> Overhead {
        let own = |s: &str| self.overheads.get(s).copied();
        if self.fresh(server)
            && let Some(overhead) = own(server)
        {
            return overhead;
        }
        Overhead {
            fixed: self.prior(|s| own(s).map(|o| o.fixed)).unwrap_or(0.0),
            shared: self.prior(|s| own(s).map(|o| o.shared)).unwrap_or(0.0),
        }
    }

    /// Forgets a server (it left the grid, or came back as another machine).
    pub fn forget(&mut self, server: &str) {
        self.factors.remove(server);
        self.overheads.remove(server);
        self.last_observed.remove(server);
        self.factor_history.retain(|(s, _), _| s != server);
        self.overhead_history.remove(server);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(compute: f64, modelled: f64, call: f64) -> Observation {
        call_on("s:1", compute, modelled, call)
    }

    fn call_on(server: &str, compute: f64, modelled: f64, call: f64) -> Observation {
        Observation {
            server: server.into(),
            function: "dgefa".into(),
            modelled_compute: modelled,
            predicted_stretch: 1.0,
            predicted_transfer: 0.001,
            actual_call: call,
            actual_compute: compute,
            actual_queue: 0.0,
        }
    }

    #[test]
    fn a_routine_slower_than_the_benchmark_is_learned_and_the_fixed_cost_beside_it() {
        let mut c = Calibration::default();
        for _ in 0..20 {
            // Modelled at 1.4 ms, computed in 7 ms, answered in 9 ms with 1 ms of transfer.
            c.observe(&call(0.007, 0.0014, 0.009));
        }
        assert!((c.factor("s:1", "dgefa") - 5.0).abs() < 1e-9);
        assert!((c.overhead("s:1").at(1.0) - 0.001).abs() < 1e-9);
        assert_eq!(c.factor("s:1", "dgesl"), 1.0);
        // A server not learned yet is taken to cost what the learned one does.
        assert!((c.factor("s:2", "dgefa") - 5.0).abs() < 1e-9);
        assert!((c.overhead("s:2").at(1.0) - 0.001).abs() < 1e-9);
        assert_eq!(c.factors("s:2").len(), 1);
    }

    #[test]
    fn a_call_the_prediction_saw_slowed_by_load_teaches_what_it_costs_alone() {
        let mut c = Calibration::default();
        for i in 0..OVERHEAD_WINDOW {
            // Predicted among 0 to 3 other jobs (1 to 4 times as long as alone): computed
            // for 2 ms per stretch against 1 ms modelled alone, with 1 ms of transfer and an
            // overhead of 3 ms fixed and 0.5 ms per stretch.
            let stretch = 1.0 + (i % 4) as f64;
            let compute = 0.002 * stretch;
            c.observe(&Observation {
                predicted_stretch: stretch,
                ..call(compute, 0.001, compute + 0.001 + 0.003 + 0.0005 * stretch)
            });
        }
        assert!((c.factor("s:1", "dgefa") - 2.0).abs() < 1e-9);
        let overhead = c.overhead("s:1");
        assert!((overhead.fixed - 0.003).abs() < 1e-9, "{overhead:?}");
        assert!((overhead.shared - 0.0005).abs() < 1e-9, "{overhead:?}");
    }

    #[test]
    fn an_overhead_fit_has_no_negative_part_and_reads_no_slope_from_one_stretch() {
        let flat = Overhead::fit(&[(2.0, 0.001), (2.0, 0.003), (2.01, 0.002)]);
        assert_eq!(
            flat,
            Overhead {
                fixed: 0.002,
                shared: 0.0
            }
        );
        // Falling with the load: nothing waits for the processors.
        let falling = Overhead::fit(&[(1.0, 0.004), (2.0, 0.003), (3.0, 0.002)]);
        assert_eq!(falling.shared, 0.0);
        assert!((falling.fixed - 0.003).abs() < 1e-12);
        // Steeper than through the origin: all of it waits for the processors.
        let steep = Overhead::fit(&[(1.0, 0.0), (2.0, 0.002), (3.0, 0.004)]);
        assert_eq!(steep.fixed, 0.0);
        assert!((steep.shared - 0.001).abs() < 1e-12, "{steep:?}");
        assert_eq!(Overhead::fit(&[]), Overhead::default());
    }

    #[test]
    fn unlearned_and_stale_servers_cost_the_median_of_the_fresh_ones() {
        let mut c = Calibration::default();
        assert_eq!(c.factor("s:9", "dgefa"), 1.0);
        assert_eq!(c.overhead("s:9").at(1.0), 0.0);
        // Three servers, each modelled at 1 ms, computing for 2, 3 and 4 ms, and costing 0, 1
        // and 2 ms beyond that and the 1 ms transfer.
        for _ in 0..WINDOW {
            for (i, server) in ["s:1", "s:2", "s:3"].into_iter().enumerate() {
                let k = i as f64;
                c.observe(&call_on(
                    server,
                    0.002 + k * 0.001,
                    0.001,
                    0.003 + k * 0.002,
                ));
            }
        }
        assert!((c.factor("s:9", "dgefa") - 3.0).abs() < 1e-9);
        assert!((c.overhead("s:9").at(1.0) - 0.001).abs() < 1e-9);
        // s:1 has a burst (calls 100 times slower) and then gets no calls: its figures hold
        // until the rest of the grid has made STALE_AFTER observations, then give way.
        for _ in 0..OVERHEAD_WINDOW {
            c.observe(&call_on("s:1", 0.2, 0.001, 0.5));
        }
        assert!((c.factor("s:1", "dgefa") - 200.0).abs() < 1e-9);
        for i in 0..STALE_AFTER {
            assert!(
                c.overhead("s:1").at(1.0) > 0.29,
                "fresh after {i} observations elsewhere"
            );
            c.observe(&call_on("s:2", 0.003, 0.001, 0.005));
        }
        c.observe(&call_on("s:3", 0.004, 0.001, 0.007));
        assert!(
            (c.factor("s:1", "dgefa") - 3.5).abs() < 1e-9,
            "{}",
            c.factor("s:1", "dgefa")
        );
        assert!((c.overhead("s:1").at(1.0) - 0.0015).abs() < 1e-9);
        // A call there makes its own figures count again.
        c.observe(&call_on("s:1", 0.2, 0.001, 0.5));
        assert!(c.overhead("s:1").at(1.0) > 0.29);
    }

    #[test]
    fn one_odd_call_moves_nothing_and_a_lasting_change_is_followed() {
        let mut c = Calibration::default();
        for _ in 0..10 {
            c.observe(&call(0.002, 0.002, 0.003));
        }
        c.observe(&call(0.2, 0.002, 0.201));
        assert_eq!(c.factor("s:1", "dgefa"), 1.0);
        // The routine now runs three times slower: the median follows within a window.
        for _ in 0..WINDOW / 2 + 1 {
            c.observe(&call(0.006, 0.002, 0.007));
        }
        assert!((c.factor("s:1", "dgefa") - 3.0).abs() < 1e-9);
    }

    #[test]
    fn reports_without_an_account_or_with_nonsense_teach_nothing() {
        let mut c = Calibration::default();
        c.observe(&call(0.0, 0.002, 0.003));
        assert_eq!(c.factor("s:1", "dgefa"), 1.0);
        assert_eq!(c.overhead("s:1").at(1.0), 0.0);
        c.observe(&call(f64::NAN, 0.002, 0.003));
        c.observe(&call(0.002, 0.002, -1.0));
        c.observe(&call(0.002, f64::INFINITY, 0.003));
        assert_eq!(c.factor("s:1", "dgefa"), 1.0);
        // A wild report is bounded.
        let mut c = Calibration::default();
        c.observe(&call(1e9, 1e-9, 1e9 + 1e6));
        assert!((c.factor("s:1", "dgefa") - FACTOR_RANGE.1).abs() < 1e-9);
        assert_eq!(c.overhead("s:1").at(1.0), MAX_OVERHEAD);
        c.forget("s:1");
        assert_eq!(c.factor("s:1", "dgefa"), 1.0);
    }
}
