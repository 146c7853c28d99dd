//! What like graphs took before: the history a prediction leans on where the model cannot
//! see what the time depends on. Smith, Foster and Taylor predicted batch jobs' run times
//! from the jobs of the same "template" that ran before (IPPS 1998); here a template is a
//! graph's shape (its routines, sizes and edges: [`signature`]) and the load it is placed
//! into (the graphs in flight, in [`band`]s), and what it keeps is each finished graph's
//! makespan and task finishes.
//!
//! Why: under `ninf load --clients 30` (tiny products issued by 30 clients on two cores),
//! a call's time is mostly the RPC, the proxy and the operating system's queue, and grows
//! fivefold with the graphs in flight. The model's figures for such calls follow the
//! calibration of the moment, and its predictions varied among graphs met by the same load
//! by as much as the graphs themselves: scaled to the right level per band of load, they
//! were still 46-55% off per graph, against 35-43% for what the same shape took under the
//! same load (docs/notes/2026-12-06-predictions-from-like-graphs.md).
//!
//! A template answers only once it has [`MIN_SAMPLES`] graphs, and only for a placement
//! the model predicts within a factor [`MODEL_RANGE`] of what it predicted for them: a
//! graph the model sends to a server three times slower is not the graph the history saw.
//!
//! Pure and deterministic: graphs, counts and times in; expectations out.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

use crate::graph::TaskGraph;
use crate::schedule::{Schedule, Timing};
use crate::stats::{least_relative_error, median};

/// Graphs a template keeps: the most recent ones, so that it follows a grid that changes.
pub const WINDOW: usize = 60;
/// Graphs a template needs before it answers.
pub const MIN_SAMPLES: usize = 5;
/// How far the model's makespan for a placement may be from its median for the template's
/// graphs (a factor, either way) for the template to answer.
pub const MODEL_RANGE: f64 = 3.0;
/// Templates kept at most; beyond, the one taught longest ago is forgotten.
pub const MAX_TEMPLATES: usize = 1024;
/// A graph of more tasks keeps its makespan alone, its tasks' timings expected as the
/// model's scaled: a graph of 10,000 tiny calls would otherwise hold 80 KB per run, and a
/// template of them 5 MB.
pub const MAX_TASKS_KEPT: usize = 128;

/// A graph's shape and the load it met: what makes two graphs alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TemplateKey {
    pub signature: u64,
    pub band: u32,
}

impl TemplateKey {
    /// The key of `graph` placed while `in_flight` other graphs ran.
    pub fn of(graph: &TaskGraph, in_flight: usize) -> TemplateKey {
        TemplateKey {
            signature: signature(graph),
            band: band(in_flight),
        }
    }
}

/// The shape of a graph: each task's routine, flops, processors and client bytes, each edge
/// and the bytes each task reads from data kept on the grid; not labels, nor where pinned
/// tasks go. Two runs of one transaction on other data of the same sizes share it.
pub fn signature(graph: &TaskGraph) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    graph.tasks.len().hash(&mut h);
    for t in &graph.tasks {
        t.function.hash(&mut h);
        t.flops.to_bits().hash(&mut h);
        (t.processors, t.client_in_bytes, t.client_out_bytes).hash(&mut h);
    }
    for e in &graph.edges {
        (e.from, e.to, e.bytes).hash(&mut h);
    }
    for (task, inputs) in graph.resident_inputs.iter().enumerate() {
        for r in inputs {
            (task, r.bytes).hash(&mut h);
        }
    }
    h.finish()
}

/// The band of `in_flight` graphs: 0 to 3 each their own, then half octaves (4-5, 6-7,
/// 8-11, 12-15, 16-23, ...). A call's time under `ninf load` grew about linearly with the
/// graphs in flight, so the bands widen as a graph's time does; octaves (4-7, 8-15) held
/// graphs of 11 and 17 ms alike, and were 0.3-1.9 points worse per graph
/// (docs/notes/2026-12-06-the-load-a-graph-meets.md).
pub fn band(in_flight: usize) -> u32 {
    match in_flight {
        n @ 0..4 => n as u32,
        n => {
            let octave = n.ilog2();
            let upper_half = n >= 3 << (octave - 1);
            2 * octave + u32::from(upper_half)
        }
    }
}

/// One finished graph of a template.
#[derive(Debug, Clone, PartialEq)]
struct Past {
    /// The model's makespan for it (seconds).
    modelled: f64,
    makespan: f64,
    /// Each task's finish from the graph's start; NaN where unknown.
    finishes: Vec<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Template {
    graphs: VecDeque<Past>,
    /// When it was last taught (in graphs taught to any template).
    last: u64,
}

/// What the history expects of a graph: its makespan and each task's timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Expected {
    pub makespan: f64,
    pub timings: Vec<Timing>,
}

/// The templates taught so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GraphTemplates {
    by_key: HashMap<TemplateKey, Template>,
    taught: u64,
}

impl GraphTemplates {
    /// Learns from a finished graph of template `key`: the model's makespan for it, the
    /// actual one, and each task's actual finish from the graph's start (`None` unknown).
    /// Non-finite or non-positive makespans teach nothing.
    pub fn observe(
        &mut self,
        key: TemplateKey,
        modelled: f64,
        makespan: f64,
        finishes: &[Option<f64>],
    ) {
        let usable = |s: f64| s.is_finite() && s > 0.0;
        if !usable(modelled) || !usable(makespan) {
            return;
        }
        self.taught += 1;
        if !self.by_key.contains_key(&key) && self.by_key.len() >= MAX_TEMPLATES {
            self.forget_oldest();
        }
        let template = self.by_key.entry(key).or_default();
        template.last = self.taught;
        if template.graphs.len() == WINDOW {
            template.graphs.pop_front();
        }
        template.graphs.push_back(Past {
            modelled,
            makespan,
            finishes: if finishes.len() > MAX_TASKS_KEPT {
                Vec::new()
            } else {
                finishes
                    .iter()
                    .map(|f| f.filter(|f| f.is_finite() && *f >= 0.0).unwrap_or(f64::NAN))
                    .collect()
            },
        });
    }

    fn forget_oldest(&mut self) {
        if let Some(oldest) = self
            .by_key
            .iter()
            .min_by_key(|(_, t)| t.last)
            .map(|(k, _)| *k)
        {
            self.by_key.remove(&oldest);
        }
    }

    /// What the template `key` expects of a graph the model placed as `schedule`: the
    /// makespan that minimises the mean relative error over its graphs (their makespans'
    /// median weighted by 1 / makespan), and for each task the median of its finishes, its
    /// start moved with its finish. A task the template has too few finishes of keeps the
    /// model's timing, scaled as the makespan is. `None` while the template has fewer than
    /// [`MIN_SAMPLES`] graphs or the model's makespan is outside [`MODEL_RANGE`] of its
    /// median for them.
    pub fn expect(&self, key: TemplateKey, schedule: &Schedule) -> Option<Expected> {
        let graphs = &self.by_key.get(&key)?.graphs;
        let modelled_ok = schedule.makespan.is_finite() && schedule.makespan > 0.0;
        if graphs.len() < MIN_SAMPLES || !modelled_ok {
            return None;
        }
        let modelled = median(graphs.iter().map(|g| g.modelled).collect())?;
        if schedule.makespan > modelled * MODEL_RANGE || schedule.makespan * MODEL_RANGE < modelled
        {
            return None;
        }
        let makespan = least_relative_error(graphs.iter().map(|g| g.makespan).collect())?;
        let scale = makespan / schedule.makespan;
        let timings = schedule
            .timings
            .iter()
            .enumerate()
            .map(|(task, timing)| {
                let finishes: Vec<f64> = graphs
                    .iter()
                    .filter_map(|g| g.finishes.get(task).copied())
                    .filter(|f| !f.is_nan())
                    .collect();
                let finish = if finishes.len() >= MIN_SAMPLES {
                    median(finishes)
                } else {
                    None
                };
                moved_to(*timing, finish.unwrap_or(timing.finish * scale))
            })
            .collect();
        Some(Expected { makespan, timings })
    }
}

/// `timing` with its finish at `finish` and its start moved in proportion.
fn moved_to(timing: Timing, finish: f64) -> Timing {
    let start = if timing.finish > 0.0 {
        timing.start * (finish / timing.finish)
    } else {
        timing.start
    };
    Timing {
        start: start.min(finish),
        finish,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::graph::{Edge, Task};

    fn task(function: &str, flops: f64) -> Task {
        Task {
            label: format!("{function}#"),
            function: function.into(),
            flops,
            client_in_bytes: 16,
            client_out_bytes: 0,
            processors: 1,
        }
    }

    fn chain(flops: f64) -> TaskGraph {
        TaskGraph {
            tasks: vec![task("mmul", flops), task("mmul", flops)],
            edges: vec![Edge {
                from: 0,
                to: 1,
                bytes: 2048,
            }],
            ..TaskGraph::default()
        }
    }

    fn schedule(first: f64, makespan: f64) -> Schedule {
        Schedule {
            servers: vec![0, 0],
            timings: vec![
                Timing {
                    start: 0.0,
                    finish: first,
                },
                Timing {
                    start: first,
                    finish: makespan,
                },
            ],
            data: vec![],
            makespan,
            staging: vec![],
        }
    }

    #[test]
    fn a_graph_of_the_same_shape_shares_a_template_and_another_size_does_not() {
        let mut relabelled = chain(1e6);
        relabelled.tasks[0].label = "first".into();
        assert_eq!(signature(&chain(1e6)), signature(&relabelled));
        assert_ne!(signature(&chain(1e6)), signature(&chain(2e6)));
        let mut bigger_edge = chain(1e6);
        bigger_edge.edges[0].bytes = 4096;
        assert_ne!(signature(&chain(1e6)), signature(&bigger_edge));
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 15, 16, 23, 24, 31, 32].map(band),
            [0, 1, 2, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10]
        );
    }

    #[test]
    fn a_template_answers_once_it_has_enough_graphs_with_what_they_took() {
        let key = TemplateKey::of(&chain(1e6), 9);
        let mut t = GraphTemplates::default();
        // The model says 4 ms; graphs under this load took 10 ms, their first task 5 ms.
        for i in 0..MIN_SAMPLES {
            assert_eq!(t.expect(key, &schedule(0.002, 0.004)), None, "after {i}");
            let spread = 0.001 * (i as f64 - 2.0);
            t.observe(
                key,
                0.004,
                0.010 + spread,
                &[Some(0.005 + spread / 2.0), None],
            );
        }
        let e = t.expect(key, &schedule(0.002, 0.004)).unwrap();
        assert!((e.makespan - 0.010).abs() < 1e-12, "{e:?}");
        assert!((e.timings[0].finish - 0.005).abs() < 1e-12, "{e:?}");
        // No finish known for the second task: the model's, scaled as the makespan is,
        // its start with it.
        assert!((e.timings[1].finish - 0.010).abs() < 1e-12, "{e:?}");
        assert!((e.timings[1].start - 0.005).abs() < 1e-12, "{e:?}");
        // Another load, another template.
        assert_eq!(
            t.expect(TemplateKey::of(&chain(1e6), 0), &schedule(0.002, 0.004)),
            None
        );
    }

    #[test]
    fn the_makespan_expected_minimises_the_relative_error_not_the_absolute() {
        let key = TemplateKey::of(&chain(1e6), 0);
        let mut t = GraphTemplates::default();
        for makespan in [0.001, 0.001, 0.002, 0.010, 0.010] {
            t.observe(key, 0.002, makespan, &[]);
        }
        // The plain median is 2 ms; weighted by 1 / makespan, the two graphs of 1 ms hold
        // 2,000 of the 2,700, and 1 ms is off by less on average.
        let e = t.expect(key, &schedule(0.001, 0.002)).unwrap();
        assert!((e.makespan - 0.001).abs() < 1e-12, "{e:?}");
    }

    #[test]
    fn a_placement_the_model_sees_far_from_the_templates_graphs_keeps_the_model() {
        let key = TemplateKey::of(&chain(1e6), 0);
        let mut t = GraphTemplates::default();
        for _ in 0..MIN_SAMPLES {
            t.observe(key, 0.004, 0.006, &[Some(0.003), Some(0.006)]);
        }
        assert!(t.expect(key, &schedule(0.005, 0.011)).is_some());
        assert_eq!(t.expect(key, &schedule(0.006, 0.013)), None);
        assert_eq!(t.expect(key, &schedule(0.0005, 0.0013)), None);
    }

    #[test]
    fn nonsense_teaches_nothing_and_old_templates_make_room() {
        let key = TemplateKey::of(&chain(1e6), 0);
        let mut t = GraphTemplates::default();
        for bad in [f64::NAN, 0.0, -1.0, f64::INFINITY] {
            for _ in 0..MIN_SAMPLES {
                t.observe(key, 0.004, bad, &[]);
                t.observe(key, bad, 0.004, &[]);
            }
        }
        assert_eq!(t.expect(key, &schedule(0.002, 0.004)), None);
        // A graph of many tasks keeps no finishes.
        t.observe(key, 0.004, 0.008, &vec![Some(0.001); MAX_TASKS_KEPT + 1]);
        assert!(t.by_key[&key].graphs[0].finishes.is_empty());
        for signature in 0..(MAX_TEMPLATES as u64 + 1) {
            t.observe(
                TemplateKey { signature, band: 0 },
                0.004,
                0.004,
                &[Some(f64::NAN)],
            );
        }
        assert_eq!(t.by_key.len(), MAX_TEMPLATES);
        assert!(!t.by_key.contains_key(&TemplateKey {
            signature: 0,
            band: 0
        }));
        assert!(t.by_key.contains_key(&TemplateKey {
            signature: MAX_TEMPLATES as u64,
            band: 0
        }));
    }
}
