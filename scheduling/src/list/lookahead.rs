//! Lookahead HEFT (Bittencourt, Sakellariou and Madeira 2010, "DAG scheduling using a
//! lookahead variant of the Heterogeneous Earliest Finish Time algorithm"): HEFT's order, but
//! a task goes to the server that lets its children finish first.
//!
//! For each task in decreasing upward rank and each server that serves it: place the task
//! there at its earliest finish, then place each of its children (in rank order) by HEFT's
//! rule on that tentative schedule, counting only their producers already placed; the
//! server's measure is the latest finish among those children (the task's own finish when
//! it has none). The task goes to the server of the least measure (its earliest finish,
//! then the lowest id, among equals); the children's tentative places are dropped.

use crate::graph::{GraphError, TaskGraph, TaskId};
use crate::grid::{GridView, ServerId};
use crate::list::heft::{rank_order, upward_ranks};
use crate::list::{Partial, unimplemented};
use crate::predictor::Predictor;
use crate::schedule::{Prepared, Schedule, Scheduler};

#[derive(Debug, Default)]
pub struct LookaheadHeft;

/// The measure of placing `task` at `at`: the latest finish of its children placed after it.
#[allow(clippy::too_many_arguments)]
fn measure(
    partial: &Partial,
    graph: &TaskGraph,
    prepared: &Prepared,
    grid: &GridView,
    predictor: &dyn Predictor,
    task: TaskId,
    at: (ServerId, f64, f64),
    children: &[TaskId],
) -> Result<f64, GraphError> {
    if children.is_empty() {
        return Ok(at.2);
    }
    let mut trial = partial.clone();
    trial.place(graph, grid, task, at);
    let mut latest = 0.0f64;
    for &c in children {
        let placed = trial.earliest_finish(graph, prepared, grid, predictor, c)?;
        latest = latest.max(placed.2);
        trial.place(graph, grid, c, placed);
    }
    Ok(latest)
}

impl Scheduler for LookaheadHeft {
    fn name(&self) -> &'static str {
        "heft-lookahead"
    }

    fn schedule(
        &mut self,
        graph: &TaskGraph,
        grid: &GridView,
        predictor: &mut dyn Predictor,
    ) -> Result<Schedule, GraphError> {
        let prepared = Prepared::new(graph, grid)?;
        let rank = upward_ranks(graph, &prepared, grid, predictor);
        let order = rank_order(&prepared, &rank);
        let mut position = vec![0; order.len()];
        for (i, &t) in order.iter().enumerate() {
            position[t] = i;
        }
        let successors = graph.successors();
        let mut partial = Partial::new(graph, grid);
        for &t in &order {
            let mut children: Vec<TaskId> = successors[t].iter().map(|&(c, _)| c).collect();
            children.sort_by_key(|&c| position[c]);
            children.dedup();
            // (measure, own finish, server, start)
            let mut best: Option<(f64, f64, ServerId, f64)> = None;
            for &s in &prepared.capable[prepared.function_of[t]] {
                let (start, end) = partial.timing(graph, &prepared, grid, predictor, (t, s));
                let m = measure(
                    &partial,
                    graph,
                    &prepared,
                    grid,
                    predictor,
                    t,
                    (s, start, end),
                    &children,
                )?;
                let better = best.is_none_or(|(bm, be, _, _)| m < bm || (m == bm && end < be));
                if better {
                    best = Some((m, end, s, start));
                }
            }
            let (_, end, s, start) = best.ok_or_else(|| unimplemented(graph, t))?;
            partial.place(graph, grid, t, (s, start, end));
        }
        Ok(partial.finish(graph, &prepared, predictor))
    }
}
