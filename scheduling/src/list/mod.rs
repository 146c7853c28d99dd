//! List scheduling, what HEFT, PEFT and lookahead HEFT share: tasks taken one at a time in
//! a priority order, each given a server by its earliest finish with insertion into idle
//! stretches ([`Partial`]), then the whole assignment timed by the predictor's model.
//!
//! - [`heft`]: HEFT (Topcuoglu, Hariri and Wu 2002), upward rank and earliest finish.
//! - [`peft`]: PEFT (Arabnejad and Barbosa 2014), the optimistic cost table.
//! - [`lookahead`]: HEFT with one step of lookahead (Bittencourt, Sakellariou and Madeira
//!   2010): a task goes where its children, placed after it by HEFT's rule, finish first.

pub mod heft;
pub mod lookahead;
pub mod peft;

use crate::classic::Busy;
use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::predictor::{Model, Predictor};
use crate::schedule::{Prepared, Schedule, finish_schedule};

/// A list schedule in the making: each placed task's server and finish, each server's use
/// by this graph's tasks, and the order tasks were placed in.
#[derive(Debug, Clone)]
pub struct Partial {
    servers: Vec<ServerId>,
    finish: Vec<f64>,
    placed: Vec<bool>,
    busy: Vec<Busy>,
    order: Vec<TaskId>,
}

impl Partial {
    pub fn new(graph: &TaskGraph, grid: &GridView) -> Partial {
        Partial {
            servers: vec![0; graph.tasks.len()],
            finish: vec![0.0; graph.tasks.len()],
            placed: vec![false; graph.tasks.len()],
            busy: vec![Busy::default(); grid.servers.len()],
            order: Vec::with_capacity(graph.tasks.len()),
        }
    }

    /// When `task` would start and finish on `server`: its client data from the start and
    /// each placed producer's output from its finish, each over its link (producers not
    /// placed yet are not waited for); then the first stretch where its processors are free
    /// long enough.
    pub fn timing(
        &self,
        graph: &TaskGraph,
        prepared: &Prepared,
        grid: &GridView,
        predictor: &dyn Predictor,
        (task, server): (TaskId, ServerId),
    ) -> (f64, f64) {
        let t = &graph.tasks[task];
        let here = Location::Server(server);
        let mut ready = predictor
            .link(Location::Client, here)
            .transfer_time(t.client_in_bytes);
        for r in graph.resident(task) {
            if let Some(from) = r.source_for(server) {
                let link = predictor.link(Location::Server(from), here);
                ready = ready.max(link.transfer_time(r.bytes));
            }
        }
        for &(p, bytes) in &prepared.predecessors[task] {
            if !self.placed[p] {
                continue;
            }
            let from = Location::Server(self.servers[p]);
            ready = ready.max(self.finish[p] + predictor.link(from, here).transfer_time(bytes));
        }
        let duration = predictor.compute_time(server, t, ready);
        let start = self.busy[server].earliest(
            ready,
            duration,
            t.processors.max(1),
            grid.servers[server].processors.max(1),
        );
        (start, start + duration)
    }

    /// The capable server where `task` finishes first (the lowest id among equals), with its
    /// start and finish there.
    pub fn earliest_finish(
        &self,
        graph: &TaskGraph,
        prepared: &Prepared,
        grid: &GridView,
        predictor: &dyn Predictor,
        task: TaskId,
    ) -> Result<(ServerId, f64, f64), GraphError> {
        let mut best: Option<(ServerId, f64, f64)> = None;
        for &s in &prepared.capable[prepared.function_of[task]] {
            let (start, end) = self.timing(graph, prepared, grid, predictor, (task, s));
            if best.is_none_or(|(_, _, e)| end < e) {
                best = Some((s, start, end));
            }
        }
        best.ok_or_else(|| unimplemented(graph, task))
    }

    pub fn place(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        task: TaskId,
        at: (ServerId, f64, f64),
    ) {
        let (server, start, end) = at;
        let processors = graph.tasks[task]
            .processors
            .max(1)
            .min(grid.servers[server].processors.max(1));
        self.busy[server].insert(start, end, processors);
        self.servers[task] = server;
        self.finish[task] = end;
        self.placed[task] = true;
        self.order.push(task);
    }

    /// The latest finish among the placed tasks.
    pub fn last_finish(&self) -> f64 {
        self.order
            .iter()
            .map(|&t| self.finish[t])
            .fold(0.0, f64::max)
    }

    /// The schedule the predictor times for this assignment: under [`Model::Exclusive`] in
    /// the order the tasks were placed, which reproduces the list's own timing; under
    /// [`Model::Shared`] in dependency order, as the proxy issues them.
    pub fn finish(
        self,
        graph: &TaskGraph,
        prepared: &Prepared,
        predictor: &mut dyn Predictor,
    ) -> Schedule {
        let order = match predictor.model() {
            Model::Exclusive if self.order.len() == graph.tasks.len() => &self.order,
            _ => &prepared.order,
        };
        finish_schedule(graph, order, self.servers.clone(), predictor)
    }
}

/// No up server serves `task`'s routine.
pub fn unimplemented(graph: &TaskGraph, task: TaskId) -> GraphError {
    GraphError::Unimplemented {
        label: graph.tasks[task].label.clone(),
        function: graph.tasks[task].function.clone(),
    }
}

/// Mean transfer time of `bytes` between distinct up servers, and from servers to the client.
pub struct MeanLinks {
    between: Vec<(Location, Location)>,
    to_client: Vec<(Location, Location)>,
}

impl MeanLinks {
    pub fn new(grid: &GridView) -> MeanLinks {
        let up: Vec<ServerId> = (0..grid.servers.len())
            .filter(|&s| grid.servers[s].up)
            .collect();
        let mut between = Vec::new();
        for &a in &up {
            for &b in &up {
                if a != b {
                    between.push((Location::Server(a), Location::Server(b)));
                }
            }
        }
        let to_client = up
            .iter()
            .map(|&s| (Location::Server(s), Location::Client))
            .collect();
        MeanLinks { between, to_client }
    }

    /// Mean time of `bytes` between two distinct servers.
    pub fn between(&self, bytes: u64, predictor: &dyn Predictor) -> f64 {
        Self::mean(&self.between, bytes, predictor)
    }

    /// Mean time of `bytes` from a server to the client.
    pub fn to_client(&self, bytes: u64, predictor: &dyn Predictor) -> f64 {
        Self::mean(&self.to_client, bytes, predictor)
    }

    fn mean(pairs: &[(Location, Location)], bytes: u64, predictor: &dyn Predictor) -> f64 {
        if pairs.is_empty() || bytes == 0 {
            return 0.0;
        }
        pairs
            .iter()
            .map(|&(a, b)| predictor.link(a, b).transfer_time(bytes))
            .sum::<f64>()
            / pairs.len() as f64
    }
}

/// A task's mean compute time over the servers that serve its routine.
pub fn mean_cost(
    graph: &TaskGraph,
    prepared: &Prepared,
    predictor: &dyn Predictor,
    task: TaskId,
) -> f64 {
    let servers = &prepared.capable[prepared.function_of[task]];
    if servers.is_empty() {
        return 0.0;
    }
    servers
        .iter()
        .map(|&s| predictor.compute_time(s, &graph.tasks[task], 0.0))
        .sum::<f64>()
        / servers.len() as f64
}
