//! Runs a placed graph (seed 004, step 5): issues its tasks in dependency order, independent
//! ones in parallel, with intermediate data flowing server to server through their storage,
//! and collects what the client asked for. It also recovers from faults. A call lost with its
//! server is issued again, on another server when its own is suspect. An input lost with its
//! server is made again by re-running its producers (lineage, back to data that survived).
//! Each task gets at most `task_retries` retries, with doubling back-off. The decisions are in
//! [`crate::recovery`] and [`crate::run_state`]; this is the async loop around them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ninf_proto::v1;
use tokio::task::JoinSet;
use tonic::{Code, Status};

use crate::recovery::{self, CallFailure, Candidate};
use crate::run_state::GraphRun;
use crate::staging::Staging;
use crate::{CALL_LIMIT, Executed, Failed, Proxy, RunCounts, UsedServers};

/// How long a suspect server has to say whether it still holds an object.
const STAT_TIMEOUT: Duration = Duration::from_secs(5);

/// One task's call as issued.
struct Issued {
    task: usize,
    server: String,
    started: f64,
    finished: f64,
    result: Result<v1::CallReply, Status>,
}

/// What each task reads and keeps, worked out once from the graph's edges.
struct Dataflow {
    /// (parameter, producer, producer's parameter) feeding each task.
    fed: Vec<Vec<(u32, usize, u32)>>,
    /// Outputs each task keeps in storage for its consumers.
    keep: Vec<BTreeSet<u32>>,
    /// Outputs the client wants back, per task.
    returns: Vec<HashSet<u32>>,
}

impl Dataflow {
    fn new(graph: &v1::TaskGraph, arguments: &[v1::TaskArguments]) -> Result<Dataflow, Status> {
        let n = graph.tasks.len();
        let mut fed: Vec<Vec<(u32, usize, u32)>> = vec![Vec::new(); n];
        let mut keep: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); n];
        for edge in &graph.edges {
            let (from, to) = (edge.from_task as usize, edge.to_task as usize);
            if from >= n || to >= n {
                return Err(Status::invalid_argument(format!(
                    "an edge joins task {from} to task {to}, but the graph has {n} tasks"
                )));
            }
            fed[to].push((edge.to_parameter, from, edge.from_parameter));
            keep[from].insert(edge.from_parameter);
        }
        let returns = arguments
            .iter()
            .map(|a| a.returns.iter().copied().collect())
            .collect();
        Ok(Dataflow { fed, keep, returns })
    }

    /// Kept outputs the client also wants: fetched from storage after the last task.
    fn fetched_at_end(&self, task: usize) -> impl Iterator<Item = u32> + '_ {
        self.keep[task]
            .iter()
            .copied()
            .filter(move |p| self.returns[task].contains(p))
    }
}

/// Recovery bookkeeping of one graph run.
struct Faults {
    /// Retries so far, per task.
    attempts: Vec<u32>,
    /// Servers that failed a call or lost data during this graph: no task moves to them,
    /// and tasks placed on them move away before they are issued.
    suspects: HashSet<String>,
    /// Tasks whose kept outputs are known lost.
    lost: HashSet<usize>,
    retried: u32,
    regenerated: u32,
}

/// The graph's progress that the run loop and its recovery share.
struct Progress {
    run: GraphRun,
    objects: HashMap<(usize, u32), v1::ObjectRef>,
    reports: Vec<Option<v1::TaskReport>>,
    actuals: Vec<v1::TaskActual>,
    /// Object ids each task's latest call read from storage.
    inputs: Vec<Vec<String>>,
    /// Back-off before each task's next call.
    delays: Vec<Duration>,
    faults: Faults,
}

impl Progress {
    /// Forgets what a task's earlier run produced (it runs again).
    fn forget(&mut self, task: usize) {
        self.objects.retain(|&(t, _), _| t != task);
        self.reports[task] = None;
        self.actuals.retain(|a| a.task as usize != task);
    }
}

fn describe(graph: &v1::TaskGraph, task: usize) -> String {
    let meta = &graph.tasks[task];
    format!("task {task} (`{}`, {})", meta.label, meta.function)
}

impl Proxy {
    /// Runs the graph on `servers` (one per task, changed when a task moves after a fault),
    /// adding every server it stores anything on to `used`.
    pub(crate) async fn execute(
        &self,
        graph: &v1::TaskGraph,
        arguments: &[v1::TaskArguments],
        (servers, staging_plan): (&mut [String], &[v1::StagedInput]),
        owner: &str,
        used: &UsedServers,
    ) -> Result<Executed, Failed> {
        let n = graph.tasks.len();
        let start = Instant::now();
        // The graph's start on the proxy's clock, for the suspect board.
        let origin = self.clock();
        let fail = |status: Status, actuals: Vec<v1::TaskActual>| Failed {
            status,
            actuals,
            makespan: start.elapsed().as_secs_f64(),
        };
        let flow = match Dataflow::new(graph, arguments) {
            Ok(flow) => flow,
            Err(status) => return Err(fail(status, Vec::new())),
        };
        let mut progress = Progress {
            run: GraphRun::new(
                n,
                graph
                    .edges
                    .iter()
                    .map(|e| (e.from_task as usize, e.to_task as usize)),
            ),
            objects: HashMap::new(),
            reports: vec![None; n],
            actuals: Vec::new(),
            inputs: vec![Vec::new(); n],
            delays: vec![Duration::ZERO; n],
            faults: Faults {
                attempts: vec![0; n],
                suspects: HashSet::new(),
                lost: HashSet::new(),
                retried: 0,
                regenerated: 0,
            },
        };
        let mut calls: JoinSet<Issued> = JoinSet::new();
        let mut staging = Staging::start(self, staging_plan, arguments, owner, used);
        let outcome: Result<Vec<(usize, v1::CallOutput)>, Status> = 'graph: loop {
            loop {
                let mut ready = progress.run.take_ready();
                ready.extend(staging.take_released());
                for task in ready {
                    if staging.park(task) {
                        continue;
                    }
                    let suspects = self.suspects_with(&progress.faults.suspects);
                    if suspects.contains(&servers[task]) {
                        self.move_task(graph, task, servers, &suspects, used).await;
                    }
                    let call = match build_call(graph, arguments, &flow, &progress, task, owner) {
                        Ok(mut call) => {
                            for (parameter, object) in staging.objects_for(task, &suspects) {
                                if let Some(slot) = call.arguments.get_mut(parameter as usize) {
                                    *slot = v1::CallArgument {
                                        source: Some(v1::call_argument::Source::Object(
                                            object.clone(),
                                        )),
                                    };
                                }
                            }
                            call
                        }
                        Err(status) => break 'graph Err(status),
                    };
                    progress.inputs[task] = call
                        .arguments
                        .iter()
                        .filter_map(|a| match &a.source {
                            Some(v1::call_argument::Source::Object(o)) => Some(o.object_id.clone()),
                            _ => None,
                        })
                        .collect();
                    let connection = match self.server(&servers[task]) {
                        Ok(c) => c,
                        Err(status) => break 'graph Err(status),
                    };
                    let delay = std::mem::take(&mut progress.delays[task]);
                    let server = servers[task].clone();
                    calls.spawn(async move {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        let _slot = connection.slots.clone().acquire_owned().await;
                        let started = start.elapsed().as_secs_f64();
                        let result = v1::invoke_client::InvokeClient::new(connection.channel())
                            .max_decoding_message_size(CALL_LIMIT)
                            .max_encoding_message_size(CALL_LIMIT)
                            .call(call)
                            .await
                            .map(tonic::Response::into_inner);
                        Issued {
                            task,
                            server,
                            started,
                            finished: start.elapsed().as_secs_f64(),
                            result,
                        }
                    });
                }
                // The next call to end, or the next upload to finish; nothing out: done.
                let joined = tokio::select! {
                    Some(joined) = calls.join_next() => joined,
                    uploaded = staging.next(), if staging.uploading() => {
                        match uploaded {
                            Some(uploaded) => staging.settle(uploaded),
                            None => staging.give_up(),
                        }
                        continue;
                    }
                    else => break,
                };
                let issued = match joined {
                    Ok(issued) => issued,
                    Err(e) => {
                        break 'graph Err(Status::internal(format!("a task's call was lost: {e}")));
                    }
                };
                let task = issued.task;
                match issued.result {
                    Ok(reply) => {
                        Self::lock(&self.suspects).worked(&issued.server, origin + issued.started);
                        let mut outputs = Vec::new();
                        for output in reply.outputs {
                            match output.result {
                                Some(v1::call_output::Result::Object(object)) => {
                                    progress.objects.insert((task, output.parameter), object);
                                }
                                Some(v1::call_output::Result::Array(_))
                                    if flow.returns[task].contains(&output.parameter) =>
                                {
                                    outputs.push(output);
                                }
                                _ => {}
                            }
                        }
                        progress.actuals.push(v1::TaskActual {
                            task: task as u32,
                            start: issued.started,
                            finish: issued.finished,
                            timing: reply.timing,
                            error: String::new(),
                        });
                        progress.reports[task] = Some(v1::TaskReport {
                            task: task as u32,
                            server: issued.server,
                            actual_start: issued.started,
                            actual_finish: issued.finished,
                            timing: reply.timing,
                            status: reply.status,
                            outputs,
                            ..Default::default()
                        });
                        progress.faults.lost.remove(&task);
                        progress.run.complete(task);
                    }
                    Err(status) => {
                        progress.run.fail(task);
                        staging.forget(task);
                        progress.actuals.push(v1::TaskActual {
                            task: task as u32,
                            start: issued.started,
                            finish: issued.finished,
                            timing: None,
                            error: status.message().to_string(),
                        });
                        let failure = {
                            let inputs: Vec<&str> =
                                progress.inputs[task].iter().map(String::as_str).collect();
                            recovery::classify(status.code(), status.message(), &inputs)
                        };
                        let culprits: Vec<String> = match failure {
                            CallFailure::Fatal => {
                                break 'graph Err(Status::new(
                                    status.code(),
                                    format!(
                                        "{} on {}: {}",
                                        describe(graph, task),
                                        issued.server,
                                        status.message()
                                    ),
                                ));
                            }
                            CallFailure::Server => vec![issued.server.clone()],
                            CallFailure::LostInputs(ids) => {
                                let mut culprits = BTreeSet::new();
                                for (&(producer, _), object) in &progress.objects {
                                    if ids.contains(&object.object_id) {
                                        progress.faults.lost.insert(producer);
                                        culprits.insert(object.server.clone());
                                    }
                                }
                                culprits.into_iter().collect()
                            }
                        };
                        if let Err(status) = self
                            .recover(graph, &flow, &mut progress, task, &culprits, &status)
                            .await
                        {
                            break 'graph Err(status);
                        }
                        tracing::info!(
                            task,
                            server = %issued.server,
                            attempt = progress.faults.attempts[task],
                            error = %status.message(),
                            "retrying a task after a fault"
                        );
                    }
                }
            }
            if !progress.run.is_complete() {
                break 'graph Err(Status::internal(
                    "the graph stopped with tasks never ready (a cycle?)",
                ));
            }
            // Outputs the client wants that other tasks also read were kept: fetch them now.
            let mut fetched = Vec::new();
            let mut lost_at_end = None;
            'fetch: for task in 0..n {
                for parameter in flow.fetched_at_end(task) {
                    let Some(object) = progress.objects.get(&(task, parameter)) else {
                        continue;
                    };
                    match self.fetch(object).await {
                        Ok(array) => fetched.push((
                            task,
                            v1::CallOutput {
                                parameter,
                                result: Some(v1::call_output::Result::Array(array)),
                            },
                        )),
                        Err(status) => {
                            lost_at_end = Some((task, object.server.clone(), status));
                            break 'fetch;
                        }
                    }
                }
            }
            let Some((task, server, status)) = lost_at_end else {
                break 'graph Ok(fetched);
            };
            let is_loss = status.code() == Code::NotFound
                || recovery::classify(status.code(), status.message(), &[]) == CallFailure::Server;
            if !is_loss {
                break 'graph Err(status);
            }
            progress.faults.lost.insert(task);
            progress.run.fail(task);
            if let Err(status) = self
                .recover(graph, &flow, &mut progress, task, &[server], &status)
                .await
            {
                break 'graph Err(status);
            }
        };
        staging.stop().await;
        let Progress {
            reports,
            actuals,
            faults,
            ..
        } = progress;
        match outcome {
            Ok(fetched) => {
                let mut reports: Vec<v1::TaskReport> = reports.into_iter().flatten().collect();
                for (task, output) in fetched {
                    if let Some(report) = reports.iter_mut().find(|r| r.task as usize == task) {
                        report.outputs.push(output);
                    }
                }
                Ok(Executed {
                    reports,
                    actuals,
                    makespan: start.elapsed().as_secs_f64(),
                    counts: RunCounts {
                        retried: faults.retried,
                        regenerated: faults.regenerated,
                        staged_uploads: staging.uploaded,
                        staged_upload_seconds: staging.upload_seconds,
                    },
                })
            }
            Err(status) => {
                // Stop the calls still out before the caller deletes what they stored.
                calls.abort_all();
                while calls.join_next().await.is_some() {}
                Err(fail(status, actuals))
            }
        }
    }

    /// After a fault on `task` (whose call failed, or whose output was found lost at the
    /// end) blamed on `culprits`: counts the retry or gives up, finds which kept outputs the
    /// culprits lost, schedules their producers again where something still needs them, and
    /// sets the task's back-off.
    async fn recover(
        &self,
        graph: &v1::TaskGraph,
        flow: &Dataflow,
        progress: &mut Progress,
        task: usize,
        culprits: &[String],
        status: &Status,
    ) -> Result<(), Status> {
        let faults = &mut progress.faults;
        faults.attempts[task] += 1;
        let attempts = faults.attempts[task];
        if attempts > self.config.task_retries {
            let function = &graph.tasks[task].function;
            let offered = self
                .candidates()
                .await
                .map(|c| {
                    c.iter().any(|c| {
                        !faults.suspects.contains(&c.address)
                            && c.functions.iter().any(|f| f == function)
                    })
                })
                .unwrap_or(false);
            let why = if offered {
                format!("failed {attempts} times")
            } else {
                format!("cannot run: no healthy server offers `{function}` any more")
            };
            return Err(Status::unavailable(format!(
                "{} {why}; the last error: {}",
                describe(graph, task),
                status.message()
            )));
        }
        faults.retried += 1;
        for culprit in culprits {
            self.suspect(culprit);
            progress.faults.suspects.insert(culprit.clone());
            self.find_lost(culprit, &progress.objects, &mut progress.faults.lost)
                .await;
        }
        progress.forget(task);
        progress.run.retry(task);
        let lost = progress.faults.lost.clone();
        let invalidated = progress.run.regenerate(
            |t| lost.contains(&t),
            |t| flow.fetched_at_end(t).next().is_some(),
        );
        for &t in &invalidated {
            progress.forget(t);
        }
        if !invalidated.is_empty() {
            tracing::info!(?invalidated, "regenerating lost intermediates");
        }
        progress.faults.regenerated += invalidated.len() as u32;
        progress.delays[task] = recovery::backoff(
            attempts,
            Duration::from_secs_f64(self.config.retry_backoff_seconds.max(0.0)),
            Duration::from_secs_f64(self.config.retry_backoff_max_seconds.max(0.0)),
        );
        Ok(())
    }

    /// Asks `server` which of the graph's objects it still holds; marks the tasks whose
    /// objects it does not (or that it cannot tell, being unreachable) as lost.
    async fn find_lost(
        &self,
        server: &str,
        objects: &HashMap<(usize, u32), v1::ObjectRef>,
        lost: &mut HashSet<usize>,
    ) {
        let Ok(connection) = self.server(server) else {
            return;
        };
        for (&(task, _), object) in objects {
            if object.server != server || lost.contains(&task) {
                continue;
            }
            let mut storage = v1::storage_client::StorageClient::new(connection.channel());
            let stat = storage.stat(v1::StatRequest {
                object_id: object.object_id.clone(),
            });
            let present = matches!(tokio::time::timeout(STAT_TIMEOUT, stat).await, Ok(Ok(_)));
            if !present {
                lost.insert(task);
            }
        }
    }

    /// The servers the metaserver lists as up.
    async fn candidates(&self) -> Result<Vec<Candidate>, Status> {
        let status = self
            .scheduling()
            .status(v1::StatusRequest { recent_graphs: 0 })
            .await?
            .into_inner();
        Ok(status
            .servers
            .into_iter()
            .filter(|s| s.up)
            .map(|s| Candidate {
                mflops: s.mflops * f64::from(s.processors.max(1)),
                load: s.load,
                address: s.address,
                functions: s.functions,
            })
            .collect())
    }

    /// Moves `task` off its suspect server to the best healthy one offering its routine;
    /// leaves it where it is if there is none (its server may come back).
    async fn move_task(
        &self,
        graph: &v1::TaskGraph,
        task: usize,
        servers: &mut [String],
        suspects: &HashSet<String>,
        used: &UsedServers,
    ) {
        let function = &graph.tasks[task].function;
        let candidates = match self.candidates().await {
            Ok(c) => c,
            Err(status) => {
                tracing::warn!(error = %status.message(), "cannot list servers to move a task to");
                return;
            }
        };
        if let Some(to) = recovery::replacement(function, &candidates, suspects) {
            tracing::info!(task, from = %servers[task], to = %to.address, "moving a task off a suspect server");
            servers[task] = to.address.clone();
            Self::lock(used).insert(to.address.clone());
        }
    }

    /// Reads a stored object.
    async fn fetch(&self, object: &v1::ObjectRef) -> Result<v1::Array, Status> {
        let connection = self.server(&object.server)?;
        let mut stream = v1::storage_client::StorageClient::new(connection.channel())
            .max_decoding_message_size(CALL_LIMIT)
            .get(v1::GetRequest {
                object_id: object.object_id.clone(),
            })
            .await?
            .into_inner();
        let mut data = BytesMut::new();
        let mut element_type = 0;
        while let Some(chunk) = stream.message().await? {
            if chunk.total_bytes > 0 {
                element_type = chunk.element_type;
                data.reserve(usize::try_from(chunk.total_bytes).unwrap_or(0));
            }
            data.extend_from_slice(&chunk.data);
        }
        Ok(v1::Array {
            element_type,
            data: data.freeze(),
        })
    }
}

/// The call for `task`: its own arguments, with those an edge feeds replaced by the
/// producers' stored objects.
fn build_call(
    graph: &v1::TaskGraph,
    arguments: &[v1::TaskArguments],
    flow: &Dataflow,
    progress: &Progress,
    task: usize,
    owner: &str,
) -> Result<v1::CallRequest, Status> {
    let label = &graph.tasks[task].label;
    let mut args = arguments[task].arguments.clone();
    for &(parameter, from, from_parameter) in &flow.fed[task] {
        let Some(slot) = args.get_mut(parameter as usize) else {
            return Err(Status::invalid_argument(format!(
                "task {task} (`{label}`) has {} arguments, but an edge feeds parameter \
                 {parameter}",
                args.len()
            )));
        };
        let Some(object) = progress.objects.get(&(from, from_parameter)) else {
            return Err(Status::internal(format!(
                "task {from} finished without keeping parameter {from_parameter} that task \
                 {task} (`{label}`) needs"
            )));
        };
        *slot = v1::CallArgument {
            source: Some(v1::call_argument::Source::Object(object.clone())),
        };
    }
    Ok(v1::CallRequest {
        function: graph.tasks[task].function.clone(),
        arguments: args,
        keep: flow.keep[task].iter().copied().collect(),
        owner: owner.to_string(),
        timeout_seconds: 0.0,
        // gRPC calls carry the token in their metadata.
        authorization: String::new(),
    })
}
