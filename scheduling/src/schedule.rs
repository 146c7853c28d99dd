//! The scheduler SPI and what every scheduler shares: the predicted timing of a task on a
//! server, and the final timing pass that reports placements to the predictor.

use serde::{Deserialize, Serialize};

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::predictor::Predictor;

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

/// When `task` would start and finish on `server`: its inputs must arrive (from the client,
/// and from the servers of its placed producers after they finish), then it computes at the
/// predicted speed. Producers not yet placed are not waited for.
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
    let mut ready = predictor
        .link(Location::Client, here)
        .transfer_time(t.client_in_bytes);
    for &(producer, bytes) in &predecessors[task] {
        if let Some(Some((from, timing))) = placed.get(producer) {
            let arrival = timing.finish
                + predictor
                    .link(Location::Server(*from), here)
                    .transfer_time(bytes);
            ready = ready.max(arrival);
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

/// Times a complete assignment in topological order, reporting each placement to the
/// predictor as it goes, and builds the schedule.
pub fn finish_schedule(
    graph: &TaskGraph,
    order: &[TaskId],
    servers: Vec<ServerId>,
    predictor: &mut dyn Predictor,
) -> Schedule {
    let predecessors = graph.predecessors();
    let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
    for &task in order {
        let server = servers[task];
        let timing = predict(graph, &predecessors, task, server, &placed, predictor);
        predictor.place(
            server,
            graph.tasks[task].processors,
            timing.start,
            timing.finish,
        );
        placed[task] = Some((server, timing));
    }
    assemble(graph, servers, placed, predictor)
}

/// The predicted makespan of an assignment under the common model, leaving the predictor as
/// it was (every placement made while timing it is withdrawn).
pub fn evaluate(
    graph: &TaskGraph,
    order: &[TaskId],
    predecessors: &[Vec<(TaskId, u64)>],
    servers: &[ServerId],
    predictor: &mut dyn Predictor,
) -> f64 {
    let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
    let mut ids = Vec::with_capacity(order.len());
    let mut makespan = 0.0f64;
    for &task in order {
        let server = servers[task];
        let timing = predict(graph, predecessors, task, server, &placed, predictor);
        ids.push(predictor.place(
            server,
            graph.tasks[task].processors,
            timing.start,
            timing.finish,
        ));
        placed[task] = Some((server, timing));
        let back = predictor
            .link(Location::Server(server), Location::Client)
            .transfer_time(graph.tasks[task].client_out_bytes);
        makespan = makespan.max(timing.finish + back);
    }
    for id in ids {
        predictor.withdraw(id);
    }
    makespan
}

/// The schedule from per-task placements and timings.
pub fn assemble(
    graph: &TaskGraph,
    servers: Vec<ServerId>,
    placed: Vec<Option<(ServerId, Timing)>>,
    predictor: &dyn Predictor,
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
    let makespan = graph
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            timings[i].finish
                + predictor
                    .link(Location::Server(servers[i]), Location::Client)
                    .transfer_time(t.client_out_bytes)
        })
        .fold(0.0, f64::max);
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
