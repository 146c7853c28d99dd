//! The seed's two workloads (the metaserver paper sections 4.3-4.5) as Ninf transactions, each checked
//! against the same computation done locally with the same routines:
//! - `pairs`: independent dgefa/dgesl pairs (client -> dgefa -> dgesl -> client), all in one
//!   transaction so they run in parallel;
//! - `cascade`: the 3-stage cascaded mmul of 8 matrices (4 products, then 2, then 1).

use std::collections::BTreeMap;
use std::time::Instant;

use ninf::grid::{GridClient, Plan, TxArg};
use ninf::{CallError, ErrorKind};
use ninf_scheduling::stats::{least_relative_error, median};
use serde::Serialize;

/// The matrix orders the metaserver paper measured each workload at (none for an unknown workload).
pub fn seed_sizes(workload: &str) -> &'static [usize] {
    match workload {
        "pairs" => &[100, 300, 500, 700],
        "cascade" => &[100, 200, 300],
        _ => &[],
    }
}

/// A small deterministic generator (xorshift), so every run and every scheduler sees the
/// same matrices.
struct Random(u64);

impl Random {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A well-conditioned n-by-n matrix (column-major): random entries, heavy diagonal.
fn dominant_matrix(n: usize, random: &mut Random) -> Vec<f64> {
    let mut a: Vec<f64> = (0..n * n).map(|_| random.next() * 2.0 - 1.0).collect();
    for i in 0..n {
        a[i + i * n] += n as f64;
    }
    a
}

/// One run of a workload.
#[derive(Debug, Clone)]
pub struct WorkloadRun {
    pub plan: Plan,
    /// Wall-clock time of the transaction as the client saw it.
    pub exec_seconds: f64,
    /// Largest difference from the local computation.
    pub max_abs_error: f64,
}

fn routine_error(e: String) -> CallError {
    CallError::new(
        ErrorKind::SessionFailed,
        format!("local reference computation: {e}"),
    )
}

/// The largest of `errors`, NaN if any is NaN (`f64::max` would drop it, and a NaN result
/// would pass every check against the local computation).
pub fn worst_error(errors: impl IntoIterator<Item = f64>) -> f64 {
    errors.into_iter().fold(0.0, |worst, e| {
        if worst.is_nan() || e.is_nan() {
            f64::NAN
        } else {
            worst.max(e)
        }
    })
}

/// The largest difference between two results, NaN if either holds a NaN, infinite if
/// their lengths differ.
fn max_abs_difference(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    worst_error(a.iter().zip(b).map(|(x, y)| (x - y).abs()))
}

/// `pairs` dgefa/dgesl pairs of order `n` in one transaction.
pub fn pairs(
    grid: &GridClient,
    n: usize,
    pairs: usize,
    seed: u64,
) -> Result<WorkloadRun, CallError> {
    let mut random = Random(seed | 1);
    let matrices: Vec<Vec<f64>> = (0..pairs)
        .map(|_| dominant_matrix(n, &mut random))
        .collect();
    let rhs: Vec<Vec<f64>> = (0..pairs)
        .map(|_| (0..n).map(|_| random.next()).collect())
        .collect();
    let pivots = vec![0i32; n];
    let mut solutions = rhs.clone();
    let order = i32::try_from(n).map_err(|_| CallError::bad_argument("n is too large"))?;
    let start = Instant::now();
    let plan = grid.transaction(|tx| {
        tx.set_label(&format!("pairs n={n}"));
        for (a, x) in matrices.iter().zip(solutions.iter_mut()) {
            let a = tx.scratch(a);
            let ipvt = tx.scratch(&pivots);
            let x = tx.buffer(x);
            tx.call("dgefa", &[a.into(), order.into(), ipvt.into()])?;
            tx.call("dgesl", &[a.into(), order.into(), ipvt.into(), x.into()])?;
        }
        Ok(())
    })?;
    let exec_seconds = start.elapsed().as_secs_f64();
    let mut max_abs_error = 0.0f64;
    for ((a, b), x) in matrices.iter().zip(&rhs).zip(&solutions) {
        let mut lu = a.clone();
        let mut ipvt = vec![0i32; n];
        let mut local = b.clone();
        ninf_routines::linpack::dgefa(&mut lu, order, &mut ipvt).map_err(routine_error)?;
        ninf_routines::linpack::dgesl(&lu, order, &ipvt, &mut local).map_err(routine_error)?;
        max_abs_error = worst_error([max_abs_error, max_abs_difference(x, &local)]);
    }
    Ok(WorkloadRun {
        plan,
        exec_seconds,
        max_abs_error,
    })
}

/// A matrix of order `n` kept on the grid as persistent data in `replicas` copies, factored
/// in place there (dgefa's INOUT on the handle) and solved against (dgesl reads it) in one
/// transaction; then its factors are read back and the handle is freed. The factors and the
/// solution are checked against the same routines run locally.
pub fn kept_factor(
    grid: &GridClient,
    n: usize,
    replicas: u32,
    seed: u64,
) -> Result<WorkloadRun, CallError> {
    let mut random = Random(seed | 1);
    let a = dominant_matrix(n, &mut random);
    let b: Vec<f64> = (0..n).map(|_| random.next()).collect();
    let order = i32::try_from(n).map_err(|_| CallError::bad_argument("n is too large"))?;
    let start = Instant::now();
    let handle = put_when_servers_allow(grid, &a, n, replicas)?;
    let mut x = b.clone();
    let mut factors = vec![0.0f64; n * n];
    let pivots = vec![0i32; n];
    let used = grid
        .transaction(|tx| {
            tx.set_label(&format!("kept dgefa n={n}"));
            let ipvt = tx.scratch(&pivots);
            let x = tx.buffer(&mut x);
            tx.call("dgefa", &[(&handle).into(), order.into(), ipvt.into()])?;
            tx.call(
                "dgesl",
                &[(&handle).into(), order.into(), ipvt.into(), x.into()],
            )
        })
        .and_then(|plan| grid.get(&handle, &mut factors).map(|()| plan));
    // Freed whatever happened: a handle left behind is a leak the chaos run counts.
    let freed = grid.free(&handle);
    let plan = used?;
    freed?;
    let exec_seconds = start.elapsed().as_secs_f64();
    let mut lu = a;
    let mut ipvt = vec![0i32; n];
    let mut local = b;
    ninf_routines::linpack::dgefa(&mut lu, order, &mut ipvt).map_err(routine_error)?;
    ninf_routines::linpack::dgesl(&lu, order, &ipvt, &mut local).map_err(routine_error)?;
    Ok(WorkloadRun {
        plan,
        exec_seconds,
        max_abs_error: worst_error([
            max_abs_difference(&x, &local),
            max_abs_difference(&factors, &lu),
        ]),
    })
}

/// Puts `a` in `replicas` copies, asking again for up to 30 s while the grid refuses it for
/// want of servers (too few are up during a partition or a restart), as a client that
/// needs its copies would.
fn put_when_servers_allow(
    grid: &GridClient,
    a: &[f64],
    n: usize,
    replicas: u32,
) -> Result<ninf::grid::DataRef, CallError> {
    let until = Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let shape = [n as u64, n as u64];
        match grid.put_replicated(a, &shape, ninf::grid::DataMode::Persistent, replicas) {
            Err(e) if e.kind == ErrorKind::RpcRefused && Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            other => return other,
        }
    }
}

/// Factor once, solve many (issue 61's benchmark, from Rust): dgefa on a matrix of order
/// `n`, then `solves` dgesl calls at once, each its own transaction. Kept, the matrix is put
/// once and factored in place on the grid, and each solve names the factors' handles and
/// sends only its right-hand side; resent, the factors come back to the client and go out
/// with every solve. Returns the seconds the client saw, from the put or the first send to
/// the last solution, and the largest difference of a solution from the local run's.
pub fn factor_solves(
    grid: &GridClient,
    n: usize,
    solves: usize,
    kept: bool,
    seed: u64,
) -> Result<(f64, f64), CallError> {
    let mut random = Random(seed | 1);
    let a = dominant_matrix(n, &mut random);
    let bs: Vec<Vec<f64>> = (0..solves)
        .map(|_| (0..n).map(|_| random.next()).collect())
        .collect();
    let order = i32::try_from(n).map_err(|_| CallError::bad_argument("n is too large"))?;
    let mut xs = bs.clone();
    let start = Instant::now();
    if kept {
        solve_kept(grid, &a, order, &mut xs)?;
    } else {
        solve_resent(grid, &a, order, &mut xs)?;
    }
    let seconds = start.elapsed().as_secs_f64();
    let mut lu = a;
    let mut ipvt = vec![0i32; n];
    ninf_routines::linpack::dgefa(&mut lu, order, &mut ipvt).map_err(routine_error)?;
    let mut worst = 0.0f64;
    for (x, b) in xs.iter().zip(bs) {
        let mut local = b;
        ninf_routines::linpack::dgesl(&lu, order, &ipvt, &mut local).map_err(routine_error)?;
        worst = worst_error([worst, max_abs_difference(x, &local)]);
    }
    Ok((seconds, worst))
}

/// The matrix put once (sticky) and factored in place; the solves name the handles.
fn solve_kept(
    grid: &GridClient,
    a: &[f64],
    order: i32,
    xs: &mut [Vec<f64>],
) -> Result<(), CallError> {
    let n = order as u64;
    let lu = grid.put(a, &[n, n], ninf::grid::DataMode::Sticky)?;
    let ipvt = match grid.empty(ninf::ElementType::Int, &[n], ninf::grid::DataMode::Sticky) {
        Ok(ipvt) => ipvt,
        Err(e) => return Err(grid.free(&lu).err().unwrap_or(e)),
    };
    let solved = grid
        .transaction(|tx| tx.call("dgefa", &[(&lu).into(), order.into(), (&ipvt).into()]))
        .and_then(|_| {
            solve_all(xs, |x| {
                grid.transaction(|tx| {
                    let x = tx.buffer(x);
                    let args = [(&lu).into(), order.into(), (&ipvt).into(), x.into()];
                    tx.call("dgesl", &args)
                })
            })
        });
    let freed = grid.free(&lu).and(grid.free(&ipvt));
    solved.and(freed)
}

/// The factors back to the client, then sent with every solve.
fn solve_resent(
    grid: &GridClient,
    a: &[f64],
    order: i32,
    xs: &mut [Vec<f64>],
) -> Result<(), CallError> {
    let mut lu = a.to_vec();
    let mut ipvt = vec![0i32; xs.first().map_or(0, Vec::len)];
    grid.transaction(|tx| {
        let (lu, ipvt) = (tx.buffer(&mut lu), tx.buffer(&mut ipvt));
        tx.call("dgefa", &[lu.into(), order.into(), ipvt.into()])
    })?;
    solve_all(xs, |x| {
        grid.transaction(|tx| {
            let (lu, ipvt, x) = (tx.input(&lu), tx.input(&ipvt), tx.buffer(x));
            tx.call("dgesl", &[lu.into(), order.into(), ipvt.into(), x.into()])
        })
    })
}

/// Runs `solve` on every right-hand side at once, a thread each (as `call_async` would).
fn solve_all(
    xs: &mut [Vec<f64>],
    solve: impl Fn(&mut Vec<f64>) -> Result<Plan, CallError> + Sync,
) -> Result<(), CallError> {
    std::thread::scope(|scope| {
        let solve = &solve;
        let running: Vec<_> = xs
            .iter_mut()
            .map(|x| scope.spawn(move || solve(x)))
            .collect();
        for thread in running {
            thread.join().map_err(|_| {
                CallError::new(ErrorKind::SessionFailed, "a solve's thread panicked")
            })??;
        }
        Ok(())
    })
}

/// The 3-stage cascaded product of 8 matrices of order `n` in one transaction.
pub fn cascade(grid: &GridClient, n: usize, seed: u64) -> Result<WorkloadRun, CallError> {
    let mut random = Random(seed | 1);
    let scale = 1.0 / n as f64;
    let inputs: Vec<Vec<f64>> = (0..8)
        .map(|_| (0..n * n).map(|_| random.next() * 2.0 * scale).collect())
        .collect();
    let zeros = vec![0.0f64; n * n];
    let mut result = vec![0.0f64; n * n];
    let order = i32::try_from(n).map_err(|_| CallError::bad_argument("n is too large"))?;
    let start = Instant::now();
    let plan = grid.transaction(|tx| {
        tx.set_label(&format!("cascade n={n}"));
        let m: Vec<_> = inputs.iter().map(|a| tx.input(a)).collect();
        let stage1: Vec<_> = (0..4).map(|_| tx.scratch(&zeros)).collect();
        let stage2: Vec<_> = (0..2).map(|_| tx.scratch(&zeros)).collect();
        let last = tx.buffer(&mut result);
        let n = TxArg::from(order);
        for i in 0..4 {
            let args = [
                n.clone(),
                m[2 * i].into(),
                m[2 * i + 1].into(),
                stage1[i].into(),
            ];
            tx.call("mmul", &args)?;
        }
        for i in 0..2 {
            let args = [
                n.clone(),
                stage1[2 * i].into(),
                stage1[2 * i + 1].into(),
                stage2[i].into(),
            ];
            tx.call("mmul", &args)?;
        }
        tx.call(
            "mmul",
            &[n, stage2[0].into(), stage2[1].into(), last.into()],
        )?;
        Ok(())
    })?;
    let exec_seconds = start.elapsed().as_secs_f64();
    let product = |a: &[f64], b: &[f64]| -> Result<Vec<f64>, CallError> {
        let mut c = vec![0.0; n * n];
        ninf_routines::blas::mmul(order, a, b, &mut c).map_err(routine_error)?;
        Ok(c)
    };
    let mut level: Vec<Vec<f64>> = inputs.clone();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|pair| product(&pair[0], &pair[1]))
            .collect::<Result<_, _>>()?;
    }
    Ok(WorkloadRun {
        plan,
        exec_seconds,
        max_abs_error: max_abs_difference(&result, &level[0]),
    })
}

/// One line of the demo's tables: a (scheduler, workload) averaged over trials, shaped like
/// the metaserver paper's Tables 2-5.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub scheduler: String,
    pub workload: String,
    pub n: usize,
    pub trials: usize,
    /// Mean execution time (s), as the client saw it.
    pub exec_s: f64,
    pub exec_sd_s: f64,
    /// Mean over trials of the summed communication time (s): each task's time outside its
    /// computation (sending, fetching, returning data), plus the proxy's uploads ahead of
    /// the calls.
    pub comm_total_s: f64,
    /// Mean over trials of the summed computation time of the tasks (s).
    pub comp_total_s: f64,
    /// Share of task invocations per server.
    pub server_ratio: BTreeMap<String, f64>,
    /// Share of the graph's edges that crossed servers (for pairs: the share of split pairs).
    pub inter_server_ratio: f64,
    pub predicted_s: f64,
    pub max_abs_error: f64,
    /// The median over every task of every trial of |predicted - actual| / actual of its
    /// finish time, counted from the graph's start (the proxy issues a task before its
    /// inputs move, so start times mean different things on the two sides).
    pub prediction_error_median: f64,
    /// The mean over trials of |predicted - actual| / actual of the graph's makespan.
    pub graph_prediction_error: f64,
    /// The same two errors for the best prediction that is the same for every trial
    /// ([`spread_errors`]): how much the trials themselves differ.
    pub spread_error_median: f64,
    pub graph_spread_error: f64,
}

/// The predictor's errors over `runs`: (median per task, mean per graph); see [`Summary`].
pub fn prediction_errors(runs: &[WorkloadRun]) -> (f64, f64) {
    let tasks: Vec<f64> = runs
        .iter()
        .flat_map(|r| &r.plan.tasks)
        .filter(|t| t.actual_finish > 0.0)
        .map(|t| ((t.predicted_finish - t.actual_finish) / t.actual_finish).abs())
        .collect();
    let median = median(tasks).unwrap_or(0.0);
    let graphs: Vec<f64> = runs
        .iter()
        .filter(|r| r.plan.actual_makespan > 0.0)
        .map(|r| {
            ((r.plan.predicted_makespan - r.plan.actual_makespan) / r.plan.actual_makespan).abs()
        })
        .collect();
    let graph = graphs.iter().sum::<f64>() / graphs.len().max(1) as f64;
    (median, graph)
}

/// How much the trials themselves differ, in the terms of [`prediction_errors`]: (the median
/// per-task error of predicting each task's finish by its median over the trials, the mean
/// per-graph error of predicting every makespan by the one figure that makes it least). No
/// prediction that gives every trial the same timings does better; the metaserver's can,
/// since what it learns from one trial changes the next (the first trials' cold calls are
/// slow, and it is told so). Errors well above these are the predictor's own; errors near
/// them are mostly the trials' spread. Fitted to the very trials it scores, the figure
/// understates the spread when the trials are few.
pub fn spread_errors(runs: &[WorkloadRun]) -> (f64, f64) {
    let mut by_task: Vec<Vec<f64>> = Vec::new();
    for run in runs {
        for (i, task) in run.plan.tasks.iter().enumerate() {
            if task.actual_finish > 0.0 {
                by_task.resize_with(by_task.len().max(i + 1), Vec::new);
                by_task[i].push(task.actual_finish);
            }
        }
    }
    let tasks: Vec<f64> = by_task
        .iter()
        .filter_map(|finishes| {
            let best = median(finishes.clone())?;
            Some(finishes.iter().map(move |a| (best - a).abs() / a))
        })
        .flatten()
        .collect();
    let makespans: Vec<f64> = runs
        .iter()
        .map(|r| r.plan.actual_makespan)
        .filter(|&a| a > 0.0)
        .collect();
    let graph = least_relative_error(makespans.clone()).map_or(0.0, |best| {
        makespans.iter().map(|a| (best - a).abs() / a).sum::<f64>() / makespans.len() as f64
    });
    (median(tasks).unwrap_or(0.0), graph)
}

impl Summary {
    pub fn of(scheduler: &str, workload: &str, n: usize, runs: &[WorkloadRun]) -> Summary {
        let trials = runs.len().max(1) as f64;
        let mean = |f: &dyn Fn(&WorkloadRun) -> f64| runs.iter().map(f).sum::<f64>() / trials;
        let exec = mean(&|r| r.exec_seconds);
        let variance = mean(&|r| (r.exec_seconds - exec).powi(2));
        let mut servers: BTreeMap<String, f64> = BTreeMap::new();
        let mut invocations = 0usize;
        for run in runs {
            for t in &run.plan.tasks {
                *servers.entry(t.server.clone()).or_default() += 1.0;
                invocations += 1;
            }
        }
        for share in servers.values_mut() {
            *share /= invocations.max(1) as f64;
        }
        let (prediction_error_median, graph_prediction_error) = prediction_errors(runs);
        let (spread_error_median, graph_spread_error) = spread_errors(runs);
        Summary {
            scheduler: scheduler.to_string(),
            workload: workload.to_string(),
            n,
            trials: runs.len(),
            exec_s: exec,
            exec_sd_s: variance.sqrt(),
            comm_total_s: mean(&|r| {
                r.plan
                    .tasks
                    .iter()
                    .map(|t| {
                        ((t.actual_finish - t.actual_start) - t.compute_seconds - t.queue_seconds)
                            .max(0.0)
                    })
                    .sum::<f64>()
                    + r.plan.staged_upload_seconds
            }),
            comp_total_s: mean(&|r| r.plan.tasks.iter().map(|t| t.compute_seconds).sum()),
            server_ratio: servers,
            inter_server_ratio: mean(&|r| r.plan.inter_server_ratio),
            predicted_s: mean(&|r| r.plan.predicted_makespan),
            max_abs_error: worst_error(runs.iter().map(|r| r.max_abs_error)),
            prediction_error_median,
            graph_prediction_error,
            spread_error_median,
            graph_spread_error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ninf::grid::{Plan, TaskPlan};

    fn run(tasks: &[(f64, f64)], makespans: (f64, f64)) -> WorkloadRun {
        WorkloadRun {
            plan: Plan {
                tasks: tasks
                    .iter()
                    .map(|&(predicted_finish, actual_finish)| TaskPlan {
                        predicted_finish,
                        actual_finish,
                        ..TaskPlan::default()
                    })
                    .collect(),
                predicted_makespan: makespans.0,
                actual_makespan: makespans.1,
                ..Plan::default()
            },
            exec_seconds: makespans.1,
            max_abs_error: 0.0,
        }
    }

    #[test]
    fn a_nan_result_is_the_worst_error_and_fails_the_checks() {
        assert!(max_abs_difference(&[1.0, f64::NAN], &[1.0, 2.0]).is_nan());
        assert!(max_abs_difference(&[1.0, 2.0], &[f64::NAN, 2.0]).is_nan());
        assert_eq!(max_abs_difference(&[1.0, 2.5], &[1.0, 2.0]), 0.5);
        assert_eq!(max_abs_difference(&[1.0], &[1.0, 2.0]), f64::INFINITY);
        assert!(worst_error([0.0, f64::NAN, 3.0]).is_nan());
        assert_eq!(worst_error([0.0, 3.0, 1.0]), 3.0);
        // A summary over trials carries a trial's NaN, so the demo's and the grid tests'
        // `max_abs_error == 0.0` and `< 1e-6` checks fail on it.
        let mut bad = run(&[(1.0, 1.0)], (1.0, 1.0));
        bad.max_abs_error = f64::NAN;
        let good = run(&[(1.0, 1.0)], (1.0, 1.0));
        let summary = Summary::of("flow", "pairs", 10, &[good, bad]);
        assert!(summary.max_abs_error.is_nan());
        assert!(summary.max_abs_error >= 1e-6 || summary.max_abs_error.is_nan());
        assert!(summary.max_abs_error != 0.0);
    }

    #[test]
    fn prediction_errors_are_the_median_task_and_the_mean_graph() {
        // Task errors 0.5, 0.0, 0.25 and 1.0 (median 0.375); graph errors 0.5 and 0.1.
        let runs = [
            run(&[(1.5, 1.0), (2.0, 2.0)], (3.0, 2.0)),
            run(&[(0.75, 1.0), (4.0, 2.0), (9.0, 0.0)], (1.1, 1.0)),
        ];
        let (median, graph) = prediction_errors(&runs);
        assert!((median - 0.375).abs() < 1e-12, "{median}");
        assert!((graph - 0.3).abs() < 1e-12, "{graph}");
        assert_eq!(prediction_errors(&[]), (0.0, 0.0));
    }

    #[test]
    fn spread_errors_are_the_trials_distances_from_their_best_figure() {
        // Task 0 finished at 1, 2 and 4 (median 2: errors 1.0, 0.0 and 0.5); task 1 at 3
        // in every trial (errors 0), except in a third trial where it did not run. The
        // median of the five task errors is 0. Makespans 1, 2 and 4: the weights 1, 1/2
        // and 1/4 put the weighted median at 1, whose errors are 0, 1/2 and 3/4.
        let runs = [
            run(&[(9.0, 1.0), (9.0, 3.0)], (9.0, 1.0)),
            run(&[(9.0, 2.0), (9.0, 3.0)], (9.0, 2.0)),
            run(&[(9.0, 4.0), (9.0, 0.0)], (9.0, 4.0)),
        ];
        let (task, graph) = spread_errors(&runs);
        assert!(task.abs() < 1e-12, "{task}");
        assert!((graph - 1.25 / 3.0).abs() < 1e-12, "{graph}");
        // One task that finished at 1 and at 3, in graphs that both took 2.
        let runs = [
            run(&[(9.0, 1.0)], (9.0, 2.0)),
            run(&[(9.0, 3.0)], (9.0, 2.0)),
        ];
        let (task, graph) = spread_errors(&runs);
        // Median finish 2: errors 1.0 and 1/3; their median is their mean.
        assert!((task - (1.0 + 1.0 / 3.0) / 2.0).abs() < 1e-12, "{task}");
        assert!(graph.abs() < 1e-12, "{graph}");
        assert_eq!(spread_errors(&[]), (0.0, 0.0));
    }

    #[test]
    fn the_demos_json_carries_the_spread_under_the_names_the_docs_give() {
        let runs = [
            run(&[(9.0, 1.0)], (9.0, 2.0)),
            run(&[(9.0, 3.0)], (9.0, 2.0)),
        ];
        let json = serde_json::to_value(Summary::of("flow", "pairs", 200, &runs)).unwrap();
        let (task, graph) = spread_errors(&runs);
        assert_eq!(json["spread_error_median"].as_f64(), Some(task));
        assert_eq!(json["graph_spread_error"].as_f64(), Some(graph));
    }
}
