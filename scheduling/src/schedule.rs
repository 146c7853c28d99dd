//! The scheduler SPI and what every scheduler shares: the predicted timing of a task on a
//! server, and the final timing pass that reports placements to the predictor.

use serde::{Deserialize, Serialize};

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::predictor::{Model, PlacementId, Predictor};

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
    /// Client arrays the proxy uploads ahead of their calls, in upload order; empty: every
    /// call carries its own client data, as in the seed (see [`crate::staging`]).
    #[serde(default)]
    pub staging: Vec<Staged>,
}

/// One client array uploaded ahead of its task's call into a server's storage: the task's
/// own server, or another whose path from the client is free sooner (the task then reads
/// the array from there, server to server). The proxy sends one array at a time per server,
/// in the plan's order, and issues a task once its arrays are in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Staged {
    pub task: TaskId,
    /// The routine's parameter index.
    pub parameter: u32,
    pub bytes: u64,
    /// The server whose storage receives it.
    pub via: ServerId,
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
    /// Index of each task's class (its routine and pin) in `capable`.
    pub function_of: Vec<usize>,
    /// For each class, the up servers that may run it, in id order.
    pub capable: Vec<Vec<ServerId>>,
    /// `serves[routine][server]`.
    pub serves: Vec<Vec<bool>>,
}

impl Prepared {
    pub fn new(graph: &TaskGraph, grid: &GridView) -> Result<Prepared, GraphError> {
        let order = check(graph, grid)?;
        // Tasks are grouped by the servers open to them: their routine, and their pin (with
        // the servers it admits besides).
        type Class<'g> = (&'g str, Option<ServerId>, &'g [ServerId]);
        let mut index: std::collections::HashMap<Class, usize> = std::collections::HashMap::new();
        let mut capable = Vec::new();
        let mut serves = Vec::new();
        let function_of = graph
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let class = (t.function.as_str(), graph.pinned(i), graph.pinned_with(i));
                *index.entry(class).or_insert_with(|| {
                    let servers: Vec<ServerId> = grid.capable_for(graph, i);
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

/// A task's arrays uploaded ahead of its call: (server holding it, bytes, when it is in).
pub type StagedArrival = (ServerId, u64, f64);

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
    predict_staged(graph, predecessors, task, server, placed, &[], predictor)
}

/// When the call is issued and what it then moves: once its producers have finished and its
/// staged arrays are in; the client data not staged, the producers' outputs, and the staged
/// arrays held on other servers, each with when it leaves. Under [`Model::Shared`] everything
/// leaves when the call is issued (the proxy sends the call once its inputs exist); under
/// [`Model::Exclusive`] each output leaves when its producer finishes, a staged array when
/// it is in and the client's data at the start. An iterator, not a list: every candidate
/// server of every task is timed through here, and an allocation each time was a tenth of
/// FLOW's cost.
fn call_inputs<'a>(
    graph: &'a TaskGraph,
    predecessors: &'a [Vec<(TaskId, u64)>],
    (task, server): (TaskId, ServerId),
    placed: &'a [Option<(ServerId, Timing)>],
    staged: &'a [StagedArrival],
    model: Model,
) -> (f64, impl Iterator<Item = (Location, u64, f64)> + 'a) {
    let issue = match model {
        Model::Shared => staged
            .iter()
            .map(|&(_, _, arrived)| arrived)
            .fold(issue_time(predecessors, task, placed), f64::max),
        Model::Exclusive => 0.0,
    };
    let leaves = move |available: f64| match model {
        Model::Shared => issue,
        Model::Exclusive => available,
    };
    let staged_bytes: u64 = staged.iter().map(|&(_, bytes, _)| bytes).sum();
    let client = (
        Location::Client,
        graph.tasks[task]
            .client_in_bytes
            .saturating_sub(staged_bytes),
        leaves(0.0),
    );
    let producers = predecessors[task]
        .iter()
        .filter_map(move |&(producer, bytes)| match placed.get(producer) {
            Some(Some((from, timing))) => {
                Some((Location::Server(*from), bytes, leaves(timing.finish)))
            }
            _ => None,
        });
    let uploads = staged
        .iter()
        .map(move |&(via, bytes, arrived)| (Location::Server(via), bytes, leaves(arrived)));
    // Data kept on the grid is there before the call: it leaves when the call is issued.
    let resident = graph.resident(task).iter().filter_map(move |r| {
        r.source_for(server)
            .map(|from| (Location::Server(from), r.bytes, leaves(0.0)))
    });
    (
        issue,
        std::iter::once(client)
            .chain(producers)
            .chain(uploads)
            .chain(resident),
    )
}

/// [`predict`] for a task some of whose client arrays were uploaded ahead of its call.
pub fn predict_staged(
    graph: &TaskGraph,
    predecessors: &[Vec<(TaskId, u64)>],
    task: TaskId,
    server: ServerId,
    placed: &[Option<(ServerId, Timing)>],
    staged: &[StagedArrival],
    predictor: &dyn Predictor,
) -> Timing {
    let t = &graph.tasks[task];
    let here = Location::Server(server);
    let (issue, inputs) = call_inputs(
        graph,
        predecessors,
        (task, server),
        placed,
        staged,
        predictor.model(),
    );
    let ready = inputs
        .map(|(from, bytes, leaves)| leaves + predictor.transfer_time(from, here, bytes, leaves))
        .fold(issue, f64::max);
    let duration = predictor.compute_time(server, t, ready);
    let start = predictor.earliest_start(server, t.processors, ready, duration);
    let duration = if start == ready {
        duration
    } else {
        predictor.compute_time(server, t, start)
    };
    Timing {
        start,
        finish: start + duration,
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
    placement: (ServerId, Timing),
    placed: &[Option<(ServerId, Timing)>],
    predictor: &mut dyn Predictor,
    ids: &mut Vec<PlacementId>,
) -> f64 {
    record_staged(
        graph,
        predecessors,
        task,
        placement,
        placed,
        &[],
        predictor,
        ids,
    )
}

/// [`record`] for a task some of whose client arrays were uploaded ahead of its call (the
/// uploads themselves are recorded by [`upload_arrivals`]).
#[allow(clippy::too_many_arguments)]
pub fn record_staged(
    graph: &TaskGraph,
    predecessors: &[Vec<(TaskId, u64)>],
    task: TaskId,
    (server, timing): (ServerId, Timing),
    placed: &[Option<(ServerId, Timing)>],
    staged: &[StagedArrival],
    predictor: &mut dyn Predictor,
    ids: &mut Vec<PlacementId>,
) -> f64 {
    let t = &graph.tasks[task];
    let here = Location::Server(server);
    let (_, inputs) = call_inputs(
        graph,
        predecessors,
        (task, server),
        placed,
        staged,
        predictor.model(),
    );
    for (from, bytes, leaves) in inputs {
        if bytes > 0 && from != here {
            let finish = leaves + predictor.transfer_time(from, here, bytes, leaves);
            ids.extend(predictor.place_transfer(from, here, leaves, finish));
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
    finish_staged(graph, order, servers, Vec::new(), predictor)
}

/// [`finish_schedule`] with client arrays uploaded ahead of their calls as `staging` says.
pub fn finish_staged(
    graph: &TaskGraph,
    order: &[TaskId],
    servers: Vec<ServerId>,
    staging: Vec<Staged>,
    predictor: &mut dyn Predictor,
) -> Schedule {
    let predecessors = graph.predecessors();
    let mut ids = Vec::new();
    let (placed, makespan) = time_assignment(
        graph,
        order,
        &predecessors,
        &servers,
        &staging,
        predictor,
        &mut ids,
    );
    let mut schedule = assemble(graph, servers, placed, makespan);
    schedule.staging = staging;
    schedule
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
    evaluate_staged(graph, order, predecessors, servers, &[], predictor)
}

/// [`evaluate`] with client arrays uploaded ahead of their calls as `staging` says.
pub fn evaluate_staged(
    graph: &TaskGraph,
    order: &[TaskId],
    predecessors: &[Vec<(TaskId, u64)>],
    servers: &[ServerId],
    staging: &[Staged],
    predictor: &mut dyn Predictor,
) -> f64 {
    let mut ids = Vec::with_capacity(order.len() * 2 + staging.len() * 2);
    let (_, makespan) = time_assignment(
        graph,
        order,
        predecessors,
        servers,
        staging,
        predictor,
        &mut ids,
    );
    // Newest first: each comes off the end of its timeline.
    for id in ids.into_iter().rev() {
        predictor.withdraw(id);
    }
    makespan
}

/// Records the staged uploads (one at a time on each server's path from the client, from the
/// graph's start, in plan order) and returns, per task, its arrays' arrivals.
pub fn upload_arrivals(
    tasks: usize,
    staging: &[Staged],
    predictor: &mut dyn Predictor,
    ids: &mut Vec<PlacementId>,
) -> Vec<Vec<StagedArrival>> {
    let mut arrivals: Vec<Vec<StagedArrival>> = vec![Vec::new(); tasks];
    let mut path_free: std::collections::BTreeMap<ServerId, f64> = Default::default();
    for upload in staging {
        let Some(list) = arrivals.get_mut(upload.task) else {
            continue;
        };
        let via = Location::Server(upload.via);
        let start = path_free.get(&upload.via).copied().unwrap_or(0.0);
        let finish = start + predictor.transfer_time(Location::Client, via, upload.bytes, start);
        ids.extend(predictor.place_transfer(Location::Client, via, start, finish));
        path_free.insert(upload.via, finish);
        list.push((upload.via, upload.bytes, finish));
    }
    arrivals
}

/// Times every task of an assignment in `order`, recording placements and transfers (their
/// ids pushed to `ids`); returns each task's placement and the makespan.
fn time_assignment(
    graph: &TaskGraph,
    order: &[TaskId],
    predecessors: &[Vec<(TaskId, u64)>],
    servers: &[ServerId],
    staging: &[Staged],
    predictor: &mut dyn Predictor,
    ids: &mut Vec<PlacementId>,
) -> (Vec<Option<(ServerId, Timing)>>, f64) {
    let arrivals = upload_arrivals(graph.tasks.len(), staging, predictor, ids);
    let mut placed: Vec<Option<(ServerId, Timing)>> = vec![None; graph.tasks.len()];
    let mut makespan = 0.0f64;
    for &task in order {
        let server = servers[task];
        let staged = &arrivals[task];
        let timing = predict_staged(
            graph,
            predecessors,
            task,
            server,
            &placed,
            staged,
            predictor,
        );
        let done = record_staged(
            graph,
            predecessors,
            task,
            (server, timing),
            &placed,
            staged,
            predictor,
            ids,
        );
        makespan = makespan.max(done);
        placed[task] = Some((server, timing));
    }
    (placed, makespan)
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
        staging: Vec::new(),
    }
}
