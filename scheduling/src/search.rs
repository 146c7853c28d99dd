//! `search`, our own scheduler: start from the best of SIMPLE, FLOW, HEFT, PEFT, lookahead
//! HEFT, the seed's SIMPLE and FLOW, and each server alone, then improve by
//! local search under the full model of the metaserver's knowledge, and keep a change only if
//! the whole graph's predicted makespan drops.
//!
//! Every candidate is timed by the common model ([`evaluate`]), so each decision accounts
//! for everything the predictor knows:
//! - each server's measured (or forecast) load and the other transactions already placed;
//! - the time-sharing slowdown when this graph's own tasks overlap on a busy server;
//! - where every intermediate result lives, and what moving it costs on that link;
//! - the proxy's links for arguments in and results out.
//!
//! The list schedulers only see these one task (or one path) at a time. The search moves:
//! - **single tasks**, in decreasing upward rank (the critical ones first), to every other
//!   server that serves their routine;
//! - **both ends of an edge** to a server that serves both;
//! - **whole clusters**: tasks joined by edges on the same server, as FLOW's paths are. They
//!   move to every server that serves all their routines, which a single-task move cannot
//!   reach when splitting a cluster costs more than it saves.
//!
//! It stops when a full round of moves improves nothing, or at an evaluation budget that
//! shrinks with the graph's size, so a 500-task graph still schedules in well under a second.
//!
//! Every placement is timed with its client arrays staged ([`crate::staging`]): uploaded
//! ahead of their calls, one at a time per path, possibly through another server. So the
//! search chooses placements that staging serves well, such as every task on the fastest
//! server with half its inputs relayed through a slower one. The final schedule keeps the
//! staging unless the model says sending with the calls is clearly faster.

use crate::flow::Flow;
use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, ServerId};
use crate::list::heft::{Heft, rank_order, upward_ranks};
use crate::list::lookahead::LookaheadHeft;
use crate::list::peft::Peft;
use crate::predictor::{Model, Predictor};
use crate::schedule::{
    Prepared, Schedule, Scheduler, evaluate, evaluate_staged, finish_schedule, finish_staged,
};
use crate::seed::{SeedFlow, SeedSimple};
use crate::simple::Simple;
use crate::staging;

/// Relative gain below which a move is not worth taking (rounding noise).
const MIN_GAIN: f64 = 1e-9;

/// How much later than predicted a graph whose calls carry their own data ends, relative to
/// a staged one: the model times concurrent transfers on a path optimistically.
const UNSTAGED_BIAS: f64 = 1.15;

#[derive(Debug, Default)]
pub struct LocalSearch;

/// How many whole-graph timings a graph of `tasks` tasks may use. Under the shared model a
/// timing books every task and transfer on timelines that the next prediction searches;
/// under the exclusive one it is a pass over the tasks, each scanning its server's few
/// placements, so the same time buys many more.
fn budget(tasks: usize, model: Model) -> usize {
    match model {
        Model::Shared => (400_000 / tasks.max(1).pow(2)).clamp(60, 4_000),
        Model::Exclusive => (300_000 / tasks.max(1)).clamp(60, 20_000),
    }
}

/// Tasks joined by edges whose ends are on the same server, as lists of tasks.
fn clusters(graph: &TaskGraph, servers: &[ServerId]) -> Vec<Vec<TaskId>> {
    let n = graph.tasks.len();
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for e in &graph.edges {
        if e.from < n && e.to < n && servers[e.from] == servers[e.to] {
            let (a, b) = (root(&mut parent, e.from), root(&mut parent, e.to));
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<TaskId>> = Default::default();
    for t in 0..n {
        let r = root(&mut parent, t);
        groups.entry(r).or_default().push(t);
    }
    groups.into_values().filter(|g| g.len() > 1).collect()
}

impl Scheduler for LocalSearch {
    fn name(&self) -> &'static str {
        "search"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let rank = upward_ranks(graph, &prepared, grid, predictor);
        let by_rank = rank_order(&prepared, &rank);
        // Under the exclusive model the order tasks take their servers in decides their
        // times: every assignment is timed in HEFT's, so HEFT's own is found again.
        let order = match predictor.model() {
            Model::Exclusive => &by_rank,
            Model::Shared => &prepared.order,
        };
        let predecessors = &prepared.predecessors;
        // Starting points: each list scheduler on its own copy of the predictor.
        let mut best: Option<(Vec<ServerId>, f64)> = None;
        let starts: [Box<dyn Scheduler>; 7] = [
            Box::new(Simple),
            Box::new(Flow),
            Box::new(Heft),
            Box::new(Peft),
            Box::new(LookaheadHeft),
            Box::new(SeedSimple),
            Box::new(SeedFlow),
        ];
        for mut start in starts {
            let mut scratch = predictor.fork();
            let servers = start.schedule(graph, grid, scratch.as_mut())?.servers;
            let makespan = staged_makespan(graph, grid, order, &prepared, &servers, predictor);
            if best.as_ref().is_none_or(|(_, m)| makespan < *m) {
                best = Some((servers, makespan));
            }
        }
        // And every server alone, where one serves every routine: when data is expensive
        // to move, keeping all of it in one place can beat any list schedule.
        for s in 0..grid.servers.len() {
            let all = (0..graph.tasks.len()).all(|t| prepared.serves[prepared.function_of[t]][s]);
            if !all {
                continue;
            }
            let servers = vec![s; graph.tasks.len()];
            let makespan = staged_makespan(graph, grid, order, &prepared, &servers, predictor);
            if best.as_ref().is_none_or(|(_, m)| makespan < *m) {
                best = Some((servers, makespan));
            }
        }
        let Some((servers, makespan)) = best else {
            return Ok(finish_schedule(graph, order, Vec::new(), predictor));
        };
        let mut trial = Trial {
            graph,
            grid,
            order,
            prepared: &prepared,
            servers,
            makespan,
            left: budget(graph.tasks.len(), predictor.model()),
        };
        let mut improved = true;
        while improved && trial.left > 0 {
            improved = trial.single_moves(&by_rank, predictor);
            improved |= trial.edge_moves(predictor);
            improved |= trial.cluster_moves(predictor);
            // Stuck: any two tasks to any two servers, the critical ones first, for as long
            // as the budget lasts (it covers every pair on small graphs).
            if !improved {
                improved = trial.pair_moves(&by_rank, predictor);
            }
        }
        let (staging, staged) =
            staging::plan_and_improve(graph, grid, order, &trial.servers, predictor);
        // Calls sending together share their paths, and the model predicts the first of them
        // early (`docs/experiments.md`: per-task errors of 28-50% unstaged against 9-16%
        // staged on the testbed). So staging is dropped only when the model says it loses
        // by more than that bias.
        let unstaged = evaluate(graph, order, predecessors, &trial.servers, predictor);
        if staging.is_empty() || unstaged * UNSTAGED_BIAS < staged {
            return Ok(finish_schedule(graph, order, trial.servers, predictor));
        }
        Ok(finish_staged(
            graph,
            order,
            trial.servers,
            staging,
            predictor,
        ))
    }
}

/// The predicted makespan of `servers`, timed in `order`, with its client arrays staged as
/// [`staging::plan`] would stage them.
fn staged_makespan(
    graph: &TaskGraph,
    grid: &GridView,
    order: &[TaskId],
    prepared: &Prepared,
    servers: &[ServerId],
    predictor: &mut dyn Predictor,
) -> f64 {
    let staging = staging::plan(graph, grid, order, servers, predictor);
    evaluate_staged(
        graph,
        order,
        &prepared.predecessors,
        servers,
        &staging,
        predictor,
    )
}

/// One search's assignment, its predicted makespan, and the whole-graph timings it may
/// still spend.
struct Trial<'a> {
    graph: &'a TaskGraph,
    grid: &'a GridView,
    /// The order assignments are timed in.
    order: &'a [TaskId],
    prepared: &'a Prepared,
    servers: Vec<ServerId>,
    makespan: f64,
    left: usize,
}

impl Trial<'_> {
    /// Each task to each other server that can run it, the critical ones first; the first
    /// move that helps a task is kept.
    fn single_moves(&mut self, by_rank: &[TaskId], predictor: &mut dyn Predictor) -> bool {
        let prepared = self.prepared;
        let mut improved = false;
        for &t in by_rank {
            let current = self.servers[t];
            for &s in &prepared.capable[prepared.function_of[t]] {
                if s != current && self.left > 0 && self.try_move(&[(t, s)], predictor) {
                    improved = true;
                    break;
                }
            }
        }
        improved
    }

    /// Both ends of an edge together: a producer and its consumer that are each better
    /// where they are alone may be better elsewhere as a pair.
    fn edge_moves(&mut self, predictor: &mut dyn Predictor) -> bool {
        let (graph, prepared) = (self.graph, self.prepared);
        let mut improved = false;
        for edge in &graph.edges {
            let (u, v) = (edge.from, edge.to);
            for s in 0..self.grid.servers.len() {
                let already = self.servers[u] == s && self.servers[v] == s;
                let serves = prepared.serves[prepared.function_of[u]][s]
                    && prepared.serves[prepared.function_of[v]][s];
                if self.left > 0
                    && !already
                    && serves
                    && self.try_move(&[(u, s), (v, s)], predictor)
                {
                    improved = true;
                    break;
                }
            }
        }
        improved
    }

    /// Every cluster of tasks placed together, moved whole to each other server that can
    /// run all of it.
    fn cluster_moves(&mut self, predictor: &mut dyn Predictor) -> bool {
        let prepared = self.prepared;
        let mut improved = false;
        for cluster in clusters(self.graph, &self.servers) {
            let current = self.servers[cluster[0]];
            let targets: Vec<ServerId> = (0..self.grid.servers.len())
                .filter(|&s| {
                    s != current
                        && cluster
                            .iter()
                            .all(|&t| prepared.serves[prepared.function_of[t]][s])
                })
                .collect();
            for s in targets {
                if self.left == 0 {
                    break;
                }
                let moves: Vec<(TaskId, ServerId)> = cluster.iter().map(|&t| (t, s)).collect();
                if self.try_move(&moves, predictor) {
                    improved = true;
                    break;
                }
            }
        }
        improved
    }

    /// Moves each listed task to its server and times the graph; keeps the move if the
    /// makespan drops, and undoes it otherwise.
    fn try_move(&mut self, moves: &[(TaskId, ServerId)], predictor: &mut dyn Predictor) -> bool {
        let before: Vec<ServerId> = moves.iter().map(|&(t, _)| self.servers[t]).collect();
        for &(t, s) in moves {
            self.servers[t] = s;
        }
        self.left = self.left.saturating_sub(1);
        let m = staged_makespan(
            self.graph,
            self.grid,
            self.order,
            self.prepared,
            &self.servers,
            predictor,
        );
        if m < self.makespan * (1.0 - MIN_GAIN) {
            self.makespan = m;
            return true;
        }
        for (&(t, _), s) in moves.iter().zip(before) {
            self.servers[t] = s;
        }
        false
    }

    /// Tries moving two tasks at once; keeps the first move that shortens the makespan.
    fn pair_moves(&mut self, by_rank: &[TaskId], predictor: &mut dyn Predictor) -> bool {
        let prepared = self.prepared;
        for (i, &t) in by_rank.iter().enumerate() {
            for &u in &by_rank[i + 1..] {
                let (ct, cu) = (self.servers[t], self.servers[u]);
                for &st in &prepared.capable[prepared.function_of[t]] {
                    for &su in &prepared.capable[prepared.function_of[u]] {
                        if st == ct || su == cu {
                            continue;
                        }
                        if self.left == 0 {
                            return false;
                        }
                        if self.try_move(&[(t, st), (u, su)], predictor) {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }
}

/// The best assignment by trying them all (for tests on small graphs): at most `limit`
/// assignments, else `None`.
pub fn exhaustive(
    graph: &TaskGraph,
    grid: &GridView,
    predictor: &mut dyn Predictor,
    limit: usize,
) -> Result<Option<(Vec<ServerId>, f64)>, GraphError> {
    let prepared = Prepared::new(graph, grid)?;
    let choices: Vec<&Vec<ServerId>> = (0..graph.tasks.len())
        .map(|t| &prepared.capable[prepared.function_of[t]])
        .collect();
    let mut total: usize = 1;
    for c in &choices {
        total = match total.checked_mul(c.len()) {
            Some(v) if v <= limit => v,
            _ => return Ok(None),
        };
    }
    let mut digits = vec![0usize; choices.len()];
    let mut best: Option<(Vec<ServerId>, f64)> = None;
    for _ in 0..total {
        let servers: Vec<ServerId> = digits.iter().zip(&choices).map(|(&d, c)| c[d]).collect();
        let m = evaluate(
            graph,
            &prepared.order,
            &prepared.predecessors,
            &servers,
            predictor,
        );
        if best.as_ref().is_none_or(|(_, b)| m < *b) {
            best = Some((servers, m));
        }
        for (d, c) in digits.iter_mut().zip(&choices) {
            *d += 1;
            if *d < c.len() {
                break;
            }
            *d = 0;
        }
    }
    Ok(best)
}
