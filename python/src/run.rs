//! A run in flight: the graph runs on the library's runtime while Python goes on; `wait`
//! blocks with the GIL released; `cancel` stops it so that it writes nothing and leaves
//! nothing on the servers (the proxy cleans up a run whose client went away).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use ninf::grid::{AsyncGridClient, ForeignRun, Plan};
use ninf::runtime::runtime;
use ninf::{CallError, ErrorKind};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use tokio::task::AbortHandle;

use crate::errors::to_py;

enum State {
    Running,
    Finished(Result<Plan, CallError>),
    Cancelled,
}

/// How many runs have ended in this process: `wait_any` sleeps until it changes.
static ENDED: (Mutex<u64>, Condvar) = (Mutex::new(0), Condvar::new());

fn note_ended() {
    let mut ended = ENDED.0.lock().unwrap_or_else(|e| e.into_inner());
    *ended += 1;
    ENDED.1.notify_all();
}

/// Waits up to `timeout` seconds with the GIL released until one of `runs` has ended; says
/// whether one has.
#[pyfunction]
pub fn wait_any(py: Python<'_>, runs: Vec<Py<Run>>, timeout: f64) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
    py.detach(|| {
        let mut ended = ENDED.0.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if runs.iter().any(|r| r.get().is_done()) {
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return false;
            }
            ended = ENDED
                .1
                .wait_timeout(ended, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    })
}

struct Shared {
    state: Mutex<State>,
    ended: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A transaction (or single call) running on the grid.
#[pyclass(module = "ninf._native", frozen)]
pub struct Run {
    shared: Arc<Shared>,
    task: AbortHandle,
}

impl Run {
    pub fn spawn(
        py: Python<'_>,
        client: AsyncGridClient,
        mut foreign: ForeignRun,
        arrays: Vec<Py<PyAny>>,
    ) -> PyResult<Run> {
        let runtime = runtime().map_err(to_py)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::Running),
            ended: Condvar::new(),
        });
        let task_shared = shared.clone();
        let task = py.detach(|| {
            runtime.spawn(async move {
                // The run's arrays live as long as the task that writes into them, not as
                // long as this handle, which Python may drop first.
                let _arrays = arrays;
                let reply = foreign.send(&client).await;
                let mut state = task_shared.lock();
                if matches!(*state, State::Cancelled) {
                    return;
                }
                // Written under the lock: `cancel` either comes first and nothing is
                // written, or finds the run finished.
                *state = State::Finished(reply.and_then(|reply| foreign.finish(reply)));
                task_shared.ended.notify_all();
                drop(state);
                note_ended();
            })
        });
        Ok(Run {
            shared,
            task: task.abort_handle(),
        })
    }
}

impl Run {
    fn is_done(&self) -> bool {
        !matches!(*self.shared.lock(), State::Running)
    }
}

#[pymethods]
impl Run {
    /// Whether it has ended (finished, failed or been cancelled).
    fn done(&self) -> bool {
        self.is_done()
    }

    /// Waits up to `timeout` seconds (`None`: until it ends) with the GIL released; says
    /// whether it has ended.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> bool {
        let limit = timeout.map(|t| Duration::from_secs_f64(t.max(0.0)));
        py.detach(|| {
            let state = self.shared.lock();
            let running = |s: &mut State| matches!(s, State::Running);
            let state = match limit {
                Some(limit) => {
                    self.shared
                        .ended
                        .wait_timeout_while(state, limit, running)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
                None => self
                    .shared
                    .ended
                    .wait_while(state, running)
                    .unwrap_or_else(|e| e.into_inner()),
            };
            !matches!(*state, State::Running)
        })
    }

    /// Cancels it if it has not finished: its arrays are left as they were. Says whether
    /// it was cancelled now.
    fn cancel(&self) -> bool {
        let mut state = self.shared.lock();
        if !matches!(*state, State::Running) {
            return false;
        }
        *state = State::Cancelled;
        self.task.abort();
        self.shared.ended.notify_all();
        drop(state);
        note_ended();
        true
    }

    /// Whether it was cancelled.
    fn cancelled(&self) -> bool {
        matches!(*self.shared.lock(), State::Cancelled)
    }

    /// The plan (where each call ran, predicted and actual times) as a dict; raises the
    /// run's error if it failed and `Canceled` if it was cancelled. It may be asked again.
    fn result<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.shared.lock();
        match &*state {
            State::Running => Err(to_py(CallError::new(
                ErrorKind::Timeout,
                "the run has not ended; wait for it first",
            ))),
            State::Cancelled => Err(to_py(CallError::new(
                ErrorKind::Canceled,
                "the call was cancelled",
            ))),
            State::Finished(Err(e)) => Err(to_py(e.clone())),
            State::Finished(Ok(plan)) => plan_dict(py, plan),
        }
    }
}

fn plan_dict<'py>(py: Python<'py>, plan: &Plan) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("graph_id", plan.graph_id)?;
    dict.set_item("scheduler", &plan.scheduler)?;
    dict.set_item("predicted_makespan", plan.predicted_makespan)?;
    dict.set_item("actual_makespan", plan.actual_makespan)?;
    dict.set_item("inter_server_ratio", plan.inter_server_ratio)?;
    dict.set_item("schedule_seconds", plan.schedule_seconds)?;
    dict.set_item("tasks_retried", plan.tasks_retried)?;
    dict.set_item("regenerated", plan.regenerated)?;
    dict.set_item("edges", plan.edges.clone())?;
    // One tuple per task, in `TaskPlan`'s field order: a transaction of 10,000 calls took
    // 17-24 ms to hand back as dictionaries.
    let tasks = PyList::empty(py);
    for t in &plan.tasks {
        let row = (
            &t.label,
            &t.function,
            &t.server,
            t.predicted_start,
            t.predicted_finish,
            t.actual_start,
            t.actual_finish,
            t.compute_seconds,
            t.stopped_seconds,
            t.status,
        );
        tasks.append(row)?;
    }
    dict.set_item("tasks", tasks)?;
    Ok(dict)
}
