//! Scheduling one graph against the registry (the metaserver paper step 5): build the predictor from the
//! monitoring history and the placements still running, run the configured scheduler, and
//! remember the new placements so the next graph sees those servers as busier. Pure: the
//! time is a parameter.
//!
//! A load sample counts every job running when it was taken, including this metaserver's
//! own placements. Those are known better than the sample knows them: a graph that has
//! ended since no longer loads its servers, and a running graph's placements are entered
//! into the predictor with their own times. So the jobs of known placements that were
//! running at the sample's time are taken out of the measured load before the predictor
//! adds back those still running; the sample keeps only the load nobody here placed.
//!
//! Each finished graph also teaches the predictor what its model missed: how much slower or
//! faster each routine ran than the model said, and what every call cost beyond its compute
//! and transfers ([`ninf_scheduling::calibration`]), and what a graph of its shape took under
//! the load it met ([`ninf_scheduling::templates`]): once like graphs have run, what the
//! planner reports it expects of a graph comes from them, the placement from the model.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use ninf_scheduling::calibration::{Calibration, Factor, OVERHEAD_WINDOW, Observation, Overhead};
use ninf_scheduling::predictor::modelled_seconds;
use ninf_scheduling::templates::{Expected, GraphTemplates, TemplateKey};
use ninf_scheduling::{
    GraphError, Link, LoadPredictor, Predictor, PredictorKind, Schedule, Scheduler, TaskGraph,
};

use crate::registry::Registry;

/// A placement the metaserver made that may still be running (absolute Unix seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct ActivePlacement {
    pub graph: u64,
    pub task: usize,
    /// Shared, not owned: every graph's planning copies the placements still counted, a
    /// few thousand under load, and copying two strings each was more than half of that copy.
    pub server: Arc<str>,
    pub processors: u32,
    pub start: f64,
    pub finish: f64,
    /// When the graph was placed: its tasks' actual times count from here.
    pub placed_at: f64,
    pub function: Arc<str>,
    /// The model's compute time for the call on the server alone, before calibration
    /// (seconds).
    pub modelled_compute: f64,
    /// How many times longer than alone the prediction had the call take for the load it
    /// saw on the server.
    pub predicted_stretch: f64,
    /// Seconds the prediction gave its inputs to arrive after the call could be issued.
    pub predicted_transfer: f64,
    /// The prediction knew how long the call runs: from the model's flops, or a running
    /// time learned for a routine the model gives none.
    pub running_known: bool,
}

impl ActivePlacement {
    /// When the placement runs as far as the metaserver knows at `now`: as predicted, or,
    /// once its predicted end has passed while its graph still runs, from `now` for as long
    /// as it was predicted to take. Under load a graph runs past its prediction, and its
    /// calls are still the servers' work: dropped at their predicted end, they would leave
    /// the predictor blind to the very queue it is asked about.
    pub fn still_running(&self, now: f64) -> (f64, f64) {
        if self.finish > now {
            (self.start, self.finish)
        } else {
            (now, now + (self.finish - self.start))
        }
    }

    /// Whether at `t` the placement is [`OVERDUE_SECONDS`] past its predicted end, and
    /// taken to belong to a graph nobody will report.
    pub fn abandoned_at(&self, t: f64) -> bool {
        self.finish + OVERDUE_SECONDS <= t
    }
}

/// How long past its predicted end a placement still counts while its graph has not been
/// reported ended (seconds): a proxy that dies never reports it.
pub const OVERDUE_SECONDS: f64 = ENDED_MEMORY_SECONDS;

/// What a proxy reported of one finished task: (start, finish) in seconds from the graph's
/// start, and the server's account of its computing and of its wait for processors.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TaskOutcome {
    pub task: usize,
    pub start: f64,
    pub finish: f64,
    pub compute_seconds: f64,
    pub queue_seconds: f64,
    /// The part of its compute the call's job stood stopped (`CallTiming.stopped_seconds`).
    pub stopped_seconds: f64,
    /// The server ran it on an executable cold for it (`CallTiming.cold`).
    pub cold: bool,
    /// The threads it computed with (`CallTiming.threads`).
    pub threads: u32,
}

/// How long the placements of ended graphs are kept, at least, to correct load samples taken
/// while they ran. A server that is up sent its sample within `heartbeat_timeout_seconds`
/// (default 5), so this is generous. It was 300 s, and every placement scans them for every
/// server: under `ninf load` (100 clients, 6,000 transactions) the metaserver grew to
/// 46-49 MiB and the grid ran 82-96 transactions/s; with 30 s, 33 MiB and 116-124/s.
pub const ENDED_MEMORY_SECONDS: f64 = 30.0;

/// The placements of ended graphs, each server's in the order their graphs were reported
/// ended. A placement ends at or before its report, so those reported before a time `t` all
/// ended before it: a planning that wants a server's placements running after `t` skips the
/// others by a binary search instead of a scan. Under `ninf load` 30 s held about 60,000
/// placements, and scanning them for every graph, and again for every report, was a tenth of
/// the metaserver's time; kept by server, a graph planned on 40 of 10,000 servers reads
/// those 40 servers' alone.
#[derive(Debug, Clone, Default)]
struct EndedPlacements {
    /// Each server's: (when its graph was reported ended, never decreasing; the placement).
    by_server: HashMap<Arc<str>, VecDeque<(f64, ActivePlacement)>>,
    /// Every placement's server, in report order: the oldest are forgotten first.
    order: VecDeque<(f64, Arc<str>)>,
}

impl EndedPlacements {
    /// Keeps `placement`, of a graph reported ended at `now`.
    fn push(&mut self, now: f64, placement: ActivePlacement) {
        // Never decreasing, even if the wall clock steps back, so the binary search holds.
        let at = self.order.back().map_or(now, |(last, _)| now.max(*last));
        let server = placement.server.clone();
        self.by_server
            .entry(server.clone())
            .or_default()
            .push_back((at, placement));
        self.order.push_back((at, server));
    }

    /// The entries of `server`'s placements still running after `t`.
    fn entries_on_after<'a>(
        &'a self,
        server: &str,
        t: f64,
    ) -> impl Iterator<Item = &'a (f64, ActivePlacement)> {
        self.by_server.get(server).into_iter().flat_map(move |q| {
            let first = q.partition_point(|(at, _)| *at <= t);
            q.range(first..).filter(move |(_, p)| t < p.finish)
        })
    }

    /// `server`'s placements still running after `t`.
    fn running_on_after<'a>(
        &'a self,
        server: &str,
        t: f64,
    ) -> impl Iterator<Item = &'a ActivePlacement> {
        self.entries_on_after(server, t).map(|(_, p)| p)
    }

    /// A copy of the placements still running after the time given with their server, of
    /// those servers alone: for a planning that asks about no other server, nor earlier.
    fn copy_for<'s>(&self, servers: impl Iterator<Item = (&'s str, f64)>) -> EndedPlacements {
        let mut copy = EndedPlacements::default();
        let mut order = Vec::new();
        for (server, t) in servers {
            let Some(name) = self.by_server.get_key_value(server).map(|(k, _)| k) else {
                continue;
            };
            let kept: VecDeque<(f64, ActivePlacement)> =
                self.entries_on_after(server, t).cloned().collect();
            if !kept.is_empty() {
                order.extend(kept.iter().map(|(at, _)| (*at, name.clone())));
                copy.by_server.insert(name.clone(), kept);
            }
        }
        // Stable: each server's entries keep their order.
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        copy.order = order.into();
        copy
    }

    /// Forgets the placements of graphs reported ended by `t` (they ended by then too).
    fn forget_reported_by(&mut self, t: f64) {
        while self.order.front().is_some_and(|(at, _)| *at <= t) {
            let Some((_, server)) = self.order.pop_front() else {
                break;
            };
            if let Some(q) = self.by_server.get_mut(&server) {
                q.pop_front();
                if q.is_empty() {
                    self.by_server.remove(&server);
                }
            }
        }
    }

    /// Every placement kept, in report order.
    fn all(&self) -> impl Iterator<Item = &ActivePlacement> {
        let mut next: HashMap<&str, usize> = HashMap::new();
        self.order.iter().filter_map(move |(_, server)| {
            let k = next.entry(server).or_default();
            let placement = self.by_server.get(server)?.get(*k).map(|(_, p)| p);
            *k += 1;
            placement
        })
    }
}

/// A graph placed and not yet reported: its template, and what the model gave it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct InFlight {
    key: TemplateKey,
    tasks: usize,
    /// The model's makespan (seconds).
    modelled: f64,
    /// When the model has it end (absolute), counted from when it was planned
    /// ([`Planner::file_under`]) or else recorded. Past it the graph no longer counts as
    /// load ([`Planner::graphs_in_flight`]); this far past it ([`OVERDUE_SECONDS`]) it is
    /// taken to be one nobody will report.
    ends: f64,
}

/// Of the graphs `in_flight`, those that count as load at `now` (see
/// [`Planner::graphs_in_flight`]).
fn counted_at(in_flight: &HashMap<u64, InFlight>, now: f64) -> usize {
    in_flight.values().filter(|g| g.ends > now).count()
}

/// The record of placements made, feeding the predictor.
#[derive(Debug, Clone)]
pub struct Planner {
    pub predictor: PredictorKind,
    /// Assumed for paths nobody has measured yet.
    pub default_link: Link,
    active: Vec<ActivePlacement>,
    /// Placements of graphs that have ended, with their actual times.
    ended: EndedPlacements,
    /// Whether predictions use what finished graphs taught ([`Planner::calibration`]).
    pub calibrate: bool,
    /// How long ended graphs' placements are kept (seconds): at least
    /// [`ENDED_MEMORY_SECONDS`], longer when samples may be older.
    pub ended_memory_seconds: f64,
    /// Shared with the copies graphs are planned with, and copied only when a finished
    /// graph teaches it while one is out: at 10,000 servers it held figures for thousands
    /// of them, and copying it for every graph was most of a planning's copy (10-17 ms).
    calibration: Arc<Calibration>,
    /// Seconds before its batch job's end by which a server's tasks must be predicted to
    /// end (`[allocation] walltime_margin_seconds`).
    pub walltime_margin: f64,
    /// Whether what the planner expects of a graph comes from like graphs once they have
    /// run ([`Planner::expect`]; the configuration's `templates`).
    pub templates_on: bool,
    /// How long a call must be alone for its graph's calls to take turns on its server
    /// (the configuration's `turns_min_seconds`, [`crate::turns`]).
    pub turns_min_seconds: f64,
    /// Shared with the copies graphs are planned with, as the calibration is.
    templates: Arc<GraphTemplates>,
    in_flight: Arc<HashMap<u64, InFlight>>,
}

impl Planner {
    pub fn new(predictor: PredictorKind, default_link: Link) -> Planner {
        Planner {
            predictor,
            default_link,
            active: Vec::new(),
            ended: EndedPlacements::default(),
            calibrate: true,
            ended_memory_seconds: ENDED_MEMORY_SECONDS,
            calibration: Arc::default(),
            walltime_margin: 0.0,
            templates_on: true,
            turns_min_seconds: f64::INFINITY,
            templates: Arc::default(),
            in_flight: Arc::default(),
        }
    }

    /// What finished graphs have taught so far.
    pub fn calibration(&self) -> &Calibration {
        &self.calibration
    }

    /// A copy to plan with at `now` off the state's lock: the same placements as from
    /// `self`, but of the ended graphs' placements only those that can correct the present
    /// load sample of a server that is up (ended after it was taken). Under `ninf load` a
    /// whole copy held 30 s of them, about 35,000 placements, and copying them for every
    /// graph was most of the metaserver's time. A server that is down gets no task, and its
    /// last sample, however old, must not bring the whole copy back. Only the placements on
    /// `registry`'s servers are copied, the only ones its planning reads: at 10,000 servers a
    /// graph is planned on a shortlist of about 40, and the 5 s before their samples held
    /// some 7,000 ended placements on all the others.
    pub fn for_planning(&self, registry: &Registry, now: f64) -> Planner {
        let sampled = registry
            .servers()
            .iter()
            .filter(|s| registry.is_up(s, now))
            .filter_map(|s| Some((s.address.as_str(), s.load_sampled_at?)));
        let listed = |p: &ActivePlacement| registry.index_of(&p.server).is_some();
        Planner {
            predictor: self.predictor,
            default_link: self.default_link,
            active: self.active.iter().filter(|p| listed(p)).cloned().collect(),
            ended: self.ended.copy_for(sampled),
            calibrate: self.calibrate,
            ended_memory_seconds: self.ended_memory_seconds,
            calibration: Arc::clone(&self.calibration),
            walltime_margin: self.walltime_margin,
            templates_on: self.templates_on,
            turns_min_seconds: self.turns_min_seconds,
            templates: Arc::clone(&self.templates),
            in_flight: Arc::clone(&self.in_flight),
        }
    }

    /// The template of `graph` planned at `now`: its shape, and the graphs in flight then
    /// ([`Planner::graphs_in_flight`]).
    pub fn template_of(&self, graph: &TaskGraph, now: f64) -> TemplateKey {
        TemplateKey::of(graph, self.graphs_in_flight(now))
    }

    /// What like graphs of template `key` expect of a graph placed as `schedule`
    /// ([`GraphTemplates::expect`]); `None` where the model's prediction stands.
    pub fn expect(&self, key: TemplateKey, schedule: &Schedule) -> Option<Expected> {
        if !self.templates_on {
            return None;
        }
        self.templates.expect(key, schedule)
    }

    /// Files graph `graph_id`, just recorded, under template `key`, the one its plan at
    /// `planned_at` was expected from, rather than the one its recording saw: graphs
    /// placed or reported while it was planned must not move it to another band than it
    /// was expected in. Its model's end is counted from `planned_at` too, as the graphs'
    /// spans are (`graphs.created`).
    pub fn file_under(&mut self, graph_id: u64, key: TemplateKey, planned_at: f64) {
        if let Some(graph) = Arc::make_mut(&mut self.in_flight).get_mut(&graph_id) {
            graph.key = key;
            graph.ends = planned_at + graph.modelled;
        }
    }

    /// Graphs placed, not yet reported, and not past the end the model gave them, at
    /// `now`: the load a graph placed now meets. A graph's report comes after it has
    /// ended, by 7 ms (median) under `ninf load --clients 30`, where the median graph runs
    /// 14 ms; counted until their reports, graphs long over weighed as load, and the
    /// predictions from like graphs were 0-6 points worse per graph
    /// (docs/notes/2026-12-06-the-load-a-graph-meets.md).
    pub fn graphs_in_flight(&self, now: f64) -> usize {
        counted_at(&self.in_flight, now)
    }

    /// Teaches the template of graph `graph_id`, which ended after `makespan` seconds with
    /// `outcomes`: call it for a graph that succeeded, before [`Planner::finish`].
    pub fn teach_template(&mut self, graph_id: u64, makespan: f64, outcomes: &[TaskOutcome]) {
        let Some((key, tasks, modelled)) = self
            .in_flight
            .get(&graph_id)
            .map(|g| (g.key, g.tasks, g.modelled))
        else {
            return;
        };
        let mut finishes = vec![None; tasks];
        for o in outcomes {
            if let Some(slot) = finishes.get_mut(o.task) {
                *slot = Some(o.finish);
            }
        }
        Arc::make_mut(&mut self.templates).observe(key, modelled, makespan, &finishes);
    }

    /// Places `graph` with `scheduler` as of `now`. `client_links` are the proxy's
    /// measurements (server address, sample), oldest first.
    pub fn plan(
        &self,
        registry: &Registry,
        graph: &TaskGraph,
        client_links: &[(String, Link)],
        scheduler: &mut dyn Scheduler,
        now: f64,
    ) -> Result<Schedule, GraphError> {
        self.plan_avoiding(registry, graph, client_links, &[], scheduler, now)
    }

    /// [`Planner::plan`], placing around the servers in `avoid` (by address) when the
    /// graph can run without them ([`ninf_scheduling::GridView::avoiding`]).
    pub fn plan_avoiding(
        &self,
        registry: &Registry,
        graph: &TaskGraph,
        client_links: &[(String, Link)],
        avoid: &[String],
        scheduler: &mut dyn Scheduler,
        now: f64,
    ) -> Result<Schedule, GraphError> {
        let grid = registry.grid_view(now).avoiding(avoid, graph);
        let history = registry.history(client_links);
        let mut predictor =
            LoadPredictor::from_history(&grid, &history, self.predictor, self.default_link);
        for (index, deadline) in registry
            .deadlines(now, self.walltime_margin)
            .into_iter()
            .enumerate()
        {
            if let Some(deadline) = deadline {
                predictor.set_deadline(index, deadline);
            }
        }
        for (index, server) in registry.servers().iter().enumerate() {
            predictor.set_quantum(index, server.info.quantum_seconds);
            if let Some(sampled) = server.load_sampled_at {
                // A running graph's placements count as running from their start on, as
                // the predictor counts them ([`ActivePlacement::still_running`]).
                let running = self
                    .active
                    .iter()
                    .filter(|p| *p.server == *server.address && !p.abandoned_at(sampled));
                let ended = self.ended.running_on_after(&server.address, sampled);
                let known: u32 = running
                    .chain(ended)
                    .filter(|p| p.start <= sampled)
                    .map(|p| p.processors)
                    .sum();
                predictor.discount_load(index, f64::from(known));
            }
        }
        if self.calibrate {
            for (index, server) in registry.servers().iter().enumerate() {
                let factors = self.calibration.factors(&server.address);
                let overhead = self.calibration.overhead(&server.address);
                tracing::debug!(
                    server = %server.address,
                    mflops = server.info.mflops,
                    load = predictor.load_at(index, 0.0),
                    factors = ?factors,
                    overhead = ?overhead,
                    "server as the planner sees it"
                );
                predictor.calibrate(index, factors, overhead);
            }
        }
        for p in self.active.iter().filter(|p| !p.abandoned_at(now)) {
            if let Some(server) = registry.index_of(&p.server) {
                let (start, finish) = p.still_running(now);
                predictor.place(server, p.processors, start - now, finish - now);
            }
        }
        scheduler.schedule(graph, &grid, &mut predictor)
    }

    /// Remembers a graph's placements (scheduled at `now`).
    pub fn record(
        &mut self,
        graph_id: u64,
        graph: &TaskGraph,
        schedule: &Schedule,
        registry: &Registry,
        now: f64,
    ) {
        let in_flight = Arc::make_mut(&mut self.in_flight);
        in_flight.retain(|_, g| g.ends + OVERDUE_SECONDS > now);
        let graph_in_flight = InFlight {
            key: TemplateKey::of(graph, counted_at(in_flight, now)),
            tasks: graph.tasks.len(),
            modelled: schedule.makespan,
            ends: now + schedule.makespan,
        };
        in_flight.insert(graph_id, graph_in_flight);
        let servers = registry.servers();
        let issued = issue_times(graph, schedule);
        // Each server's figures, resolved once for the graph rather than once per task.
        let mut calibrations: HashMap<usize, (HashMap<String, Factor>, Overhead)> = HashMap::new();
        let mut names: HashMap<usize, Arc<str>> = HashMap::new();
        for (task, (&server, timing)) in schedule.servers.iter().zip(&schedule.timings).enumerate()
        {
            let (Some(entry), Some(t)) = (servers.get(server), graph.tasks.get(task)) else {
                continue;
            };
            // Undo the calibration the prediction used, to learn against the model itself.
            let modelled = modelled_seconds(
                t,
                registry.flops_per_processor(entry),
                entry.info.processors.max(1),
            );
            let (alone, overhead) = if self.calibrate {
                let (factors, overhead) = calibrations.entry(server).or_insert_with(|| {
                    (
                        self.calibration.factors(&entry.address),
                        self.calibration.overhead(&entry.address),
                    )
                });
                let alone = factors
                    .get(&t.function)
                    .map_or(modelled, |f| f.alone(modelled));
                (alone, *overhead)
            } else {
                (modelled, Overhead::default())
            };
            // The prediction was (alone + shared overhead) x stretch + fixed overhead, alone
            // being the modelled time times its factor (or, for a routine the model gives no
            // flops, its learned running time): the stretch is what is left of it once the
            // call alone is taken out.
            // A predicted slot wait ([`ninf_scheduling::LoadPredictor::slot_wait`]) comes
            // out as more stretch, which is what the calibration then takes the call to
            // have met.
            let stretched = alone + overhead.shared;
            let stretch = if stretched > 0.0 {
                ((timing.finish - timing.start - overhead.fixed) / stretched).max(1.0)
            } else {
                1.0
            };
            self.active.push(ActivePlacement {
                graph: graph_id,
                task,
                server: Arc::clone(
                    names
                        .entry(server)
                        .or_insert_with(|| entry.address.as_str().into()),
                ),
                processors: t.processors,
                start: now + timing.start,
                finish: now + timing.finish,
                placed_at: now,
                function: t.function.as_str().into(),
                modelled_compute: modelled,
                predicted_stretch: stretch,
                predicted_transfer: (timing.start - issued[task]).max(0.0),
                running_known: alone > 0.0,
            });
        }
    }

    /// Graph `graph_id`'s placements, booked when it was planned, count from `placed`
    /// instead: the graph starts once its proxy has the reply, which waits for its record
    /// to be written. Timed from the plan, its calls were booked on the servers before they
    /// ran, and a server's load sample missed the calls it was running.
    pub fn started_at(&mut self, graph_id: u64, placed: f64) {
        for p in self.active.iter_mut().filter(|p| p.graph == graph_id) {
            let later = (placed - p.placed_at).max(0.0);
            p.start += later;
            p.finish += later;
            p.placed_at += later;
        }
    }

    /// Forgets graph `graph_id`, which was booked and then refused: its placements stop
    /// counting as load, and it teaches nothing.
    pub fn forget(&mut self, graph_id: u64) {
        if self.in_flight.contains_key(&graph_id) {
            Arc::make_mut(&mut self.in_flight).remove(&graph_id);
        }
        self.active.retain(|p| p.graph != graph_id);
    }

    /// A graph has ended at `now`; `actuals` are its tasks' outcomes. Its placements stop
    /// counting as load, and are kept with their actual times (a task without an actual is
    /// taken to have run until `now`) to correct load samples taken while they ran.
    /// Placements [`OVERDUE_SECONDS`] past their predicted end go too (their proxy never
    /// reported their graph). Each task with an outcome teaches the
    /// calibration.
    pub fn finish(&mut self, graph_id: u64, now: f64, actuals: &[TaskOutcome]) {
        if self.in_flight.contains_key(&graph_id) {
            Arc::make_mut(&mut self.in_flight).remove(&graph_id);
        }
        let (ended, active): (Vec<ActivePlacement>, Vec<ActivePlacement>) = self
            .active
            .drain(..)
            .partition(|p| p.graph == graph_id || p.abandoned_at(now));
        self.active = active;
        let by_task: HashMap<usize, &TaskOutcome> =
            actuals.iter().map(|a| (a.task, a)).rev().collect();
        let others_ended = first_server_done(graph_id, &ended, &by_task);
        let started_after = start_lag(graph_id, &ended, actuals, now);
        let teaching = teaching_calls(graph_id, &ended);
        for mut p in ended {
            if p.graph == graph_id {
                match by_task.get(&p.task) {
                    Some(actual) => {
                        if teaching.contains(&p.task) {
                            Arc::make_mut(&mut self.calibration).observe(&Observation {
                                server: p.server.to_string(),
                                function: p.function.to_string(),
                                modelled_compute: p.modelled_compute,
                                predicted_stretch: p.predicted_stretch,
                                predicted_transfer: p.predicted_transfer,
                                actual_call: actual.finish - actual.start,
                                actual_compute: actual.compute_seconds,
                                actual_queue: actual.queue_seconds,
                                actual_stopped: actual.stopped_seconds,
                                cold: actual.cold,
                                threads: actual.threads,
                                after_others_ended: actual.finish > others_ended,
                                running_known: p.running_known,
                            });
                        }
                        p.start = p.placed_at + started_after + actual.start;
                        p.finish = (p.placed_at + started_after + actual.finish).min(now);
                    }
                    None => p.finish = now,
                }
            }
            self.ended.push(now, p);
        }
        self.ended
            .forget_reported_by(now - self.ended_memory_seconds);
    }

    /// Placements still counted.
    pub fn active(&self) -> &[ActivePlacement] {
        &self.active
    }

    /// Placements of ended graphs still kept to correct load samples.
    pub fn ended(&self) -> impl Iterator<Item = &ActivePlacement> {
        self.ended.all()
    }
}

/// How long after its placement was recorded graph `graph_id` started, taking the report to
/// have come as its last call ended: the actuals count from the proxy's start, which waited
/// for the placement's reply and the proxy's journal (1-3 ms under `ninf load`, as long as
/// a graph there). Anchored at the placement instead, a call looked to have run that much
/// earlier than it did, and a server's load sample taken while it ran did not find it
/// among the placements: the predictor saw one to three jobs on a server that held none
/// but the grid's own, for as long as the sample stood.
fn start_lag(graph_id: u64, ended: &[ActivePlacement], actuals: &[TaskOutcome], now: f64) -> f64 {
    let Some(placed_at) = ended
        .iter()
        .find(|p| p.graph == graph_id)
        .map(|p| p.placed_at)
    else {
        return 0.0;
    };
    let last = actuals
        .iter()
        .map(|a| a.finish)
        .filter(|f| f.is_finite())
        .fold(0.0, f64::max);
    (now - placed_at - last).max(0.0)
}

/// The graph's calls that teach the calibration: all of them on a server given at most
/// [`OVERHEAD_WINDOW`] calls, and that many evenly spaced among them on a server given
/// more. The windows keep only the last calls a server taught: of 10,000 tiny calls, those
/// were the calls queued last, all predicted about as stretched as each other, and the
/// overhead's line through them had no slope, so the next graph's queue was predicted at
/// half its length.
fn teaching_calls(graph_id: u64, placements: &[ActivePlacement]) -> HashSet<usize> {
    let mut by_server: HashMap<&str, Vec<usize>> = HashMap::new();
    for p in placements.iter().filter(|p| p.graph == graph_id) {
        by_server.entry(&*p.server).or_default().push(p.task);
    }
    let mut teaching = HashSet::new();
    for tasks in by_server.into_values() {
        let n = tasks.len();
        let window = OVERHEAD_WINDOW.min(n);
        teaching.extend((0..window).map(|k| tasks[k * n / window]));
    }
    teaching
}

/// When the first of a graph's servers had answered all its calls (its last finish, counted
/// from the graph's start); infinite for a graph that ran on one server.
fn first_server_done(
    graph_id: u64,
    placements: &[ActivePlacement],
    actuals: &HashMap<usize, &TaskOutcome>,
) -> f64 {
    let mut last: HashMap<&str, f64> = HashMap::new();
    for p in placements.iter().filter(|p| p.graph == graph_id) {
        if let Some(actual) = actuals.get(&p.task) {
            let latest = last.entry(&*p.server).or_insert(actual.finish);
            *latest = latest.max(actual.finish);
        }
    }
    if last.len() < 2 {
        return f64::INFINITY;
    }
    last.into_values().fold(f64::INFINITY, f64::min)
}

/// When the schedule has each task issued: once its last producer is predicted to finish
/// (at 0 for a task that needs only the client's arrays).
fn issue_times(graph: &TaskGraph, schedule: &Schedule) -> Vec<f64> {
    let mut issued = vec![0.0f64; graph.tasks.len()];
    for edge in &graph.edges {
        if let (Some(slot), Some(producer)) =
            (issued.get_mut(edge.to), schedule.timings.get(edge.from))
        {
            *slot = slot.max(producer.finish);
        }
    }
    issued
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended_at(graph: u64, finish: f64) -> ActivePlacement {
        ActivePlacement {
            graph,
            task: 0,
            server: "a:1".into(),
            processors: 1,
            start: finish - 0.5,
            finish,
            placed_at: finish - 0.5,
            function: "mmul".into(),
            modelled_compute: 0.5,
            predicted_stretch: 1.0,
            predicted_transfer: 0.0,
            running_known: true,
        }
    }

    fn graphs<'a>(placements: impl Iterator<Item = &'a ActivePlacement>) -> Vec<u64> {
        placements.map(|p| p.graph).collect()
    }

    fn ended_on(graph: u64, server: &str, finish: f64) -> ActivePlacement {
        ActivePlacement {
            server: server.into(),
            ..ended_at(graph, finish)
        }
    }

    #[test]
    fn ended_placements_are_found_by_server_and_finish_and_forgotten_by_their_report() {
        let mut ended = EndedPlacements::default();
        // Graph 2 ended before graph 1 but was reported after it; graph 3's report came
        // as the wall clock stepped back, and counts as coming no earlier than graph 2's.
        ended.push(2.0, ended_at(1, 1.9));
        ended.push(4.0, ended_at(2, 1.5));
        ended.push(3.0, ended_at(3, 2.9));
        ended.push(5.0, ended_on(5, "b:1", 4.5));
        ended.push(6.0, ended_at(4, 5.5));
        let on_a = |e: &EndedPlacements, t| graphs(e.running_on_after("a:1", t));
        assert_eq!(on_a(&ended, 0.0), [1, 2, 3, 4]);
        assert_eq!(on_a(&ended, 1.7), [1, 3, 4]);
        assert_eq!(on_a(&ended, 2.0), [3, 4]);
        assert_eq!(on_a(&ended, 5.5), Vec::<u64>::new());
        assert_eq!(graphs(ended.running_on_after("b:1", 0.0)), [5]);
        assert_eq!(
            graphs(ended.running_on_after("c:1", 0.0)),
            Vec::<u64>::new()
        );
        assert_eq!(graphs(ended.all()), [1, 2, 3, 5, 4]);
        // Copies for some servers, each as of its own time: the others' are left out.
        let copy = ended.copy_for([("a:1", 1.7), ("c:1", 0.0)].into_iter());
        assert_eq!(graphs(copy.all()), [1, 3, 4]);
        let copy = ended.copy_for([("b:1", 0.0), ("a:1", 2.0)].into_iter());
        assert_eq!(graphs(copy.all()), [3, 5, 4]);
        assert_eq!(graphs(copy.running_on_after("b:1", 0.0)), [5]);
        ended.forget_reported_by(3.9);
        assert_eq!(graphs(ended.all()), [2, 3, 5, 4]);
        ended.forget_reported_by(5.0);
        assert_eq!(graphs(ended.all()), [4]);
        assert!(ended.running_on_after("b:1", 0.0).next().is_none());
        assert!(
            !ended.by_server.contains_key("b:1"),
            "no empty series is kept"
        );
    }
}
