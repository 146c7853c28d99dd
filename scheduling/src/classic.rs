//! The exclusive model of the scheduling literature (Topcuoglu, Hariri and Wu 2002; the STG
//! set; SAGA), as a predictor: a server's processors each run one task at a time to its
//! end, a task may start in an idle stretch between tasks already placed (insertion), a
//! transfer takes `latency + bytes / throughput` whatever else moves, and each input leaves
//! when its producer finishes. Schedules from files (`ninf dag-bench --graph`) are timed
//! under it so that they compare with outside implementations on the same terms.

use std::collections::HashMap;

use crate::grid::{GridView, Link, Location, ServerId};
use crate::predictor::{LinkTable, Model, PlacementId, Predictor};

/// One server's placed tasks: (start, finish, processors), by start.
#[derive(Debug, Clone, Default)]
pub struct Busy(Vec<(f64, f64, u32)>);

impl Busy {
    /// Processors in use at instant `t`.
    fn used_at(&self, t: f64) -> u32 {
        self.0
            .iter()
            .filter(|&&(s, f, _)| s <= t && t < f)
            .map(|&(_, _, p)| p)
            .sum()
    }

    /// The earliest start from `ready` at which `processors` of `capacity` stay free for
    /// `duration`: at `ready` or at the end of a placed task.
    pub fn earliest(&self, ready: f64, duration: f64, processors: u32, capacity: u32) -> f64 {
        if capacity <= 1 {
            return self.earliest_alone(ready, duration);
        }
        self.earliest_among(ready, duration, processors.min(capacity), capacity)
    }

    /// [`Busy::earliest`] with `need` of `capacity` processors.
    fn earliest_among(&self, ready: f64, duration: f64, need: u32, capacity: u32) -> f64 {
        let mut candidates: Vec<f64> = std::iter::once(ready)
            .chain(self.0.iter().map(|&(_, f, _)| f).filter(|&f| f > ready))
            .collect();
        candidates.sort_by(f64::total_cmp);
        for start in candidates {
            // Usage only changes at placed starts inside the window: check each.
            let end = start + duration;
            let mut points: Vec<f64> = vec![start];
            points.extend(
                self.0
                    .iter()
                    .map(|&(s, _, _)| s)
                    .filter(|&s| s > start && s < end),
            );
            if points.iter().all(|&t| self.used_at(t) + need <= capacity) {
                return start;
            }
        }
        self.0.iter().map(|&(_, f, _)| f).fold(ready, f64::max)
    }

    /// [`Busy::earliest`] on one processor, where placed tasks never overlap: from the last
    /// that starts before `ready`, by start, moving past each that the run would overlap. The
    /// general search tries every end and checks every start inside the window, cubic in
    /// the tasks placed, which made `search` on 1,000 tasks take seconds.
    fn earliest_alone(&self, ready: f64, duration: f64) -> f64 {
        let mut start = ready;
        // By start, the tasks that take time never overlap (those that take none hold
        // nothing), so of those starting before `ready` only the last can still be running.
        let mut first = self.0.partition_point(|&(s, _, _)| s < ready);
        while first > 0 {
            first -= 1;
            let (s, f, _) = self.0[first];
            if f > s {
                break;
            }
        }
        for &(s, f, _) in &self.0[first..] {
            if f <= s || f <= start {
                continue;
            }
            if s >= start + duration {
                break;
            }
            start = start.max(f);
        }
        start
    }

    pub fn insert(&mut self, start: f64, finish: f64, processors: u32) {
        let at = self.0.partition_point(|&(s, _, _)| s <= start);
        self.0.insert(at, (start, finish, processors));
    }

    /// Removes one placement with exactly these times and processors.
    fn remove(&mut self, start: f64, finish: f64, processors: u32) {
        if let Some(i) = self
            .0
            .iter()
            .rposition(|&(s, f, p)| s == start && f == finish && p == processors)
        {
            self.0.remove(i);
        }
    }
}

/// A predictor under [`Model::Exclusive`]: idle speeds, links alone, placements booked.
#[derive(Debug, Clone)]
pub struct ClassicPredictor {
    flops_per_processor: Vec<f64>,
    processors: Vec<u32>,
    links: LinkTable,
    default_link: Link,
    busy: Vec<Busy>,
    /// Every placement made: (server, start, finish, processors), `None` once withdrawn.
    placements: Vec<Option<(ServerId, f64, f64, u32)>>,
}

impl ClassicPredictor {
    /// A predictor for `grid` whose paths are `links` (looked up in either direction) and
    /// `default_link` where none is given; a place's path to itself costs nothing.
    pub fn new(
        grid: &GridView,
        links: HashMap<(Location, Location), Link>,
        default_link: Link,
    ) -> ClassicPredictor {
        ClassicPredictor {
            flops_per_processor: grid.servers.iter().map(|s| s.flops_per_processor).collect(),
            processors: grid.servers.iter().map(|s| s.processors.max(1)).collect(),
            links: links.into_iter().collect(),
            default_link,
            busy: vec![Busy::default(); grid.servers.len()],
            placements: Vec::new(),
        }
    }
}

impl Predictor for ClassicPredictor {
    fn model(&self) -> Model {
        Model::Exclusive
    }

    fn earliest_start(&self, server: ServerId, processors: u32, ready: f64, duration: f64) -> f64 {
        match (self.busy.get(server), self.processors.get(server)) {
            (Some(busy), Some(&capacity)) => {
                busy.earliest(ready, duration, processors.max(1), capacity)
            }
            _ => ready,
        }
    }

    fn speed(&self, server: ServerId, processors: u32, _at: f64) -> f64 {
        self.peak_speed(server, processors)
    }

    fn peak_speed(&self, server: ServerId, processors: u32) -> f64 {
        let (Some(&speed), Some(&capacity)) = (
            self.flops_per_processor.get(server),
            self.processors.get(server),
        ) else {
            return 0.0;
        };
        speed * f64::from(processors.max(1).min(capacity))
    }

    fn link(&self, from: Location, to: Location) -> Link {
        if from == to {
            return Link {
                throughput: f64::INFINITY,
                latency: 0.0,
            };
        }
        self.links
            .get(&(from, to))
            .or_else(|| self.links.get(&(to, from)))
            .copied()
            .unwrap_or(self.default_link)
    }

    fn place(&mut self, server: ServerId, processors: u32, start: f64, finish: f64) -> PlacementId {
        let capacity = self.processors.get(server).copied().unwrap_or(1);
        let processors = processors.max(1).min(capacity);
        if let Some(busy) = self.busy.get_mut(server) {
            busy.insert(start, finish, processors);
        }
        self.placements
            .push(Some((server, start, finish, processors)));
        self.placements.len() - 1
    }

    fn withdraw(&mut self, placement: PlacementId) {
        let Some(slot) = self.placements.get_mut(placement) else {
            return;
        };
        if let Some((server, start, finish, processors)) = slot.take()
            && let Some(busy) = self.busy.get_mut(server)
        {
            busy.remove(start, finish, processors);
        }
        if placement + 1 == self.placements.len() {
            self.placements.pop();
        }
    }

    fn fork(&self) -> Box<dyn Predictor> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::grid::ServerView;

    fn grid(processors: u32) -> GridView {
        GridView {
            servers: vec![ServerView {
                name: "a".into(),
                flops_per_processor: 2.0,
                processors,
                functions: BTreeSet::new(),
                up: true,
            }],
        }
    }

    #[test]
    fn a_task_waits_for_a_free_processor_or_fits_in_a_gap() {
        let link = Link {
            throughput: 1.0,
            latency: 0.0,
        };
        let mut p = ClassicPredictor::new(&grid(1), HashMap::new(), link);
        let first = p.place(0, 1, 0.0, 10.0);
        p.place(0, 1, 14.0, 20.0);
        // Ready at 5: busy until 10; a 4 s task fits into [10, 14), a 5 s one goes last.
        assert_eq!(p.earliest_start(0, 1, 5.0, 4.0), 10.0);
        assert_eq!(p.earliest_start(0, 1, 5.0, 5.0), 20.0);
        p.withdraw(first);
        assert_eq!(p.earliest_start(0, 1, 5.0, 5.0), 5.0);
        assert_eq!(p.speed(0, 1, 0.0), 2.0);
        assert_eq!(
            p.link(Location::Server(0), Location::Server(0)).latency,
            0.0
        );
    }

    #[test]
    fn one_processors_pass_finds_what_the_general_search_finds() {
        let mut random = crate::random::SplitMix::new(7);
        for _ in 0..200 {
            let mut busy = Busy::default();
            for _ in 0..random.below(0, 12) {
                let ready = 20.0 * random.uniform();
                let duration = if random.below(0, 5) == 0 {
                    0.0
                } else {
                    5.0 * random.uniform()
                };
                let start = busy.earliest_among(ready, duration, 1, 1);
                busy.insert(start, start + duration, 1);
            }
            for _ in 0..20 {
                let ready = 30.0 * random.uniform();
                let duration = 4.0 * random.uniform();
                assert_eq!(
                    busy.earliest_alone(ready, duration),
                    busy.earliest_among(ready, duration, 1, 1),
                    "{busy:?} from {ready} for {duration}"
                );
            }
        }
    }

    #[test]
    fn two_processors_run_two_tasks_at_once() {
        let link = Link {
            throughput: 1.0,
            latency: 0.0,
        };
        let mut p = ClassicPredictor::new(&grid(2), HashMap::new(), link);
        p.place(0, 1, 0.0, 10.0);
        assert_eq!(p.earliest_start(0, 1, 0.0, 3.0), 0.0);
        p.place(0, 1, 0.0, 10.0);
        assert_eq!(p.earliest_start(0, 1, 0.0, 3.0), 10.0);
        assert_eq!(p.earliest_start(0, 2, 0.0, 3.0), 10.0);
    }
}
