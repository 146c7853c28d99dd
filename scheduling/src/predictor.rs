//! The resource state predictor (the metaserver paper): how fast a server will run a new task and how
//! fast data moves between two places, from monitoring data plus the placements the scheduler
//! has made (a server given a task is busier until the task ends).
//!
//! Speed model: a server with P processors of speed s and a load of L runnable jobs gives a
//! task needing p processors the speed `s * p * min(1, P / (L + p))`: time-sharing (gang
//! scheduling) divides the processors among all the demand. L is the measured load plus the
//! processors of every placement active at the task's start.

use std::collections::HashMap;

use crate::calibration::{Factor, Overhead};
use crate::forecast::Forecaster;
use crate::graph::Task;
use crate::grid::{GridView, Link, Location, ServerId, Site};
use crate::timeline::Timeline;

pub use crate::timeline::PlacementId;

/// A fast hasher for location pairs: schedulers look links up millions of times per graph,
/// and the keys are small integers, not attacker-chosen strings.
#[derive(Default)]
pub struct PairHasher(u64);

impl std::hash::Hasher for PairHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }

    fn write_isize(&mut self, value: isize) {
        self.write_u64(value as u64);
    }
}

/// Links by (from, to).
pub type LinkTable = HashMap<(Location, Location), Link, std::hash::BuildHasherDefault<PairHasher>>;

/// How a predictor says tasks and transfers share a grid; every scheduler's final timing
/// follows it (see [`crate::schedule::predict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// The metaserver's: a server time-shares its processors among the tasks it is given
    /// (gang scheduling), transfers on one path share its throughput, and the proxy issues a
    /// call once all its producers have finished, its inputs then moving together.
    #[default]
    Shared,
    /// The scheduling literature's (HEFT's paper, the STG set, SAGA): a processor runs one
    /// task at a time to its end, a task may be inserted into an idle stretch, each transfer
    /// has its link to itself and leaves when its producer finishes. See
    /// [`crate::classic`].
    Exclusive,
}

/// What schedulers ask and tell; implementations are chosen by configuration.
pub trait Predictor {
    /// How tasks and transfers share the grid under this predictor.
    fn model(&self) -> Model {
        Model::Shared
    }
    /// When a task needing `processors` that could start at `ready` and runs `duration`
    /// starts on `server`: at `ready` when tasks share processors (the default), at the
    /// first stretch long enough with its processors free under [`Model::Exclusive`].
    fn earliest_start(
        &self,
        _server: ServerId,
        _processors: u32,
        ready: f64,
        _duration: f64,
    ) -> f64 {
        ready
    }
    /// Flops per second a task needing `processors` would get on `server` from time `at`.
    fn speed(&self, server: ServerId, processors: u32, at: f64) -> f64;
    /// An upper bound of `speed` at any time (the server idle); schedulers use it to skip
    /// servers that cannot win. The default promises nothing.
    fn peak_speed(&self, _server: ServerId, _processors: u32) -> f64 {
        f64::INFINITY
    }
    /// Seconds a call of `task` occupies `server` once its inputs are there, from time `at`:
    /// by default its flops at [`Predictor::speed`]; [`LoadPredictor`] adds what it learned
    /// of the routine and the server ([`crate::calibration`]).
    fn compute_time(&self, server: ServerId, task: &Task, at: f64) -> f64 {
        seconds_at(task.flops, self.speed(server, task.processors, at))
    }
    /// A lower bound of [`Predictor::compute_time`] at any time (the server idle) as a line
    /// in the task's flops, the same for every task of one routine and processor count:
    /// `(seconds per flop, seconds per call)`, so that the bound is `flops × first + second`
    /// up to rounding. Schedulers sort servers by the first and skip those that cannot win.
    /// The default is the flops at [`Predictor::peak_speed`].
    fn least_compute_line(&self, server: ServerId, task: &Task) -> (f64, f64) {
        (1.0 / self.peak_speed(server, task.processors), 0.0)
    }
    /// Predicted performance of the path from one place to another.
    fn link(&self, from: Location, to: Location) -> Link;
    /// Seconds to move `bytes` from one place to another when the move starts at `at`. The
    /// default ignores other transfers; [`LoadPredictor`] shares the path's throughput
    /// equally with the transfers recorded on it at `at`.
    fn transfer_time(&self, from: Location, to: Location, bytes: u64, _at: f64) -> f64 {
        self.link(from, to).transfer_time(bytes)
    }
    /// Records a transfer on the path over `[start, finish)`, so later transfers share it;
    /// `None` when the predictor does not track transfers (or there is nothing to record).
    fn place_transfer(
        &mut self,
        _from: Location,
        _to: Location,
        _start: f64,
        _finish: f64,
    ) -> Option<PlacementId> {
        None
    }
    /// Records that a task runs on `server` over `[start, finish)`.
    fn place(&mut self, server: ServerId, processors: u32, start: f64, finish: f64) -> PlacementId;
    /// Forgets a recorded placement.
    fn withdraw(&mut self, placement: PlacementId);
    /// An independent copy, for schedulers that try whole schedules before choosing one.
    fn fork(&self) -> Box<dyn Predictor>;
}

/// Seconds the model gives `task` on a server of `processors` processors of
/// `flops_per_processor` each, with nothing else there: what calibration is learned against.
pub fn modelled_seconds(task: &Task, flops_per_processor: f64, processors: u32) -> f64 {
    seconds_at(
        task.flops,
        idle_speed(flops_per_processor, processors, task.processors),
    )
}

/// Flops per second a task needing `needed` processors gets on a server of `processors`
/// processors of `flops_per_processor` each, with nothing else there.
fn idle_speed(flops_per_processor: f64, processors: u32, needed: u32) -> f64 {
    flops_per_processor * f64::from(needed.max(1)).min(f64::from(processors))
}

/// Seconds `flops` take at `speed` flops per second (none for a call without flops; a
/// server without speed takes as long as a float can say).
fn seconds_at(flops: f64, speed: f64) -> f64 {
    if flops == 0.0 {
        0.0
    } else {
        flops / speed.max(f64::MIN_POSITIVE)
    }
}

#[derive(Debug, Clone, Copy)]
struct Placement {
    server: ServerId,
    processors: u32,
    /// Where its timeline keeps it.
    start: f64,
    active: bool,
    /// Set for a transfer: the path it uses (it occupies no server).
    path: Option<(Location, Location)>,
}

/// Transfers recorded on each path.
type PathBookings =
    HashMap<(Location, Location), Timeline, std::hash::BuildHasherDefault<PairHasher>>;

/// The paper's predictor: measured load plus the record of placements.
#[derive(Debug, Clone)]
pub struct LoadPredictor {
    flops_per_processor: Vec<f64>,
    processors: Vec<u32>,
    base_load: Vec<f64>,
    links: LinkTable,
    /// Each server's site and the paths between sites, for the paths that have no samples
    /// of their own (see [`History::site_links`]).
    sites: Vec<u32>,
    site_links: HashMap<(Site, Site), Link>,
    default_link: Link,
    placements: Vec<Placement>,
    /// Each server's active placements, by start.
    by_server: Vec<Timeline>,
    /// Active transfers by directed path.
    by_path: PathBookings,
    /// Learned factors on routines' compute times, by server and routine (see
    /// [`crate::calibration`]); empty until told.
    compute_factors: Vec<HashMap<String, Factor>>,
    /// Learned seconds every call costs beyond compute and transfers, by server.
    call_overheads: Vec<Overhead>,
    /// Each server's gang slot length (seconds; 0 when unknown): see
    /// [`LoadPredictor::slot_wait`].
    quanta: Vec<f64>,
    /// When each server must have finished its tasks (its batch job's end less a margin,
    /// in the schedule's time); infinite for a server without an end. See
    /// [`LoadPredictor::set_deadline`].
    deadlines: Vec<f64>,
}

/// Seconds added to the compute time of a task predicted to end past its server's deadline:
/// more than any schedule takes, so that every scheduler, minimising predicted finishes,
/// places it elsewhere when it can, and finite, so that their sums and differences stay
/// numbers. A schedule with such a task is one the grid cannot run now.
pub const PAST_DEADLINE_SECONDS: f64 = 1e9;

/// How the predictor turns monitoring history into the present state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredictorKind {
    /// The latest sample of every series (the seed's predictor).
    LatestSample,
    /// The NWS-style forecaster over each series.
    Forecast,
    /// Load as [`PredictorKind::Forecast`]; each path at its capacity, read from the
    /// least-queued of its last [`CAPACITY_WINDOW`] samples: the one with the lowest
    /// latency. The model shares a path among the transfers it knows of, so it wants what
    /// the path carries alone. A probe that ran while the grid's own transfers used the path
    /// reads less than that, and planning on it would count the sharing twice (or for 30 s
    /// of graphs that no longer share anything). Its empty round trips queue behind those
    /// transfers too, so its latency says which samples were disturbed; the highest
    /// throughput would not do, since subtracting an inflated latency inflates it.
    Capacity,
}

/// Samples of a path that [`PredictorKind::Capacity`] looks back over.
pub const CAPACITY_WINDOW: usize = 8;

impl std::str::FromStr for PredictorKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latest" | "paper" => Ok(PredictorKind::LatestSample),
            "forecast" | "nws" => Ok(PredictorKind::Forecast),
            "capacity" => Ok(PredictorKind::Capacity),
            other => Err(format!(
                "unknown predictor `{other}` (known: latest, forecast, capacity)"
            )),
        }
    }
}

/// Monitoring history for one predictor build: load samples per server (oldest first) and
/// link samples per directed pair (oldest first), and, for the pairs with none, the samples
/// between their sites.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub load: Vec<Vec<f64>>,
    pub links: HashMap<(Location, Location), Vec<Link>>,
    /// Each server's site, by server index; empty when no sites are known.
    pub sites: Vec<u32>,
    /// Samples of any path from a place of one site to a place of another (or the same),
    /// by (from site, to site), oldest first.
    pub site_links: HashMap<(Site, Site), Vec<Link>>,
}

impl LoadPredictor {
    /// A predictor from present load and link figures.
    pub fn new(
        grid: &GridView,
        base_load: Vec<f64>,
        links: HashMap<(Location, Location), Link>,
        default_link: Link,
    ) -> LoadPredictor {
        let n = grid.servers.len();
        let mut base_load = base_load;
        base_load.resize(n, 0.0);
        LoadPredictor {
            flops_per_processor: grid.servers.iter().map(|s| s.flops_per_processor).collect(),
            processors: grid.servers.iter().map(|s| s.processors.max(1)).collect(),
            base_load: base_load
                .into_iter()
                .map(|l| if l.is_finite() { l.max(0.0) } else { 0.0 })
                .collect(),
            links: links.into_iter().collect(),
            sites: Vec::new(),
            site_links: HashMap::new(),
            default_link,
            placements: Vec::new(),
            by_server: vec![Timeline::default(); n],
            by_path: PathBookings::default(),
            compute_factors: vec![HashMap::new(); n],
            call_overheads: vec![Overhead::default(); n],
            quanta: vec![0.0; n],
            deadlines: vec![f64::INFINITY; n],
        }
    }

    /// Tells the predictor the length of `server`'s gang slots (seconds), which the server
    /// registered; without it a call is never predicted to wait for a slot.
    /// The time by which `server` must have finished every task (its batch job ends):
    /// a task predicted to end later costs [`PAST_DEADLINE_SECONDS`] more, which no
    /// scheduler chooses while another server can take it.
    pub fn set_deadline(&mut self, server: ServerId, at: f64) {
        if let Some(d) = self.deadlines.get_mut(server) {
            *d = if at.is_nan() { f64::INFINITY } else { at };
        }
    }

    /// The deadline [`LoadPredictor::set_deadline`] gave `server`.
    pub fn deadline(&self, server: ServerId) -> f64 {
        self.deadlines.get(server).copied().unwrap_or(f64::INFINITY)
    }

    pub fn set_quantum(&mut self, server: ServerId, seconds: f64) {
        if let Some(q) = self.quanta.get_mut(server) {
            *q = if seconds.is_finite() {
                seconds.max(0.0)
            } else {
                0.0
            };
        }
    }

    /// How long a call needing `processors` that reaches `server` at `at` waits for its
    /// first slot. A gang server with no processor free runs the slot in progress to its
    /// end, and a job shorter than a quantum ends within its slot: the newcomer waits for
    /// the placement under way that ends first, or half a quantum (the slot's expected rest)
    /// if that is sooner. Sharing the processors, as [`LoadPredictor::stretch`] models them,
    /// would have a 2 ms `dgesl` behind a 45 ms LU take 4 ms; it takes 45.
    pub fn slot_wait(&self, server: ServerId, processors: u32, at: f64) -> f64 {
        self.slot_wait_among(server, processors, at, self.load_at(server, at))
    }

    /// [`LoadPredictor::slot_wait`] with the load at `at` already counted: every prediction
    /// needs it, and counting it is a pass over the server's timeline.
    fn slot_wait_among(&self, server: ServerId, processors: u32, at: f64, load: f64) -> f64 {
        let (Some(&quantum), Some(&total)) = (self.quanta.get(server), self.processors.get(server))
        else {
            return 0.0;
        };
        let demand = load + f64::from(processors.max(1));
        if quantum <= 0.0 || demand <= f64::from(total) {
            return 0.0;
        }
        self.by_server
            .get(server)
            .and_then(|timeline| timeline.first_end_after(at))
            .map_or(0.0, |end| (end - at).min(quantum / 2.0))
    }

    /// Tells the predictor what calls on `server` cost beyond its model: a factor on each
    /// listed routine's compute time, and what every call costs beside its compute.
    pub fn calibrate(
        &mut self,
        server: ServerId,
        factors: HashMap<String, Factor>,
        overhead: Overhead,
    ) {
        let seconds = |s: f64| if s.is_finite() { s.max(0.0) } else { 0.0 };
        if let (Some(f), Some(o)) = (
            self.compute_factors.get_mut(server),
            self.call_overheads.get_mut(server),
        ) {
            *f = factors;
            *o = Overhead {
                fixed: seconds(overhead.fixed),
                shared: seconds(overhead.shared),
            };
        }
    }

    fn call_overhead(&self, server: ServerId) -> Overhead {
        self.call_overheads.get(server).copied().unwrap_or_default()
    }

    fn compute_factor(&self, server: ServerId, task: &Task) -> Option<&Factor> {
        self.compute_factors
            .get(server)
            .and_then(|f| f.get(task.function.as_str()))
    }

    /// A predictor from monitoring history, summarised by `kind`.
    pub fn from_history(
        grid: &GridView,
        history: &History,
        kind: PredictorKind,
        default_link: Link,
    ) -> LoadPredictor {
        let summarise = |series: &[f64]| -> Option<f64> {
            match kind {
                PredictorKind::LatestSample => series.last().copied(),
                PredictorKind::Forecast | PredictorKind::Capacity => {
                    Forecaster::from_series(series).forecast()
                }
            }
        };
        // The recent sample with the lowest latency (the faster of equals).
        let least_queued = |samples: &[Link]| -> Option<Link> {
            let start = samples.len().saturating_sub(CAPACITY_WINDOW);
            samples[start..]
                .iter()
                .copied()
                .filter(|l| l.latency.is_finite() && l.throughput.is_finite())
                .reduce(|best, l| {
                    let lower = l.latency.total_cmp(&best.latency);
                    if lower.is_lt() || (lower.is_eq() && l.throughput > best.throughput) {
                        l
                    } else {
                        best
                    }
                })
        };
        let load = (0..grid.servers.len())
            .map(|i| {
                history
                    .load
                    .get(i)
                    .and_then(|s| summarise(s))
                    .unwrap_or(0.0)
            })
            .collect();
        let summarise_links = |samples: &[Link]| -> Option<Link> {
            let throughput: Vec<f64> = samples.iter().map(|l| l.throughput).collect();
            let latency: Vec<f64> = samples.iter().map(|l| l.latency).collect();
            match kind {
                PredictorKind::Capacity => least_queued(samples),
                _ => Some(Link {
                    throughput: summarise(&throughput)?,
                    latency: summarise(&latency)?,
                }),
            }
        };
        let links = history
            .links
            .iter()
            .filter_map(|(&pair, samples)| Some((pair, summarise_links(samples)?)))
            .collect();
        let mut predictor = LoadPredictor::new(grid, load, links, default_link);
        predictor.sites = history.sites.clone();
        predictor.site_links = history
            .site_links
            .iter()
            .filter_map(|(&pair, samples)| Some((pair, summarise_links(samples)?)))
            .collect();
        predictor
    }

    /// The estimate of a path without samples of its own: the samples between its ends'
    /// sites, either way.
    fn between_sites(&self, from: Location, to: Location) -> Option<Link> {
        let (a, b) = (self.site_of(from)?, self.site_of(to)?);
        self.site_links
            .get(&(a, b))
            .or_else(|| self.site_links.get(&(b, a)))
            .copied()
    }

    fn site_of(&self, place: Location) -> Option<Site> {
        match place {
            Location::Client => Some(Site::Client),
            Location::Server(i) => self.sites.get(i).map(|&s| Site::Servers(s)),
        }
    }

    /// Load on `server` at time `at`: measured load plus active placements.
    pub fn load_at(&self, server: ServerId, at: f64) -> f64 {
        let placed = self.by_server.get(server).map_or(0, |t| t.weight_at(at));
        self.base_load.get(server).copied().unwrap_or(0.0) + f64::from(placed)
    }

    /// Takes `jobs` out of a server's measured load (never below zero): jobs the caller knows
    /// better than the sample did, because they have ended or are recorded as placements.
    pub fn discount_load(&mut self, server: ServerId, jobs: f64) {
        if let Some(load) = self.base_load.get_mut(server) {
            *load = (*load - jobs).max(0.0);
        }
    }

    /// Flops per second a task needing `processors` gets on `server` with nothing else there.
    pub fn idle_speed(&self, server: ServerId, processors: u32) -> f64 {
        match (
            self.flops_per_processor.get(server),
            self.processors.get(server),
        ) {
            (Some(&s), Some(&total)) => idle_speed(s, total, processors),
            _ => 0.0,
        }
    }

    fn base_load_of(&self, server: ServerId) -> f64 {
        self.base_load.get(server).copied().unwrap_or(0.0)
    }

    /// The share of its processors a task needing `processors` gets among `load` other jobs
    /// (1 when there is room for it; 0 for an unknown server).
    fn share_with(&self, server: ServerId, processors: u32, load: f64) -> f64 {
        let Some(&total) = self.processors.get(server) else {
            return 0.0;
        };
        (f64::from(total) / (load + f64::from(processors.max(1)))).min(1.0)
    }

    /// How many times longer than alone a call needing `processors` takes on `server` from
    /// `at` (at least 1): the load divides the processors among all the demand.
    pub fn stretch(&self, server: ServerId, processors: u32, at: f64) -> f64 {
        self.stretch_among(server, processors, self.load_at(server, at))
    }

    fn stretch_among(&self, server: ServerId, processors: u32, load: f64) -> f64 {
        1.0 / self
            .share_with(server, processors, load)
            .max(f64::MIN_POSITIVE)
    }

    /// A call of `task` on `server` among `load` other jobs, after waiting `wait` for its
    /// first slot ([`LoadPredictor::slot_wait`]): shared with the others, or run alone after
    /// the wait, whichever is longer.
    fn time_among(&self, server: ServerId, task: &Task, load: f64, wait: f64) -> f64 {
        let modelled = seconds_at(task.flops, self.idle_speed(server, task.processors));
        let alone = self
            .compute_factor(server, task)
            .map_or(modelled, |f| f.alone(modelled));
        let overhead = self.call_overhead(server);
        let stretch = self.stretch_among(server, task.processors, load);
        (alone * stretch).max(wait + alone) + overhead.at(stretch)
    }

    /// Transfers recorded on the path from `from` to `to` that are moving at `at`.
    pub fn transfers_at(&self, from: Location, to: Location, at: f64) -> usize {
        self.by_path
            .get(&(from, to))
            .map_or(0, |transfers| transfers.count_at(at))
    }
}

impl Predictor for LoadPredictor {
    fn speed(&self, server: ServerId, processors: u32, at: f64) -> f64 {
        self.idle_speed(server, processors)
            * self.share_with(server, processors, self.load_at(server, at))
    }

    /// The speed with only the measured load: placements can only add to it.
    fn peak_speed(&self, server: ServerId, processors: u32) -> f64 {
        self.idle_speed(server, processors)
            * self.share_with(server, processors, self.base_load_of(server))
    }

    /// The call's compute and the part of its overhead that waits for the server's
    /// processors stretch with the server's load; the rest of the overhead (the RPC's
    /// latency) does not ([`crate::calibration::Overhead`]). A call that finds every
    /// processor busy may wait longer than sharing them would take
    /// ([`LoadPredictor::slot_wait`]).
    fn compute_time(&self, server: ServerId, task: &Task, at: f64) -> f64 {
        let load = self.load_at(server, at);
        let wait = self.slot_wait_among(server, task.processors, at, load);
        let time = self.time_among(server, task, load, wait);
        if at + time > self.deadline(server) {
            time + PAST_DEADLINE_SECONDS
        } else {
            time
        }
    }

    /// [`LoadPredictor::time_among`] at the measured load, as a line in the flops.
    fn least_compute_line(&self, server: ServerId, task: &Task) -> (f64, f64) {
        // The factor depends on the call's size: the least of them bounds every size.
        let overhead = self.call_overhead(server);
        let factor = self
            .compute_factor(server, task)
            .map(Factor::least)
            .filter(|f| f.is_finite() && *f > 0.0)
            .unwrap_or(1.0);
        let stretch = self.stretch_among(server, task.processors, self.base_load_of(server));
        let speed = self
            .idle_speed(server, task.processors)
            .max(f64::MIN_POSITIVE);
        (factor * stretch / speed, overhead.at(stretch))
    }

    fn link(&self, from: Location, to: Location) -> Link {
        if from == to {
            return Link {
                throughput: f64::INFINITY,
                latency: 0.0,
            };
        }
        if let Some(measured) = self
            .links
            .get(&(from, to))
            .or_else(|| self.links.get(&(to, from)))
        {
            return *measured;
        }
        self.between_sites(from, to).unwrap_or(self.default_link)
    }

    /// Transfers that start together share the path equally: a move starting while k others
    /// are recorded on the path gets 1/(k+1) of its throughput for its whole length. For k
    /// equal moves started together the last is predicted to end when all of them actually
    /// end; the first ones are predicted early.
    fn transfer_time(&self, from: Location, to: Location, bytes: u64, at: f64) -> f64 {
        if bytes == 0 || from == to {
            return 0.0;
        }
        let link = self.link(from, to);
        let sharing = self.transfers_at(from, to, at) as f64 + 1.0;
        link.latency + bytes as f64 * sharing / link.throughput.max(f64::MIN_POSITIVE)
    }

    fn place_transfer(
        &mut self,
        from: Location,
        to: Location,
        start: f64,
        finish: f64,
    ) -> Option<PlacementId> {
        if from == to || finish.partial_cmp(&start) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        let id = self.placements.len();
        self.placements.push(Placement {
            server: usize::MAX,
            processors: 0,
            start,
            active: true,
            path: Some((from, to)),
        });
        self.by_path
            .entry((from, to))
            .or_default()
            .insert(id, start, finish, 1);
        Some(id)
    }

    fn place(&mut self, server: ServerId, processors: u32, start: f64, finish: f64) -> PlacementId {
        let id = self.placements.len();
        let placement = Placement {
            server,
            processors: processors.max(1),
            start,
            active: true,
            path: None,
        };
        self.placements.push(placement);
        if let Some(timeline) = self.by_server.get_mut(server) {
            timeline.insert(id, start, finish, placement.processors);
        }
        id
    }

    fn fork(&self) -> Box<dyn Predictor> {
        Box::new(self.clone())
    }

    fn withdraw(&mut self, placement: PlacementId) {
        if let Some(p) = self.placements.get_mut(placement) {
            p.active = false;
            if let Some(path) = p.path {
                if let Some(transfers) = self.by_path.get_mut(&path) {
                    transfers.remove(placement, p.start);
                }
            } else if let Some(timeline) = self.by_server.get_mut(p.server) {
                timeline.remove(placement, p.start);
            }
        }
    }
}
