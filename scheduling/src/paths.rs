//! The heaviest path among the tasks not yet placed (by total computation), kept up to date
//! as FLOW places paths. Recomputing it over the whole graph for every path placed costs
//! O(tasks) per path: for a transaction of 10,000 independent calls (10,000 paths of one
//! task) that was 10^8 steps. Here placing a path revisits only the tasks downstream of it,
//! and the heaviest path's end comes from an ordered set.
//!
//! The answer is the one the whole-graph recomputation gives: a task's weight is its flops
//! plus the heaviest weight among its unplaced predecessors (ties to the lower task id), and
//! the path ends at the heaviest task, ties to the earliest in dependency order.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::graph::{TaskGraph, TaskId};

/// A weight ordered heaviest first.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Heavier(f64);

impl Eq for Heavier {}

impl PartialOrd for Heavier {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Heavier {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0)
    }
}

/// Heaviest-path weights of the unplaced tasks of one graph.
#[derive(Debug)]
pub struct HeaviestPaths<'g> {
    graph: &'g TaskGraph,
    order: &'g [TaskId],
    predecessors: &'g [Vec<(TaskId, u64)>],
    /// Each task's index in `order`.
    position: Vec<usize>,
    successors: Vec<Vec<TaskId>>,
    placed: Vec<bool>,
    weight: Vec<f64>,
    back: Vec<Option<TaskId>>,
    /// The unplaced tasks by (weight, position): the first is where the heaviest path ends.
    ends: BTreeSet<(Heavier, usize)>,
}

impl<'g> HeaviestPaths<'g> {
    /// Weights for `graph`, whose tasks in dependency order are `order`, with each task's
    /// predecessors (and the bytes they send, unused here).
    pub fn new(
        graph: &'g TaskGraph,
        order: &'g [TaskId],
        predecessors: &'g [Vec<(TaskId, u64)>],
    ) -> HeaviestPaths<'g> {
        let n = graph.tasks.len();
        let mut position = vec![0; n];
        for (i, &t) in order.iter().enumerate() {
            position[t] = i;
        }
        let mut successors = vec![Vec::new(); n];
        for (t, list) in predecessors.iter().enumerate() {
            for &(p, _) in list {
                successors[p].push(t);
            }
        }
        let mut paths = HeaviestPaths {
            graph,
            order,
            predecessors,
            position,
            successors,
            placed: vec![false; n],
            weight: vec![0.0; n],
            back: vec![None; n],
            ends: BTreeSet::new(),
        };
        for (i, &t) in order.iter().enumerate() {
            let (weight, back) = paths.weigh(t);
            paths.weight[t] = weight;
            paths.back[t] = back;
            paths.ends.insert((Heavier(weight), i));
        }
        paths
    }

    /// Whether every task has been placed.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The heaviest path among unplaced tasks, in dependency order; empty when none is left.
    pub fn heaviest(&self) -> Vec<TaskId> {
        let mut path = Vec::new();
        let mut cursor = self.ends.first().map(|&(_, i)| self.order[i]);
        while let Some(t) = cursor {
            path.push(t);
            cursor = self.back[t];
        }
        path.reverse();
        path
    }

    /// Marks `tasks` placed and brings the weights downstream of them up to date.
    pub fn remove(&mut self, tasks: &[TaskId]) {
        let mut dirty = BTreeSet::new();
        for &t in tasks {
            if std::mem::replace(&mut self.placed[t], true) {
                continue;
            }
            self.ends
                .remove(&(Heavier(self.weight[t]), self.position[t]));
            dirty.extend(self.successors[t].iter().map(|&s| self.position[s]));
        }
        // In dependency order, so each task is weighed after every predecessor it reads.
        while let Some(i) = dirty.pop_first() {
            let t = self.order[i];
            if self.placed[t] {
                continue;
            }
            let (weight, back) = self.weigh(t);
            self.back[t] = back;
            if weight.to_bits() != self.weight[t].to_bits() {
                self.ends.remove(&(Heavier(self.weight[t]), i));
                self.ends.insert((Heavier(weight), i));
                self.weight[t] = weight;
                dirty.extend(self.successors[t].iter().map(|&s| self.position[s]));
            }
        }
    }

    /// `t`'s weight and the predecessor its heaviest path comes through.
    fn weigh(&self, t: TaskId) -> (f64, Option<TaskId>) {
        let mut best: Option<TaskId> = None;
        for &(p, _) in &self.predecessors[t] {
            if !self.placed[p]
                && best.is_none_or(|b| {
                    self.weight[p] > self.weight[b] || (self.weight[p] == self.weight[b] && p < b)
                })
            {
                best = Some(p);
            }
        }
        (
            self.graph.tasks[t].flops + best.map_or(0.0, |p| self.weight[p]),
            best,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Task;
    use crate::random::SplitMix;

    /// The whole-graph recomputation the incremental version must agree with.
    fn heaviest_from_scratch(
        graph: &TaskGraph,
        order: &[TaskId],
        predecessors: &[Vec<(TaskId, u64)>],
        placed: &[bool],
    ) -> Vec<TaskId> {
        let n = graph.tasks.len();
        let mut weight = vec![0.0f64; n];
        let mut back: Vec<Option<TaskId>> = vec![None; n];
        let mut end: Option<TaskId> = None;
        for &t in order {
            if placed[t] {
                continue;
            }
            let mut best: Option<TaskId> = None;
            for &(p, _) in &predecessors[t] {
                if !placed[p]
                    && best
                        .is_none_or(|b| weight[p] > weight[b] || (weight[p] == weight[b] && p < b))
                {
                    best = Some(p);
                }
            }
            weight[t] = graph.tasks[t].flops + best.map_or(0.0, |p| weight[p]);
            back[t] = best;
            if end.is_none_or(|e| weight[t] > weight[e]) {
                end = Some(t);
            }
        }
        let mut path = Vec::new();
        let mut cursor = end;
        while let Some(t) = cursor {
            path.push(t);
            cursor = back[t];
        }
        path.reverse();
        path
    }

    /// A random DAG: edges only from lower to higher ids, flops from a few values so that
    /// ties happen.
    fn random_graph(random: &mut SplitMix, tasks: usize) -> (TaskGraph, Vec<Vec<(TaskId, u64)>>) {
        let mut graph = TaskGraph::default();
        let mut predecessors: Vec<Vec<(TaskId, u64)>> = Vec::with_capacity(tasks);
        for t in 0..tasks {
            let mut reads: Vec<(TaskId, u64)> = Vec::new();
            graph.add_task(Task {
                label: format!("t{t}"),
                function: "f".into(),
                flops: (random.next_u64() % 4) as f64,
                client_in_bytes: 0,
                client_out_bytes: 0,
                processors: 1,
            });
            for _ in 0..random.next_u64() % 3 {
                if t > 0 {
                    let from = (random.next_u64() % t as u64) as usize;
                    if !reads.iter().any(|&(p, _)| p == from) {
                        graph.add_edge(from, t, 8);
                        reads.push((from, 8));
                    }
                }
            }
            predecessors.push(reads);
        }
        (graph, predecessors)
    }

    #[test]
    fn placing_paths_one_by_one_gives_the_paths_a_full_recomputation_gives() {
        let mut random = SplitMix::new(7);
        for _ in 0..200 {
            let tasks = 1 + (random.next_u64() % 40) as usize;
            let (graph, predecessors) = random_graph(&mut random, tasks);
            let order: Vec<TaskId> = (0..tasks).collect();
            let mut paths = HeaviestPaths::new(&graph, &order, &predecessors);
            let mut placed = vec![false; tasks];
            while !paths.is_empty() {
                let expected = heaviest_from_scratch(&graph, &order, &predecessors, &placed);
                let path = paths.heaviest();
                assert_eq!(path, expected);
                // Place a prefix sometimes, as FLOW does when no server serves the whole path.
                let keep = 1 + (random.next_u64() as usize % path.len());
                for &t in &path[..keep] {
                    placed[t] = true;
                }
                paths.remove(&path[..keep]);
            }
            assert!(placed.iter().all(|&p| p), "every task was on a path");
            assert!(paths.heaviest().is_empty());
        }
    }

    #[test]
    fn independent_tasks_come_heaviest_first_then_in_order() {
        let mut graph = TaskGraph::default();
        for (t, flops) in [1.0, 3.0, 3.0, 2.0].into_iter().enumerate() {
            graph.add_task(Task {
                label: format!("t{t}"),
                function: "f".into(),
                flops,
                client_in_bytes: 0,
                client_out_bytes: 0,
                processors: 1,
            });
        }
        let no_edges = vec![Vec::new(); 4];
        let mut paths = HeaviestPaths::new(&graph, &[0, 1, 2, 3], &no_edges);
        let mut seen: Vec<TaskId> = Vec::new();
        while !paths.is_empty() {
            let path = paths.heaviest();
            seen.extend(&path);
            paths.remove(&path);
        }
        assert_eq!(seen, [1, 2, 3, 0]);
    }
}
