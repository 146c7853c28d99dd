//! PEFT (Arabnejad and Barbosa 2014, "List scheduling algorithm for heterogeneous systems by
//! an optimistic cost table"): HEFT's cost with a look ahead at every descendant.
//!
//! 1. The optimistic cost table: OCT(i, p) = max over successors j of the least, over the
//!    servers w that serve j, of OCT(j, w) + w(j, w) + c̄(i, j) when w ≠ p (nothing when the
//!    data stays on p); 0 for a task with no successor (plus its results' transfer from p to
//!    the client where it has some). w(j, w) is j's compute time on w and c̄(i, j) the edge's
//!    mean transfer between distinct servers, as HEFT's.
//! 2. rank_oct(i): OCT(i, p) averaged over the servers that serve i.
//! 3. Among the ready tasks (every producer placed), the one of highest rank_oct goes to the
//!    server minimising its optimistic finish, O_EFT(i, p) = EFT(i, p) + OCT(i, p), with
//!    HEFT's insertion.

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, Location, ServerId};
use crate::list::{MeanLinks, Partial, unimplemented};
use crate::predictor::Predictor;
use crate::schedule::{Prepared, Schedule, Scheduler};

#[derive(Debug, Default)]
pub struct Peft;

/// OCT(task, server) for every task and every server (servers that do not serve a task keep
/// infinity there).
pub fn optimistic_costs(
    graph: &TaskGraph,
    prepared: &Prepared,
    grid: &GridView,
    predictor: &dyn Predictor,
) -> Vec<Vec<f64>> {
    let links = MeanLinks::new(grid);
    let successors = graph.successors();
    let servers = grid.servers.len();
    let mut oct = vec![vec![f64::INFINITY; servers]; graph.tasks.len()];
    for &i in prepared.order.iter().rev() {
        let capable = &prepared.capable[prepared.function_of[i]];
        let mut row = vec![0.0f64; servers];
        for &p in capable {
            row[p] = predictor
                .link(Location::Server(p), Location::Client)
                .transfer_time(graph.tasks[i].client_out_bytes);
        }
        for &(j, bytes) in &successors[i] {
            // Through j at w: OCT(j, w) + w(j, w); moving the data costs c̄ unless w = p.
            let through: Vec<(ServerId, f64)> = prepared.capable[prepared.function_of[j]]
                .iter()
                .map(|&w| {
                    (
                        w,
                        oct[j][w] + predictor.compute_time(w, &graph.tasks[j], 0.0),
                    )
                })
                .collect();
            let moved = links.between(bytes, predictor)
                + through
                    .iter()
                    .map(|&(_, c)| c)
                    .fold(f64::INFINITY, f64::min);
            for &p in capable {
                let stay = through
                    .iter()
                    .find(|&&(w, _)| w == p)
                    .map_or(f64::INFINITY, |&(_, c)| c);
                row[p] = row[p].max(stay.min(moved));
            }
        }
        for &p in capable {
            oct[i][p] = row[p];
        }
    }
    oct
}

/// rank_oct of every task: its OCT averaged over the servers that serve it.
pub fn oct_ranks(prepared: &Prepared, oct: &[Vec<f64>]) -> Vec<f64> {
    oct.iter()
        .enumerate()
        .map(|(t, row)| {
            let capable = &prepared.capable[prepared.function_of[t]];
            if capable.is_empty() {
                return 0.0;
            }
            capable.iter().map(|&p| row[p]).sum::<f64>() / capable.len() as f64
        })
        .collect()
}

impl Scheduler for Peft {
    fn name(&self) -> &'static str {
        "peft"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let oct = optimistic_costs(graph, &prepared, grid, predictor);
        let rank = oct_ranks(&prepared, &oct);
        let mut partial = Partial::new(graph, grid);
        let mut ready = Ready::new(graph, &prepared);
        while let Some(t) = ready.take_highest(&rank) {
            let mut best: Option<(ServerId, f64, f64, f64)> = None;
            for &s in &prepared.capable[prepared.function_of[t]] {
                let (start, end) = partial.timing(graph, &prepared, grid, predictor, (t, s));
                let optimistic = end + oct[t][s];
                if best.is_none_or(|(_, _, _, o)| optimistic < o) {
                    best = Some((s, start, end, optimistic));
                }
            }
            let (s, start, end, _) = best.ok_or_else(|| unimplemented(graph, t))?;
            partial.place(graph, grid, t, (s, start, end));
            ready.placed(t);
        }
        Ok(partial.finish(graph, &prepared, predictor))
    }
}

/// The tasks whose producers are all placed, and how many producers each other task awaits.
struct Ready {
    tasks: Vec<TaskId>,
    waiting: Vec<usize>,
    successors: Vec<Vec<(TaskId, u64)>>,
    /// Each task's place in dependency order, which breaks ties of rank.
    position: Vec<usize>,
}

impl Ready {
    fn new(graph: &TaskGraph, prepared: &Prepared) -> Ready {
        let waiting: Vec<usize> = prepared.predecessors.iter().map(Vec::len).collect();
        let mut position = vec![0; graph.tasks.len()];
        for (i, &t) in prepared.order.iter().enumerate() {
            position[t] = i;
        }
        Ready {
            tasks: (0..graph.tasks.len())
                .filter(|&t| waiting[t] == 0)
                .collect(),
            waiting,
            successors: graph.successors(),
            position,
        }
    }

    /// Removes and returns the ready task of highest rank (earliest in dependency order
    /// among equals).
    fn take_highest(&mut self, rank: &[f64]) -> Option<TaskId> {
        let (i, _) = self.tasks.iter().enumerate().max_by(|&(_, &a), &(_, &b)| {
            rank[a]
                .total_cmp(&rank[b])
                .then(self.position[b].cmp(&self.position[a]))
        })?;
        Some(self.tasks.swap_remove(i))
    }

    /// Marks `task` placed: its consumers with nothing else to wait for become ready.
    fn placed(&mut self, task: TaskId) {
        for &(next, _) in &self.successors[task] {
            self.waiting[next] -= 1;
            if self.waiting[next] == 0 {
                self.tasks.push(next);
            }
        }
    }
}
