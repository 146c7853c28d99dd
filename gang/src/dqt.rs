//! The Distributed Queue Tree (the gang thesis, chapter 7): time-space sharing on a tree of nested
//! partitions. Node i of a w-ary tree of height h stands for a partition of w^(h - depth)
//! processors and holds a run queue of jobs of exactly that size. A "front" of active nodes
//! moves from the root to the leaves: an active node runs each job of its queue once, one per
//! slot, then hands its partition to its children, which run their own rounds side by side.
//! A child that finishes its round before its siblings runs another (ordinary DQT) or waits
//! (Fair-DQT); when every child has finished at least once, the parent reports its round done.
//! New jobs are placed by a task allocation policy (MAX, MIN, APA, FF, FF-APA) that walks from
//! the root to a node of the job's size.
//!
//! The paper's nodes exchange activate, next_turn, rounded and rounding messages; here one
//! call per slot boundary ([`QueueTree::slot`]) makes the same decisions synchronously, so the
//! simulator and any live driver share one deterministic implementation.

use std::collections::VecDeque;

use serde::Serialize;

use crate::matrix::JobId;

/// How a new job's partition is chosen, at each node on the way down, among its children.
/// Ties go to the leftmost child, as in the thesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Allocation {
    /// The child whose subtree has the smallest maximum TQLB.
    Max,
    /// The child whose subtree has the smallest minimum TQLB.
    Min,
    /// The child with the least assigned processor amount (queue length × partition size,
    /// summed over its subtree).
    Apa,
    /// The child holding the shortest queue among partitions of the job's size.
    FirstFit,
    /// First fit, and APA when first fit ties.
    FirstFitApa,
}

impl Allocation {
    pub const ALL: [Allocation; 5] = [
        Allocation::Max,
        Allocation::Min,
        Allocation::Apa,
        Allocation::FirstFit,
        Allocation::FirstFitApa,
    ];

    /// The lower-case name used on command lines (`max`, `min`, `apa`, `ff`, `ff-apa`).
    pub fn name(self) -> &'static str {
        match self {
            Allocation::Max => "max",
            Allocation::Min => "min",
            Allocation::Apa => "apa",
            Allocation::FirstFit => "ff",
            Allocation::FirstFitApa => "ff-apa",
        }
    }
}

impl std::str::FromStr for Allocation {
    type Err = String;
    fn from_str(s: &str) -> Result<Allocation, String> {
        Allocation::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!("unknown DQT allocation policy `{s}` (max, min, apa, ff, ff-apa)")
            })
    }
}

/// The shape of the tree and its policies.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DqtConfig {
    /// Children per node (2: binary buddy partitions).
    pub width: u32,
    /// Levels below the root; the machine has width^height processors.
    pub height: u32,
    pub allocation: Allocation,
    /// Fair-DQT: a child that has finished its round waits for its siblings instead of
    /// running again, so every job runs exactly once per round.
    pub fair: bool,
}

impl DqtConfig {
    /// A tree of `width`-ary partitions over exactly `processors` processors.
    pub fn for_processors(
        processors: u32,
        width: u32,
        allocation: Allocation,
        fair: bool,
    ) -> Result<DqtConfig, DqtError> {
        if !(2..=64).contains(&width) {
            return Err(DqtError::Width(width));
        }
        let mut height = 0;
        let mut size: u64 = 1;
        while size < u64::from(processors) {
            size *= u64::from(width);
            height += 1;
        }
        if size != u64::from(processors) || processors == 0 {
            return Err(DqtError::NotAPower { processors, width });
        }
        Ok(DqtConfig {
            width,
            height,
            allocation,
            fair,
        })
    }

    pub fn processors(&self) -> u32 {
        self.width.pow(self.height)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DqtError {
    #[error("a DQT node needs 2 to 64 children, not {0}")]
    Width(u32),
    #[error("{processors} processors are not a power of {width}; a DQT needs width^height")]
    NotAPower { processors: u32, width: u32 },
    #[error(
        "job {job} needs {size} processors; DQT partitions are powers of {width} up to {processors}"
    )]
    BadSize {
        job: JobId,
        size: u32,
        width: u32,
        processors: u32,
    },
    #[error("the tree has no node {0}")]
    NoNode(usize),
    #[error("job {0} is already in the tree")]
    Duplicate(JobId),
}

/// Where a node is in its round.
#[derive(Debug, Clone, PartialEq)]
enum Phase {
    /// Activated, not yet started: at the next boundary it runs its queue, or, if that is
    /// empty, hands over to its children.
    Activated,
    /// Running its own queue; this many jobs at the front of the queue have not run in this
    /// round (jobs that ran rotate to the back; new jobs join behind them).
    Own(usize),
    /// Its children run; bit k is set once child k has finished a round.
    Children(u64),
    /// Its round is over (it runs nothing until activated again).
    Done,
}

#[derive(Debug, Clone, PartialEq)]
struct Node {
    /// Jobs of this partition's size, in round-robin order (the next to run first).
    queue: VecDeque<JobId>,
    phase: Phase,
    /// Jobs in this node's whole subtree.
    subtree_jobs: usize,
}

/// What runs in one slot: each job with its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SlotRun {
    pub job: JobId,
    pub node: usize,
    /// First processor of the partition.
    pub first: u32,
    pub size: u32,
}

/// A slot as the tree decides it: the state before it, and what runs.
pub type TreeSlot = (QueueTree, Vec<SlotRun>);

/// The tree and the front.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueTree {
    config: DqtConfig,
    nodes: Vec<Node>,
    /// Each job's node.
    placed: std::collections::HashMap<JobId, usize>,
    /// Each node's depth, partition size and first processor.
    depth: Vec<u32>,
    size: Vec<u32>,
    first: Vec<u32>,
}

impl QueueTree {
    pub fn new(config: DqtConfig) -> Result<QueueTree, DqtError> {
        if !(2..=64).contains(&config.width) {
            return Err(DqtError::Width(config.width));
        }
        let w = config.width as usize;
        let count = (w.pow(config.height + 1) - 1) / (w - 1);
        let node = Node {
            queue: VecDeque::new(),
            phase: Phase::Done,
            subtree_jobs: 0,
        };
        let mut depth = Vec::with_capacity(count);
        let mut size = Vec::with_capacity(count);
        let mut first = Vec::with_capacity(count);
        for level in 0..=config.height {
            let partition = config.width.pow(config.height - level);
            for k in 0..w.pow(level) {
                depth.push(level);
                size.push(partition);
                first.push(k as u32 * partition);
            }
        }
        Ok(QueueTree {
            config,
            nodes: vec![node; count],
            placed: std::collections::HashMap::new(),
            depth,
            size,
            first,
        })
    }

    pub fn config(&self) -> &DqtConfig {
        &self.config
    }

    fn width(&self) -> usize {
        self.config.width as usize
    }

    fn children(&self, node: usize) -> std::ops::Range<usize> {
        let first = node * self.width() + 1;
        if first >= self.nodes.len() {
            first..first
        } else {
            first..first + self.width()
        }
    }

    fn depth(&self, node: usize) -> u32 {
        self.depth[node]
    }

    /// Processors of `node`'s partition.
    pub fn node_size(&self, node: usize) -> u32 {
        self.size[node]
    }

    /// The first processor of `node`'s partition (partitions at one depth tile the machine
    /// left to right in breadth-first order).
    pub fn node_first(&self, node: usize) -> u32 {
        self.first[node]
    }

    pub fn jobs(&self) -> usize {
        self.placed.len()
    }

    /// The largest total queue length over the branches from the root to each leaf: every
    /// job runs at least once in this many slots.
    pub fn max_tqlb(&self) -> usize {
        self.branch_extreme(0, true)
    }

    /// The smallest such total.
    pub fn min_tqlb(&self) -> usize {
        self.branch_extreme(0, false)
    }

    fn branch_extreme(&self, node: usize, max: bool) -> usize {
        let below = self
            .children(node)
            .map(|c| self.branch_extreme(c, max))
            .reduce(|a, b| if max { a.max(b) } else { a.min(b) })
            .unwrap_or(0);
        self.nodes[node].queue.len() + below
    }

    fn assigned_amount(&self, node: usize) -> u64 {
        self.nodes[node].queue.len() as u64 * u64::from(self.node_size(node))
            + self
                .children(node)
                .map(|c| self.assigned_amount(c))
                .sum::<u64>()
    }

    /// The shortest queue among nodes at `depth` within `node`'s subtree.
    fn shortest_at(&self, node: usize, depth: u32) -> usize {
        let here = self.depth(node);
        if here == depth {
            return self.nodes[node].queue.len();
        }
        self.children(node)
            .map(|c| self.shortest_at(c, depth))
            .min()
            .unwrap_or(usize::MAX)
    }

    /// Places `job` of `size` processors by the allocation policy; returns its node.
    pub fn add(&mut self, job: JobId, size: u32) -> Result<usize, DqtError> {
        let bad = || DqtError::BadSize {
            job,
            size,
            width: self.config.width,
            processors: self.config.processors(),
        };
        if self.placed.contains_key(&job) {
            return Err(DqtError::Duplicate(job));
        }
        let mut depth = self.config.height;
        let mut partition = 1u32;
        while partition < size {
            partition = partition.saturating_mul(self.config.width);
            if depth == 0 {
                return Err(bad());
            }
            depth -= 1;
        }
        if partition != size || size == 0 {
            return Err(bad());
        }
        let mut node = 0;
        while self.depth(node) < depth {
            let score = |tree: &QueueTree, c: usize| -> (u64, u64) {
                match tree.config.allocation {
                    Allocation::Max => (tree.branch_extreme(c, true) as u64, 0),
                    Allocation::Min => (tree.branch_extreme(c, false) as u64, 0),
                    Allocation::Apa => (tree.assigned_amount(c), 0),
                    Allocation::FirstFit => (tree.shortest_at(c, depth) as u64, 0),
                    Allocation::FirstFitApa => {
                        (tree.shortest_at(c, depth) as u64, tree.assigned_amount(c))
                    }
                }
            };
            // `min_by_key` keeps the first of equal keys: the leftmost child.
            node = self
                .children(node)
                .min_by_key(|&c| score(self, c))
                .unwrap_or(node);
        }
        self.insert(job, node);
        Ok(node)
    }

    /// Places `job` on `node`'s queue directly, bypassing the allocation policy (for drivers
    /// that restore a tree, and for worked examples).
    pub fn add_to(&mut self, job: JobId, node: usize) -> Result<(), DqtError> {
        if node >= self.nodes.len() {
            return Err(DqtError::NoNode(node));
        }
        if self.placed.contains_key(&job) {
            return Err(DqtError::Duplicate(job));
        }
        self.insert(job, node);
        Ok(())
    }

    fn insert(&mut self, job: JobId, node: usize) {
        self.nodes[node].queue.push_back(job);
        self.placed.insert(job, node);
        let mut up = Some(node);
        while let Some(n) = up {
            self.nodes[n].subtree_jobs += 1;
            up = (n > 0).then(|| (n - 1) / self.width());
        }
    }

    /// Takes `job` out of the tree (it ended or was killed). False if it was not there.
    pub fn remove(&mut self, job: JobId) -> bool {
        let Some(node) = self.placed.remove(&job) else {
            return false;
        };
        let entry = &mut self.nodes[node];
        if let Some(at) = entry.queue.iter().position(|&j| j == job) {
            entry.queue.remove(at);
            if let Phase::Own(pending) = &mut entry.phase
                && at < *pending
            {
                *pending -= 1;
            }
        }
        let mut up = Some(node);
        while let Some(n) = up {
            self.nodes[n].subtree_jobs -= 1;
            up = (n > 0).then(|| (n - 1) / self.width());
        }
        true
    }

    /// The slots the tree runs from its present state on: the ones before its pattern starts
    /// repeating, then the repeating pattern, found by stepping a copy until a state recurs
    /// (at most `limit` slots; a longer run is cut there and taken as the pattern). For each
    /// slot, the state that decides it and what runs.
    pub fn cycle(&self, limit: usize) -> (Vec<TreeSlot>, Vec<TreeSlot>) {
        let mut states = vec![self.clone()];
        let mut runs = Vec::new();
        while states.len() <= limit.max(1) {
            let Some(mut next) = states.last().cloned() else {
                break;
            };
            runs.push(next.slot());
            if let Some(start) = states.iter().position(|s| *s == next) {
                let pattern: Vec<TreeSlot> =
                    states.drain(start..).zip(runs.drain(start..)).collect();
                return (states.into_iter().zip(runs).collect(), pattern);
            }
            states.push(next);
        }
        (Vec::new(), states.into_iter().zip(runs).collect())
    }

    /// Decides the next slot: which jobs run, each on its node's partition. The front moves
    /// as in the thesis; when the whole tree has finished a round, the root starts another.
    pub fn slot(&mut self) -> Vec<SlotRun> {
        let mut runs: Vec<(JobId, usize)> = Vec::new();
        if self.placed.is_empty() {
            return Vec::new();
        }
        if !self.advance(0, &mut runs) {
            self.nodes[0].phase = Phase::Activated;
            self.advance(0, &mut runs);
        }
        runs.into_iter()
            .map(|(job, node)| SlotRun {
                job,
                node,
                first: self.node_first(node),
                size: self.node_size(node),
            })
            .collect()
    }

    fn activate_children(&mut self, node: usize) {
        for c in self.children(node) {
            self.nodes[c].phase = Phase::Activated;
        }
    }

    /// Whether `node`'s subtree, as it stands, reports its round finished at this boundary.
    fn completes(&self, node: usize) -> bool {
        let children_empty = || self.children(node).all(|c| self.nodes[c].subtree_jobs == 0);
        match &self.nodes[node].phase {
            Phase::Activated => self.nodes[node].queue.is_empty() && children_empty(),
            Phase::Own(pending) => *pending == 0 && children_empty(),
            Phase::Children(rounded) => self
                .children(node)
                .enumerate()
                .all(|(k, c)| rounded & (1 << k) != 0 || self.completes(c)),
            Phase::Done => true,
        }
    }

    /// Moves `node`'s subtree one slot on, pushing what runs; false if its round is over
    /// (and then nothing of it runs in this slot).
    fn advance(&mut self, node: usize, runs: &mut Vec<(JobId, usize)>) -> bool {
        let entry = &mut self.nodes[node];
        if entry.phase == Phase::Activated {
            entry.phase = Phase::Own(entry.queue.len());
        }
        if let Phase::Own(pending) = &mut entry.phase {
            if *pending > 0
                && let Some(job) = entry.queue.pop_front()
            {
                *pending -= 1;
                entry.queue.push_back(job);
                runs.push((job, node));
                return true;
            }
            entry.phase = Phase::Children(0);
            self.activate_children(node);
        }
        let Phase::Children(mut rounded) = self.nodes[node].phase else {
            return false;
        };
        let children = self.children(node);
        let all = if children.is_empty() {
            0
        } else {
            u64::MAX >> (64 - children.len())
        };
        let mut completing = 0u64;
        for (k, c) in children.clone().enumerate() {
            if self.completes(c) {
                completing |= 1 << k;
            }
        }
        if (rounded | completing) == all {
            self.nodes[node].phase = Phase::Done;
            return false;
        }
        for (k, child) in children.enumerate() {
            if completing & (1 << k) != 0 {
                rounded |= 1 << k;
                if self.config.fair {
                    self.nodes[child].phase = Phase::Done;
                    continue;
                }
                self.nodes[child].phase = Phase::Activated;
            }
            self.advance(child, runs);
        }
        self.nodes[node].phase = Phase::Children(rounded);
        true
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tree(allocation: Allocation) -> QueueTree {
        QueueTree::new(DqtConfig::for_processors(8, 2, allocation, false).unwrap()).unwrap()
    }

    #[test]
    fn partitions_tile_the_machine() {
        let t = tree(Allocation::Apa);
        assert_eq!(t.nodes.len(), 15);
        assert_eq!((t.node_first(0), t.node_size(0)), (0, 8));
        assert_eq!((t.node_first(2), t.node_size(2)), (4, 4));
        assert_eq!((t.node_first(5), t.node_size(5)), (4, 2));
        assert_eq!((t.node_first(14), t.node_size(14)), (7, 1));
    }

    #[test]
    fn sizes_that_are_not_partitions_are_refused() {
        let mut t = tree(Allocation::Apa);
        assert_eq!(
            t.add(1, 3).map_err(|e| e.to_string()),
            Err("job 1 needs 3 processors; DQT partitions are powers of 2 up to 8".to_string())
        );
        assert!(t.add(2, 16).is_err());
        assert!(t.add(3, 0).is_err());
        assert_eq!(t.add(4, 8), Ok(0));
        assert_eq!(t.add(4, 1), Err(DqtError::Duplicate(4)));
        assert_eq!(
            DqtConfig::for_processors(12, 2, Allocation::Max, false).map_err(|e| e.to_string()),
            Err("12 processors are not a power of 2; a DQT needs width^height".to_string())
        );
    }

    #[test]
    fn apa_balances_and_ff_fills_the_shortest_queue() {
        let mut t = tree(Allocation::Apa);
        // Two 4-processor jobs go to the two halves, then a 2-processor job under the half
        // with less assigned (both equal: left), then 1-processor jobs to the emptier side.
        assert_eq!(t.add(1, 4), Ok(1));
        assert_eq!(t.add(2, 4), Ok(2));
        assert_eq!(t.add(3, 2), Ok(3));
        assert_eq!(t.add(4, 1), Ok(11));
        let mut ff = tree(Allocation::FirstFit);
        assert_eq!(ff.add(1, 4), Ok(1));
        // First fit looks only at queues of the job's size: both halves have empty 2-queues,
        // so it goes left although the left half is loaded.
        assert_eq!(ff.add(2, 2), Ok(3));
    }
}
