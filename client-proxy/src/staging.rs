//! Staged uploads: the client arrays a schedule says to send ahead of their calls. Each
//! server's uploads go one at a time, in the schedule's order, into that server's storage
//! under the graph's owner (so the graph's clean-up and lease cover them). A task waits
//! until its staged arrays are in; its call then names them as stored objects, which its
//! server reads locally or fetches from the server that holds them.
//!
//! Staging only moves data earlier; it never decides whether a graph succeeds. An upload
//! that fails, an array whose server has become suspect, and every array of a task whose
//! call failed once, go with the call instead, as they would without staging.

use std::collections::{BTreeMap, HashMap, HashSet};

use ninf_proto::v1;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tonic::Status;

use crate::{Proxy, UsedServers};

/// One upload's outcome.
pub(crate) struct Uploaded {
    task: usize,
    parameter: u32,
    result: Result<v1::ObjectRef, Status>,
    /// From the first chunk to the server's reply (or the failure).
    seconds: f64,
}

/// The staged uploads of one graph run.
pub(crate) struct Staging {
    /// Uploads not yet finished, per task.
    pending: Vec<usize>,
    /// Their sum: the run loop asks after every event whether any is out, and a graph of
    /// 10,000 tiny calls would otherwise scan `pending` 10,000 times.
    outstanding: usize,
    /// Tasks whose producers are done but whose uploads are not.
    parked: HashSet<usize>,
    /// Tasks whose uploads finished since the run loop last asked.
    released: Vec<usize>,
    /// Where each finished upload is: (task, parameter) to its object.
    objects: HashMap<(usize, u32), v1::ObjectRef>,
    outcomes: mpsc::UnboundedReceiver<Uploaded>,
    uploads: JoinSet<()>,
    /// Uploads that succeeded.
    pub(crate) uploaded: u32,
    /// Seconds every finished upload took, failed ones included: the path was busy all the
    /// same.
    pub(crate) upload_seconds: f64,
}

impl Staging {
    /// Starts the uploads `plan` lists whose argument is an array sent by value, one queue
    /// per server; adds each server to `used`.
    pub(crate) fn start(
        proxy: &Proxy,
        plan: &[v1::StagedInput],
        arguments: &[v1::TaskArguments],
        owner: &str,
        used: &UsedServers,
    ) -> Staging {
        let mut pending = vec![0usize; arguments.len()];
        let mut queues: BTreeMap<&str, Vec<(usize, u32, v1::Array)>> = BTreeMap::new();
        let mut seen = HashSet::new();
        for staged in plan {
            let task = staged.task as usize;
            let array = arguments
                .get(task)
                .and_then(|a| a.arguments.get(staged.parameter as usize))
                .and_then(|a| match &a.source {
                    Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                        value: Some(v1::argument_value::Value::Array(array)),
                    })) => Some(array.clone()),
                    _ => None,
                });
            // Anything else (a scalar, a duplicate) simply goes with the call.
            let Some(array) = array else { continue };
            if !seen.insert((task, staged.parameter)) {
                continue;
            }
            pending[task] += 1;
            queues
                .entry(staged.server.as_str())
                .or_default()
                .push((task, staged.parameter, array));
        }
        let (sender, outcomes) = mpsc::unbounded_channel();
        let mut uploads = JoinSet::new();
        for (server, queue) in queues {
            Proxy::lock(used).insert(server.to_string());
            let cluster = proxy.cluster.clone();
            let (sender, owner, server) = (sender.clone(), owner.to_string(), server.to_string());
            uploads.spawn(async move {
                for (task, parameter, array) in queue {
                    let started = std::time::Instant::now();
                    let result = cluster.put(&server, &owner, array).await;
                    if let Err(status) = &result {
                        tracing::warn!(graph = %owner, task, parameter, %server, error = %status.message(),
                            "a staged upload failed; the array goes with its call");
                    }
                    let _ = sender.send(Uploaded {
                        task,
                        parameter,
                        result,
                        seconds: started.elapsed().as_secs_f64(),
                    });
                }
            });
        }
        Staging {
            outstanding: pending.iter().sum(),
            pending,
            parked: HashSet::new(),
            released: Vec::new(),
            objects: HashMap::new(),
            outcomes,
            uploads,
            uploaded: 0,
            upload_seconds: 0.0,
        }
    }

    /// Whether `task` still waits for uploads; if so it is parked until they finish.
    pub(crate) fn park(&mut self, task: usize) -> bool {
        let waiting = self.pending.get(task).is_some_and(|&p| p > 0);
        if waiting {
            self.parked.insert(task);
        }
        waiting
    }

    /// Whether any upload is still out.
    /// Whether any task waits for its uploads.
    pub(crate) fn holds_tasks(&self) -> bool {
        !self.parked.is_empty()
    }

    pub(crate) fn uploading(&self) -> bool {
        self.outstanding > 0
    }

    /// The next finished upload; `None` once every queue has ended.
    pub(crate) async fn next(&mut self) -> Option<Uploaded> {
        self.outcomes.recv().await
    }

    /// Records a finished upload (a failed one is simply not used).
    pub(crate) fn settle(&mut self, uploaded: Uploaded) {
        let task = uploaded.task;
        self.upload_seconds += uploaded.seconds;
        if let Ok(object) = uploaded.result {
            self.objects.insert((task, uploaded.parameter), object);
            self.uploaded += 1;
        }
        if let Some(p) = self.pending.get_mut(task).filter(|p| **p > 0) {
            *p -= 1;
            self.outstanding -= 1;
            if *p == 0 && self.parked.remove(&task) {
                self.released.push(task);
            }
        }
    }

    /// Every queue ended without reporting some uploads (a queue's task died): the tasks
    /// waiting for them send their arrays with their calls.
    pub(crate) fn give_up(&mut self) {
        self.pending.iter_mut().for_each(|p| *p = 0);
        self.outstanding = 0;
        self.released.extend(self.parked.drain());
    }

    /// Parked tasks whose uploads have all finished.
    pub(crate) fn take_released(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.released)
    }

    /// `task`'s staged arrays held on servers not in `suspects`, by parameter.
    pub(crate) fn objects_for(
        &self,
        task: usize,
        suspects: &HashSet<String>,
    ) -> impl Iterator<Item = (u32, &v1::ObjectRef)> {
        self.objects
            .iter()
            .filter(move |((t, _), o)| *t == task && !suspects.contains(&o.server))
            .map(|(&(_, parameter), object)| (parameter, object))
    }

    /// `task`'s call failed: its retries carry their own arrays, whatever became of the
    /// staged copies (which the graph's clean-up deletes).
    pub(crate) fn forget(&mut self, task: usize) {
        self.objects.retain(|&(t, _), _| t != task);
    }

    /// Stops the uploads still out (the graph has ended).
    pub(crate) async fn stop(&mut self) {
        self.uploads.abort_all();
        while self.uploads.join_next().await.is_some() {}
    }
}
