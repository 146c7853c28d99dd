//! The scheduler SPI and what every scheduler shares: the predicted timing of a task on a
//! server, and the final timing pass that reports placements to the predictor.

use serde::{Deserialize, Serialize};

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::predictor::{PlacementId, Predictor};

/// Predicted start and finish of a task, in seconds from the schedule's start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    pub start: f64,
    pub finish: f64,
}

/// A placement of a whole graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// The server of each task.
    pub servers: Vec<ServerId>,
    /// Predicted timing of each task.
    pub timings: Vec<Timing>,
    /// Where each edge's data lives: on the server that produced it.
    pub data: Vec<Location>,
    /// Predicted end of the whole graph, results back at the client.
    pub makespan: f64,
}

impl Schedule {
    /// Share of edges whose producer and consumer are on different servers.
    pub fn inter_server_ratio(&self, graph: &TaskGraph) -> f64 {
        if graph.edges.is_empty() {
            return 0.0;
        }
        let crossing = graph
            .edges
            .iter()
            .filter(|e| self.servers[e.from] != self.servers[e.to])
            .count();
        crossing as f64 / graph.edges.len() as f64
    }
}

/// The scheduler SPI: maps a Network Task graph onto servers. Implementations are chosen by
/// name in the metaserver's configuration (see [`crate::by_name`]).
pub trait Scheduler: Send {
    fn name(&self) -> &'static str;
    /// Places every task; reports the placements to the predictor.
    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError>;
}

/// Checks the graph against itself and the grid; returns a topological order.
pub fn check(graph: &TaskGraph, grid: &GridView) -> Result<Vec<TaskId>, GraphError> {
    graph.validate()?;
    grid.check(graph)?;
    graph.topological_order()
}

/// What a scheduler needs about a checked graph, computed once per schedule.
pub struct Prepared {
    pub order: Vec<TaskId>,
    pub predecessors: Vec<Vec<(TaskId, u64)>>,
    /// Index of each task's routine in `capable`.
    pub function_of: Vec<usize>,
    /// For each routine, the up servers that serve it, in id order.
    pub capable: Vec<Vec<ServerId>>,
    /// `serves[routine][server]`.
    pub serves: Vec<Vec<bool>>,
}

impl Prepared {
    pub fn new(graph: &TaskGraph, grid: &GridView) -> Result<Prepared, GraphError> {
        let order = check(graph, grid)?;
        let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        let mut capable = Vec::new();
        let mut serves = Vec::new();
        let function_of = graph
            .tasks
            .iter()
            .map(|t| {
                *index.entry(t.function.as_str()).or_insert_with(|| {
                    let servers: Vec<ServerId> = grid.capable(&t.function).collect();
                    let mut row = vec![false; grid.servers.len()];
                    for &s in &servers {
                        row[s] = true;
                    }
                    capable.push(servers);
                    serves.push(row);
                    capable.len() - 1
                })
            })
            .collect();
        Ok(Prepared {
            order,
            predecessors: graph.predecessors(),
            function_of,
            capable,
            serves,
        })
    }
}

/// When the proxy would issue `task`: once every placed producer has finished (it issues a
/// task when its inputs exist). Producers not yet placed are not waited for.
pub fn issue_time(
    predecessors: &[Vec<(TaskId, u64)>],
    task: TaskId,
    placed: &[Option<(ServerId, Timing)>],
) -> f64 {
    predecessors[task]
        .iter()
        .filter_map(|&(producer, _)| placed.get(producer).copied().flatten())
        .map(|(_, timing)| timing.finish)
        .fold(0.0, f64::max)
}

/// When `task` would start and finish on `server`. The proxy issues it once its placed
/// producers have finished; its inputs then move to the server all at once, from the client
/// and from the producers' servers, each over its path as the predictor expects it shared;
/// it computes at the predicted speed once the last input is in.
pub fn predict(
    graph: &TaskGraph,
    predecessors: &[Vec<(TaskId, u64)>],
    task: TaskId,
    server: ServerId,
    placed: &[Option<(ServerId, Timing)>],
    predictor: &dyn Predictor,
) -> Timing {
    let t = &graph.tasks[task];
    let here = Location::Server(server);
    let issue = issue_time(predecessors, task, placed);
    let mut ready =
        issue + predictor.transfer_time(Location::Client, here, t.client_in_bytes, issue);
    for &(producer, bytes) in &predecessors[task] {
        if let Some(Some((from, _))) = placed.get(producer) {
            let from = Location::Server(*from);
            ready = ready.max(issue + predictor.transfer_time(from, here, bytes, issue));
        }
    }
    let speed = predictor.speed(server, t.processors, ready);
    let compute = if t.flops == 0.0 {
        0.0
    } else {
        t.flops / speed.max(f64::MIN_POSITIVE)
    };
    Timing {
        start: ready,
        finish: ready + compute,
    }
}

/// Records with the predictor a task placed on `server` with `timing` (from [`predict`]) and
/// the transfers that timing assumed: its inputs from the issue time, and its results back to
/// the client after it finishes. Pushes every recorded id to `ids`; returns when the task's
/// results reach the client.
pub fn record(
    graph: &TaskGraph,
    predecessors: &[Vec<(TaskId, u64)>],
    task: TaskId,
    (server, timing): (ServerId, Timing),
    placed: &[Option<(ServerId, Timing)>],
    predictor: &mut dyn Predictor,
    ids: &mut Vec<PlacementId>,
) -> f64 {
    let t = &graph.tasks[task];
    let here = Location::Server(server);
    let issue = issue_time(predecessors, task, placed);
    let mut inputs: Vec<(Location, u64)> = vec![(Location::Client, t.client_in_bytes)];
    for &(producer, bytes) in &predecessors[task] {
        if let Some(Some((from, _))) = placed.get(producer) {
            inputs.push((Location::Server(*from), bytes));
        }
    }
    for (from, bytes) in inputs {
        if bytes > 0 && from != here {
            let finish = issue + predictor.transfer_time(from, here, bytes, issue);
            ids.extend(predictor.place_transfer(from, here, issue, finish));
        }
    }
    ids.push(predictor.place(server, t.processors, timing.start, timing.finish));
    let back = predictor.transfer_time(here, Location::Client, t.client_out_bytes, timing.finish);
    if t.client_out_bytes > 0 {
        ids.extend(predictor.place_transfer(
            here,
            Location::Client,
            timing.finish,
            timing.finish + back,
        ));
    }
    timing.finish + back
}

/// Times a complete assignment in topological order, reporting each placement (and the
/// transfers it implies) to the predictor as it goes, and builds the schedule.
pub fn finish_schedule(
    graph: &TaskGraph,
    order: &[TaskId],
    servers: Vec<ServerId>,
    predictor: &mut dyn Predictor,
) -> Schedule {
    let predecessors = graph.predecessors();
    let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
    let mut ids = Vec::new();
    let mut makespan = 0.0f64;
    for &task in order {
        let server = servers[task];
        let timing = predict(graph, &predecessors, task, server, &placed, predictor);
        let done = record(
            graph,
            &predecessors,
            task,
            (server, timing),
            &placed,
            predictor,
            &mut ids,
        );
        makespan = makespan.max(done);
        placed[task] = Some((server, timing));
    }
    assemble(graph, servers, placed, makespan)
}

/// The predicted makespan of an assignment under the common model, leaving the predictor as
/// it was (every placement and transfer recorded while timing it is withdrawn).
pub fn evaluate(
    graph: &TaskGraph,
    order: &[TaskId],
    predecessors: &[Vec<(TaskId, u64)>],
    servers: &[ServerId],
    predictor: &mut dyn Predictor,
) -> f64 {
    let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
    let mut ids = Vec::with_capacity(order.len() * 2);
    let mut makespan = 0.0f64;
    for &task in order {
        let server = servers[task];
        let timing = predict(graph, predecessors, task, server, &placed, predictor);
        let done = record(
            graph,
            predecessors,
            task,
            (server, timing),
            &placed,
            predictor,
            &mut ids,
        );
        makespan = makespan.max(done);
        placed[task] = Some((server, timing));
    }
    for id in ids {
        predictor.withdraw(id);
    }
    makespan
}

/// The schedule from per-task placements and timings, and its predicted makespan.
pub fn assemble(
    graph: &TaskGraph,
    servers: Vec<ServerId>,
    placed: Vec<Option<(ServerId, Timing)>>,
    makespan: f64,
) -> Schedule {
    let timings: Vec<Timing> = placed
        .iter()
        .map(|p| {
            p.map_or(
                Timing {
                    start: 0.0,
                    finish: 0.0,
                },
                |(_, t)| t,
            )
        })
        .collect();
    let data = graph
        .edges
        .iter()
        .map(|e| Location::Server(servers[e.from]))
        .collect();
    Schedule {
        servers,
        timings,
        data,
        makespan,
    }
}
