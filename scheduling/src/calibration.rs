//! Learning from what ran. The predictor's model of a call (flops over the server's measured
//! speed, shared by its load, after the inputs arrive) misses two things a real grid has: a
//! routine runs at its own fraction of the speed the server's benchmark measured (LINPACK's
//! `dgefa` at n = 400 ran 5-7 times slower here than the benchmark promised), and every call
//! pays a fixed cost the flops do not count (the RPC, argument encoding, admission into the
//! gang table). Both are learned per server from the times the proxies report: a factor on
//! the modelled compute time per (server, routine, size band), and a per-call overhead per
//! server. GridSolve and DIET's FAST learn per-routine performance the same way.
//!
//! The factor is kept per size band (calls whose modelled times are within a factor of 4:
//! [`Factor`]) because it changes with size: products at n = 200 ran at 2-8 times their
//! model here, at n = 1000 at 1. Learned as one figure, a server whose last calls were
//! small looked 4-8 times slower for large ones than its twin that had just run large
//! ones, and FLOW put 5 to 7 of a cascade's 7 products at n = 1000 on the twin.
//!
//! A routine the model gives no flops (`noop`) has no model to put a factor on: what its
//! calls teach is their running time in seconds, per server, which the predictor then books
//! on the server's processors as compute ([`Factor::alone`]). So 10,000 of them stack up on
//! a server as its queue does, and a graph of them is split by what each server can run.
//!
//! The overhead has two parts, fitted to how it grew with the load each call was predicted
//! to meet ([`Overhead`]): a part that waits for the server's processors as the compute does
//! (decoding, the executable's hand-over, admission), and a part that does not (the RPC and
//! the proxy's own latency). Under `ninf load` four calls issued together to a
//! one-processor server each took 1.4 ms against 1.0 ms alone: had all of it stretched with
//! the processors' share, the prediction would have been 4 ms.
//!
//! Each figure is the median of its last [`WINDOW`] observations: on a shared machine one
//! call in a few runs two or three times slower than its neighbours, and a mean would carry
//! those into every prediction.
//!
//! A call on a cold executable (one that had not run the routine on a request that large:
//! `CallTiming.cold`) teaches a factor only while its server has no warm call of the
//! routine. A median does not protect against those: they come first, when the window is
//! nearly empty. On a local grid of two identical servers the first cascade at n = 200 ran
//! its cold products in 6-11 ms against 0.5-1.5 ms warm; the server that got fewer calls
//! afterwards kept a factor 2.7 times its twin's, and FLOW then put every product of the
//! next cascades on the twin.
//!
//! A server nobody has learned yet, or whose figures have not been refreshed for
//! [`STALE_AFTER`] observations of the whole grid, is assumed to cost what the servers with
//! fresh figures cost (their median). Without that, a fresh server is predicted to cost
//! nothing, so a burst of graphs all lands on it; and a server that had one bad burst keeps
//! its bad figures for ever, since no call goes there to correct them.
//!
//! Pure and deterministic: observations in, figures out; no clock (age is counted in
//! observations).

use crate::stats::median;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

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
/// The size band of calls the model gives no flops (LINPACK-less routines such as
/// `noop`): what they teach is their running time in seconds, not a factor on a model.
const UNMODELLED: i32 = i32::MIN;
/// A server's figures are set aside once the grid has made this many observations since
/// its last one: twenty windows.
pub const STALE_AFTER: u64 = 20 * WINDOW as u64;
/// A server's factor for a routine (in one size band) is set aside, and forgotten at its
/// next call there, once the grid has run the routine there this many times since the
/// server last did. Two windows was too eager: under `ninf load` a server that got no
/// product for a while started over from single calls, and the median error per task
/// went from 30-32% to 33-36%.
pub const ROUTINE_STALE_AFTER: u64 = STALE_AFTER;

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
    /// The part of `actual_compute` the call's gang job stood stopped outside its slots
    /// (`CallTiming.stopped_seconds`): waiting behind another job, not computing.
    pub actual_stopped: f64,
    /// The server ran the call on an executable that had not run the routine on a request
    /// this large: its compute time includes one-off costs (loading, first touches).
    pub cold: bool,
    /// The threads the call computed with (`CallTiming.threads`; 0 or 1: one). More than one
    /// when its server was lent idle cores: its compute time then says nothing of the
    /// routine's speed on the server's own processor, and teaches no factor.
    pub threads: u32,
    /// Every other server of its graph had answered all its calls of the graph before this
    /// call ended. On one machine this server then ran with the cores to itself, faster
    /// than the plan, which had them all busy at once, could count on.
    pub after_others_ended: bool,
    /// The prediction knew how long the call runs (from the model's flops, or a running
    /// time learned for a routine the model gives none). Without, it had no way to tell
    /// the call's queue from its overhead: the call teaches no overhead.
    pub running_known: bool,
}

/// The last observations of one figure, and their median.
#[derive(Debug, Clone, Default, PartialEq)]
struct Recent {
    values: VecDeque<f64>,
}

impl Recent {
    /// Adds `value`, dropping the oldest beyond [`WINDOW`].
    fn push(&mut self, value: f64) {
        if self.values.len() == WINDOW {
            self.values.pop_front();
        }
        self.values.push_back(value);
    }

    fn median(&self) -> Option<f64> {
        median(self.values.iter().copied().collect())
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

/// A factor's observations, of warm calls and of cold ones apart.
#[derive(Debug, Clone, Default, PartialEq)]
struct FactorHistory {
    warm: Recent,
    cold: Recent,
    /// The factor now: the median of the warm calls, or of the cold ones until a warm one is
    /// seen (a server whose every call is cold, such as one whose nodes' agents start each
    /// parallel job's executables, is still learned).
    median: f64,
    /// How many calls of the routine in this band the grid had seen at this one.
    last: u64,
}

impl FactorHistory {
    fn push(&mut self, value: f64, cold: bool) {
        if cold {
            self.cold.push(value);
        } else {
            self.warm.push(value);
        }
        self.median = self
            .warm
            .median()
            .or_else(|| self.cold.median())
            .unwrap_or(value);
    }
}

/// The size band of a call whose model gives it `modelled` seconds: calls within a factor
/// of 4 of each other share one.
fn band(modelled: f64) -> i32 {
    (modelled.log2() / 2.0).floor().clamp(-100.0, 100.0) as i32
}

/// A routine's factor on one server, by the size of the call: what a call costs beyond its
/// flops depends on its size (fixed costs weigh most in small calls), so a factor learned
/// from small calls does not hold for large ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Factor {
    by_band: BTreeMap<i32, f64>,
    /// The seconds a call runs when the model gives it no flops (none learned: 0).
    pub unmodelled: Option<f64>,
}

impl Factor {
    /// The same factor at every size.
    pub fn flat(factor: f64) -> Factor {
        Factor {
            by_band: BTreeMap::from([(0, factor)]),
            unmodelled: None,
        }
    }

    /// A routine the model gives no flops, whose calls run `seconds` each.
    pub fn without_flops(seconds: f64) -> Factor {
        Factor {
            by_band: BTreeMap::new(),
            unmodelled: Some(seconds),
        }
    }

    /// Each `(modelled seconds, factor)` pair's factor for calls in that size's band.
    pub fn sized(points: &[(f64, f64)]) -> Factor {
        Factor {
            by_band: points.iter().map(|&(m, f)| (band(m), f)).collect(),
            unmodelled: None,
        }
    }

    /// The factor for a call the model gives `modelled` seconds: that of its band, else of
    /// the nearest band known (the smaller on a tie), else 1.
    pub fn at(&self, modelled: f64) -> f64 {
        let b = band(modelled);
        let below = self.by_band.range(..=b).next_back();
        let above = self.by_band.range(b..).next();
        match (below, above) {
            (Some((&lo, &f)), Some((&hi, &g))) => {
                if i64::from(b) - i64::from(lo) <= i64::from(hi) - i64::from(b) {
                    f
                } else {
                    g
                }
            }
            (Some((_, &f)), None) | (None, Some((_, &f))) => f,
            (None, None) => 1.0,
        }
    }

    /// What a call the model gives `modelled` seconds runs alone: that times its factor, or
    /// for a call the model gives no flops, its learned running time (0 unknown).
    pub fn alone(&self, modelled: f64) -> f64 {
        if modelled > 0.0 {
            let factor = self.at(modelled);
            if factor.is_finite() && factor > 0.0 {
                modelled * factor
            } else {
                modelled
            }
        } else {
            self.unmodelled
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(0.0)
        }
    }

    /// The least factor at any size (1 when none is known).
    pub fn least(&self) -> f64 {
        self.by_band
            .values()
            .copied()
            .reduce(f64::min)
            .unwrap_or(1.0)
    }
}

/// The learned figures, by server address.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calibration {
    /// By server, routine and size band.
    factor_history: HashMap<(String, String, i32), FactorHistory>,
    /// Each server's last (predicted stretch, overhead) pairs.
    overhead_history: HashMap<String, VecDeque<(f64, f64)>>,
    overheads: HashMap<String, Overhead>,
    /// Observations made so far, and each server's count at its last one.
    observed: u64,
    last_observed: HashMap<String, u64>,
    /// Observations made so far of each routine in each size band.
    routine_observed: HashMap<(String, i32), u64>,
}

impl Calibration {
    /// Learns from one finished call. Calls without a usable account (no compute time
    /// reported, nothing modelled, non-finite figures) teach nothing.
    pub fn observe(&mut self, o: &Observation) {
        let figures = [
            o.actual_stopped,
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
        let stretch = o.predicted_stretch.max(1.0);
        // The factor is of a call alone: its running time, the compute time less what its
        // gang job stood stopped behind other jobs' slots. The waits (for a slot, for
        // admission, for the calls before it on its connection) are the load's doing, which
        // the predictor counts apart: as the stretch and the slot wait
        // ([`crate::LoadPredictor::slot_wait`]). Learned as speed, a 2 ms `dgesl` that
        // waited 45 ms for an LU's slot made the routine look 20 times slower on that
        // server, and an LU queued behind another looked twice as fast once the predicted
        // stretch was divided out of a compute time that held none of the wait.
        let held = o.actual_compute + o.actual_queue;
        let running = o.actual_compute - o.actual_stopped.clamp(0.0, o.actual_compute);
        // What the call's server side took as the prediction counts it: the stretched
        // running time, or what the server held it for, whichever is longer.
        let computed = held.max(running * stretch);
        if o.threads <= 1 {
            if o.modelled_compute > 0.0 {
                let observed = (running / o.modelled_compute).clamp(FACTOR_RANGE.0, FACTOR_RANGE.1);
                self.learn(o, band(o.modelled_compute), observed);
            } else if !o.after_others_ended {
                // A routine the model gives no flops still holds its server's processor
                // while it runs: learned as seconds, its calls stack up on the server as
                // compute does, so a graph of 10,000 `noop`s is split by what each server
                // can run. Learned as overhead alone, all of a call's wait in the queue
                // (0.2-0.4 s, the whole graph) was taken as a fixed cost the same on every
                // server, and FLOW put most or all of the next graph on one of two.
                // The calls a server runs after the others have ended are left out: those
                // of the server given more ran faster alone, it looked the faster, and was
                // given more again (6,000-8,300 of 10,000 calls, always to the same one of
                // two like servers).
                self.learn(o, UNMODELLED, running.clamp(0.0, MAX_OVERHEAD));
            }
        }
        if !o.running_known {
            // The first graph of 10,000 `noop`s was predicted with every call at stretch 1:
            // each call's wait behind the calls ahead of it was learned as a fixed overhead,
            // 0.12 s on the server given 7,700 calls and 0.05 s on the one given 2,300, and
            // the next graph went 1,100 to 8,900 the other way.
            return;
        }
        let overhead = (o.actual_call - computed - o.predicted_transfer).clamp(0.0, MAX_OVERHEAD);
        let history = self.overhead_history.entry(o.server.clone()).or_default();
        if history.len() == OVERHEAD_WINDOW {
            history.pop_front();
        }
        history.push_back((stretch, overhead));
        let fitted = Overhead::fit(history.make_contiguous());
        self.overheads.insert(o.server.clone(), fitted);
    }

    /// Adds `observed` to the factor of the call's server, routine and band `b` (for
    /// [`UNMODELLED`], its running time), forgetting what that figure knew if it had gone
    /// stale.
    fn learn(&mut self, o: &Observation, b: i32, observed: f64) {
        let count = self
            .routine_observed
            .entry((o.function.clone(), b))
            .or_default();
        *count += 1;
        let count = *count;
        let key = (o.server.clone(), o.function.clone(), b);
        let history = self.factor_history.entry(key).or_default();
        if count - history.last > ROUTINE_STALE_AFTER {
            *history = FactorHistory::default();
        }
        history.last = count;
        history.push(observed, o.cold);
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

    /// `server`'s own factor for `function` in band `b`, if it is fresh: the server is,
    /// and it ran the routine in that band within the last [`ROUTINE_STALE_AFTER`] calls
    /// of it there. A server that never gets a routine because its factor looks bad would
    /// otherwise keep that factor for as long as it serves other routines.
    fn own_factor(&self, server: &str, function: &str, b: i32) -> Option<f64> {
        let key = (server.to_string(), function.to_string(), b);
        let history = self.factor_history.get(&key)?;
        let count = self
            .routine_observed
            .get(&(function.to_string(), b))
            .copied()
            .unwrap_or(0);
        (count - history.last <= ROUTINE_STALE_AFTER && self.fresh(server))
            .then_some(history.median)
    }

    /// The factor on `function`'s modelled compute time on `server`, in each size band any
    /// server has learned: its own, or the other servers' median where it has no fresh
    /// figure of its own. A band nobody has takes the nearest one's ([`Factor::at`]; 1
    /// when nobody has any).
    pub fn factor(&self, server: &str, function: &str) -> Factor {
        let learned = |b: i32| {
            self.own_factor(server, function, b)
                .or_else(|| self.prior(|s| self.own_factor(s, function, b)))
        };
        let by_band = self
            .routine_observed
            .keys()
            .filter(|(f, b)| f == function && *b != UNMODELLED)
            .filter_map(|&(_, b)| Some((b, learned(b)?)))
            .collect();
        let unmodelled = self
            .routine_observed
            .contains_key(&(function.to_string(), UNMODELLED))
            .then(|| learned(UNMODELLED))
            .flatten();
        Factor {
            by_band,
            unmodelled,
        }
    }

    /// Every routine's factor on `server` ([`Calibration::factor`]), by routine, for every
    /// routine any server has a figure for.
    pub fn factors(&self, server: &str) -> HashMap<String, Factor> {
        let functions: BTreeSet<&String> = self.routine_observed.keys().map(|(f, _)| f).collect();
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
        self.overheads.remove(server);
        self.last_observed.remove(server);
        self.factor_history.retain(|(s, _, _), _| s != server);
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
            actual_stopped: 0.0,
            cold: false,
            threads: 0,
            after_others_ended: false,
            running_known: true,
        }
    }

    fn cold(o: Observation) -> Observation {
        Observation { cold: true, ..o }
    }

    #[test]
    fn a_call_lent_more_threads_teaches_no_factor_but_its_overhead_counts() {
        let mut c = Calibration::default();
        c.observe(&call(0.010, 0.005, 0.012));
        assert!((c.factor("s:1", "dgefa").at(0.005) - 2.0).abs() < 1e-9);
        c.observe(&Observation {
            threads: 2,
            ..call(0.004, 0.005, 0.006)
        });
        assert!((c.factor("s:1", "dgefa").at(0.005) - 2.0).abs() < 1e-9);
        assert_eq!(c.observed, 2);
    }

    #[test]
    fn cold_calls_teach_the_factor_only_until_a_warm_call_comes() {
        let mut c = Calibration::default();
        c.observe(&cold(call(0.010, 0.001, 0.012)));
        c.observe(&cold(call(0.012, 0.001, 0.014)));
        assert!((c.factor("s:1", "dgefa").at(0.001) - 11.0).abs() < 1e-9);
        c.observe(&call(0.001, 0.001, 0.003));
        assert!((c.factor("s:1", "dgefa").at(0.001) - 1.0).abs() < 1e-9);
        // Later cold calls (a new executable for a burst, a first larger request) leave
        // the warm figure alone.
        for _ in 0..5 {
            c.observe(&cold(call(0.009, 0.001, 0.011)));
        }
        assert!((c.factor("s:1", "dgefa").at(0.001) - 1.0).abs() < 1e-9);
        c.observe(&call(0.002, 0.001, 0.004));
        assert!((c.factor("s:1", "dgefa").at(0.001) - 1.5).abs() < 1e-9);
    }

    #[test]
    fn twins_whose_first_calls_were_cold_learn_the_same_factor() {
        let mut c = Calibration::default();
        // The first server ran many warm calls after its cold ones, the second only one.
        for compute in [0.0066, 0.0086] {
            c.observe(&cold(call_on("s:1", compute, 0.001, compute + 0.001)));
        }
        for _ in 0..10 {
            c.observe(&call_on("s:1", 0.001, 0.001, 0.002));
        }
        for compute in [0.0092, 0.0113] {
            c.observe(&cold(call_on("s:2", compute, 0.001, compute + 0.001)));
        }
        c.observe(&call_on("s:2", 0.001, 0.001, 0.002));
        assert!(
            (c.factor("s:1", "dgefa").at(0.001) - c.factor("s:2", "dgefa").at(0.001)).abs() < 1e-9
        );
    }

    #[test]
    fn a_factor_the_grid_stopped_testing_is_set_aside_then_learned_anew() {
        let mut c = Calibration::default();
        let on = |server: &str, function: &str, compute: f64| Observation {
            function: function.into(),
            ..call_on(server, compute, 0.001, compute + 0.001)
        };
        for _ in 0..3 {
            c.observe(&on("s:1", "mmul", 0.008));
        }
        for _ in 0..ROUTINE_STALE_AFTER {
            c.observe(&on("s:2", "mmul", 0.001));
            // s:1 keeps serving another routine: the server's figures stay fresh.
            c.observe(&on("s:1", "dgesl", 0.001));
        }
        assert!(
            (c.factor("s:1", "mmul").at(0.001) - 8.0).abs() < 1e-9,
            "not stale yet"
        );
        c.observe(&on("s:2", "mmul", 0.001));
        assert!(
            (c.factor("s:1", "mmul").at(0.001) - 1.0).abs() < 1e-9,
            "the others' figure"
        );
        // Its next call is all it knows of the routine now: it was slow, and is again.
        c.observe(&on("s:1", "mmul", 0.005));
        assert!((c.factor("s:1", "mmul").at(0.001) - 5.0).abs() < 1e-9);
        assert!((c.factor("s:2", "mmul").at(0.001) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_factor_is_learned_per_size_and_a_size_a_server_never_ran_takes_the_others() {
        let mut c = Calibration::default();
        let mmul = |server: &str, modelled: f64, factor: f64| Observation {
            function: "mmul".into(),
            ..call_on(
                server,
                modelled * factor,
                modelled,
                modelled * factor + 0.001,
            )
        };
        // Products at n = 200 (0.4 ms modelled): s:1 looked slow.
        for _ in 0..4 {
            c.observe(&mmul("s:1", 0.0004, 8.0));
            c.observe(&mmul("s:2", 0.0004, 2.0));
        }
        // Products at n = 1000 (50 ms modelled) ran on s:2 only.
        for _ in 0..3 {
            c.observe(&mmul("s:2", 0.05, 1.0));
        }
        let (s1, s2) = (c.factor("s:1", "mmul"), c.factor("s:2", "mmul"));
        assert!((s1.at(0.0004) - 8.0).abs() < 1e-9);
        assert!((s2.at(0.0004) - 2.0).abs() < 1e-9);
        assert!(
            (s1.at(0.05) - 1.0).abs() < 1e-9,
            "s:2's figure at that size"
        );
        assert!((s2.at(0.05) - 1.0).abs() < 1e-9);
        // A size between takes the nearest band's; far beyond, the largest's.
        assert!((s1.at(0.03) - 1.0).abs() < 1e-9);
        assert!((s1.at(0.0002) - 8.0).abs() < 1e-9);
        assert!((s1.at(100.0) - 1.0).abs() < 1e-9);
        assert!((s1.least() - 1.0).abs() < 1e-9);
        assert_eq!(Factor::default().at(1.0), 1.0);
    }

    #[test]
    fn a_routine_slower_than_the_benchmark_is_learned_and_the_fixed_cost_beside_it() {
        let mut c = Calibration::default();
        for _ in 0..20 {
            // Modelled at 1.4 ms, computed in 7 ms, answered in 9 ms with 1 ms of transfer.
            c.observe(&call(0.007, 0.0014, 0.009));
        }
        assert!((c.factor("s:1", "dgefa").at(0.001) - 5.0).abs() < 1e-9);
        assert!((c.overhead("s:1").at(1.0) - 0.001).abs() < 1e-9);
        assert_eq!(c.factor("s:1", "dgesl").at(0.001), 1.0);
        // A server not learned yet is taken to cost what the learned one does.
        assert!((c.factor("s:2", "dgefa").at(0.001) - 5.0).abs() < 1e-9);
        assert!((c.overhead("s:2").at(1.0) - 0.001).abs() < 1e-9);
        assert_eq!(c.factors("s:2").len(), 1);
    }

    #[test]
    fn a_routine_the_model_gives_no_flops_learns_its_running_time_per_server() {
        let mut c = Calibration::default();
        for _ in 0..WINDOW {
            // 10,000 `noop`s in one graph: each ran 40 us on s:1 (50 us on s:2), 2 us of
            // it stopped, and came back only when its whole queue had, 0.3 s later.
            for (server, compute) in [("s:1", 0.000_040), ("s:2", 0.000_050)] {
                c.observe(&Observation {
                    function: "noop".into(),
                    actual_stopped: 0.000_002,
                    ..call_on(server, compute, 0.0, 0.3)
                });
            }
        }
        let noop = c.factor("s:1", "noop");
        assert!(
            (noop.unmodelled.unwrap() - 0.000_038).abs() < 1e-12,
            "{noop:?}"
        );
        assert!((c.factor("s:2", "noop").unmodelled.unwrap() - 0.000_048).abs() < 1e-12);
        // No factor on a model: calls with flops keep theirs.
        assert_eq!(noop.at(0.001), 1.0);
        // A server that never ran it costs what those that did do (their median).
        let fresh = c.factor("s:3", "noop").unmodelled.unwrap();
        assert!((fresh - 0.000_043).abs() < 1e-12, "{fresh}");
        assert_eq!(c.factor("s:1", "dgefa").unmodelled, None);
        // s:2's calls after s:1 had ended ran faster alone: they teach nothing.
        for _ in 0..WINDOW {
            c.observe(&Observation {
                function: "noop".into(),
                after_others_ended: true,
                ..call_on("s:2", 0.000_020, 0.0, 0.3)
            });
        }
        assert!((c.factor("s:2", "noop").unmodelled.unwrap() - 0.000_048).abs() < 1e-12);
    }

    #[test]
    fn a_call_predicted_without_its_running_time_teaches_that_time_and_no_overhead() {
        let mut c = Calibration::default();
        // A `noop` nobody had learned yet, answered 0.12 s after it was issued, behind the
        // thousands of calls queued before it.
        c.observe(&Observation {
            function: "noop".into(),
            running_known: false,
            ..call_on("s:1", 0.000_015, 0.0, 0.12)
        });
        let noop = c.factor("s:1", "noop").unmodelled.unwrap();
        assert!((noop - 0.000_015).abs() < 1e-12, "{noop}");
        assert_eq!(c.overhead("s:1"), Overhead::default());
        // Predicted with it, the next call teaches the overhead too.
        c.observe(&Observation {
            function: "noop".into(),
            ..call_on("s:1", 0.000_015, 0.0, 0.003)
        });
        assert!((c.overhead("s:1").at(1.0) - 0.001_985).abs() < 1e-9);
    }

    #[test]
    fn a_call_the_prediction_saw_slowed_by_load_teaches_what_it_costs_alone() {
        let mut c = Calibration::default();
        for i in 0..OVERHEAD_WINDOW {
            // Predicted among 0 to 3 other jobs (1 to 4 times as long as alone): ran for 2 ms
            // against 1 ms modelled alone and stood stopped behind the others for the rest
            // of 2 ms per stretch, with 1 ms of transfer and an overhead of 3 ms fixed and
            // 0.5 ms per stretch.
            let stretch = 1.0 + (i % 4) as f64;
            let compute = 0.002 * stretch;
            c.observe(&Observation {
                predicted_stretch: stretch,
                actual_stopped: compute - 0.002,
                ..call(compute, 0.001, compute + 0.001 + 0.003 + 0.0005 * stretch)
            });
        }
        assert!((c.factor("s:1", "dgefa").at(0.001) - 2.0).abs() < 1e-9);
        let overhead = c.overhead("s:1");
        assert!((overhead.fixed - 0.003).abs() < 1e-9, "{overhead:?}");
        assert!((overhead.shared - 0.0005).abs() < 1e-9, "{overhead:?}");
    }

    #[test]
    fn waits_behind_other_calls_teach_neither_speed_nor_overhead() {
        let mut c = Calibration::default();
        for _ in 0..WINDOW {
            // An LU modelled at 40 ms and predicted behind another (stretch 2): it reached
            // the server once the first had ended, and computed for 44 ms, never stopped.
            // Its call took 92 ms with 1 ms of transfer: 3 ms beyond the prediction's
            // 2 x 44 ms.
            c.observe(&Observation {
                predicted_stretch: 2.0,
                ..call(0.044, 0.040, 0.092)
            });
        }
        assert!((c.factor("s:1", "dgefa").at(0.040) - 1.1).abs() < 1e-9);
        assert!((c.overhead("s:1").at(2.0) - 0.003).abs() < 1e-9);
        for _ in 0..WINDOW {
            // A `dgesl` modelled at 1 ms that waited 45 ms for that LU's slot, then ran 2 ms.
            c.observe(&Observation {
                function: "dgesl".into(),
                actual_stopped: 0.045,
                ..call(0.047, 0.001, 0.051)
            });
        }
        assert!((c.factor("s:1", "dgesl").at(0.001) - 2.0).abs() < 1e-9);
        assert!((c.overhead("s:1").at(1.0) - 0.003).abs() < 1e-9);
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
        assert_eq!(c.factor("s:9", "dgefa").at(0.001), 1.0);
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
        assert!((c.factor("s:9", "dgefa").at(0.001) - 3.0).abs() < 1e-9);
        assert!((c.overhead("s:9").at(1.0) - 0.001).abs() < 1e-9);
        // s:1 has a burst (calls 100 times slower) and then gets no calls: its figures hold
        // until the rest of the grid has made STALE_AFTER observations, then give way.
        for _ in 0..OVERHEAD_WINDOW {
            c.observe(&call_on("s:1", 0.2, 0.001, 0.5));
        }
        assert!((c.factor("s:1", "dgefa").at(0.001) - 200.0).abs() < 1e-9);
        for i in 0..STALE_AFTER {
            assert!(
                c.overhead("s:1").at(1.0) > 0.29,
                "fresh after {i} observations elsewhere"
            );
            c.observe(&call_on("s:2", 0.003, 0.001, 0.005));
        }
        c.observe(&call_on("s:3", 0.004, 0.001, 0.007));
        assert!(
            (c.factor("s:1", "dgefa").at(0.001) - 3.5).abs() < 1e-9,
            "{}",
            c.factor("s:1", "dgefa").at(0.001)
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
        assert_eq!(c.factor("s:1", "dgefa").at(0.001), 1.0);
        // The routine now runs three times slower: the median follows within a window.
        for _ in 0..WINDOW / 2 + 1 {
            c.observe(&call(0.006, 0.002, 0.007));
        }
        assert!((c.factor("s:1", "dgefa").at(0.001) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn reports_without_an_account_or_with_nonsense_teach_nothing() {
        let mut c = Calibration::default();
        c.observe(&call(0.0, 0.002, 0.003));
        assert_eq!(c.factor("s:1", "dgefa").at(0.001), 1.0);
        assert_eq!(c.overhead("s:1").at(1.0), 0.0);
        c.observe(&call(f64::NAN, 0.002, 0.003));
        c.observe(&call(0.002, 0.002, -1.0));
        c.observe(&call(0.002, f64::INFINITY, 0.003));
        assert_eq!(c.factor("s:1", "dgefa").at(0.001), 1.0);
        // A wild report is bounded.
        let mut c = Calibration::default();
        c.observe(&call(1e9, 1e-9, 1e9 + 1e6));
        assert!((c.factor("s:1", "dgefa").at(0.001) - FACTOR_RANGE.1).abs() < 1e-9);
        assert_eq!(c.overhead("s:1").at(1.0), MAX_OVERHEAD);
        c.forget("s:1");
        assert_eq!(c.factor("s:1", "dgefa").at(0.001), 1.0);
    }
}
