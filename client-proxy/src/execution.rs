//! Runs a placed graph (the metaserver paper, step 5): issues its tasks in dependency order, independent
//! ones in parallel, with intermediate data flowing server to server through their storage,
//! and collects what the client asked for. It also recovers from faults. A call lost with its
//! server is issued again, on another server when its own is suspect. An input lost with its
//! server is made again by re-running its producers (lineage, back to data that survived).
//! Each task gets at most `task_retries` retries, with doubling back-off. The decisions are in
//! [`crate::recovery`] and [`crate::run_state`]; this is the async loop around them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use ninf_proto::v1;
use tokio::task::JoinSet;
use tonic::{Code, Status};
use tracing::Instrument;

use crate::progress::ProgressSink;
use crate::recovery::{self, CallFailure, Candidate};
use crate::run_state::GraphRun;
use crate::staging::{Staging, Uploaded};
use crate::turns::Turns;
use crate::{Executed, Failed, Proxy, RunCounts, UsedServers};

/// How long a journaled transaction runs before its finished tasks are journaled.
const JOURNAL_PROGRESS_AFTER: Duration = Duration::from_millis(500);

/// How long a suspect server has to say whether it still holds an object.
const STAT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the journal gives a run: where to record its tasks, and for a transaction resumed
/// after a restart, what its earlier life finished.
pub(crate) struct Journaling<'a> {
    /// The transaction's key in the journal; none: not journaled.
    pub key: Option<&'a str>,
    pub restored: Option<Restored>,
}

/// A resumed transaction's finished tasks: their reports (outputs: the objects they kept),
/// and those of them whose objects are gone.
pub(crate) struct Restored {
    pub done: Vec<v1::TaskReport>,
    pub missing: HashSet<usize>,
}

/// One task's call as issued.
struct Issued {
    task: usize,
    server: String,
    /// When the call was sent (seconds from the graph's start).
    started: f64,
    /// When it is timed from: its sending, or when it began to wait for its turn.
    timed_from: f64,
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
    /// Bytes each task reads from its producers' storage (its incoming edges).
    fed_bytes: Vec<u64>,
    /// Inputs each task's server keeps once fetched: replicas of data handles.
    keep_inputs: Vec<BTreeSet<u32>>,
    /// Each task's part of the client's output region, (offset, bytes), as the client sized
    /// it (`local::output_parts`).
    output_parts: Vec<Option<(u64, u64)>>,
}

impl Dataflow {
    fn new(
        graph: &v1::TaskGraph,
        arguments: &[v1::TaskArguments],
        data: &crate::data::DataUses,
    ) -> Result<Dataflow, Status> {
        let n = graph.tasks.len();
        let mut fed: Vec<Vec<(u32, usize, u32)>> = vec![Vec::new(); n];
        let mut keep: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); n];
        let mut fed_bytes = vec![0u64; n];
        for edge in &graph.edges {
            let (from, to) = (edge.from_task as usize, edge.to_task as usize);
            if from >= n || to >= n {
                return Err(Status::invalid_argument(format!(
                    "an edge joins task {from} to task {to}, but the graph has {n} tasks"
                )));
            }
            fed[to].push((edge.to_parameter, from, edge.from_parameter));
            keep[from].insert(edge.from_parameter);
            fed_bytes[to] += edge.bytes;
        }
        for (task, parameter, _) in &data.writes {
            if let Some(kept) = keep.get_mut(*task) {
                kept.insert(*parameter);
            }
        }
        let mut keep_inputs: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); n];
        for (task, parameter, _) in &data.replicas {
            if let Some(kept) = keep_inputs.get_mut(*task) {
                kept.insert(*parameter);
            }
        }
        let returns = arguments
            .iter()
            .map(|a| a.returns.iter().copied().collect())
            .collect();
        let output_parts = ninf_proto::net::local::output_parts(
            graph
                .tasks
                .iter()
                .zip(arguments)
                .map(|(task, arguments)| (task.client_out_bytes, arguments.returns.len())),
        );
        Ok(Dataflow {
            fed,
            keep,
            returns,
            fed_bytes,
            keep_inputs,
            output_parts,
        })
    }

    /// Where `task`'s routine writes the outputs the client wants back, in the client's
    /// region `region`: the task's part of it, for those outputs not kept in storage.
    fn output_place(&self, task: usize, region: &str) -> Option<v1::OutputPlace> {
        let (offset, bytes) = (*self.output_parts.get(task)?)?;
        let mut parameters: Vec<u32> = self.returns[task]
            .iter()
            .copied()
            .filter(|p| !self.keep[task].contains(p))
            .collect();
        parameters.sort_unstable();
        (!parameters.is_empty()).then(|| v1::OutputPlace {
            region: region.to_string(),
            offset,
            bytes,
            parameters,
        })
    }

    /// Kept outputs the client also wants: fetched from storage after the last task.
    fn fetched_at_end(&self, task: usize) -> impl Iterator<Item = u32> + '_ {
        self.keep[task]
            .iter()
            .copied()
            .filter(move |p| self.returns[task].contains(p))
    }

    /// The task returns an output to the client with its reply (not kept in storage).
    fn returns_inline(&self, task: usize) -> bool {
        self.returns[task]
            .iter()
            .any(|p| !self.keep[task].contains(p))
    }
}

/// Recovery bookkeeping of one graph run.
struct Faults {
    /// Retries so far, per task.
    attempts: Vec<u32>,
    /// The servers on which each task's routine crashed, in order.
    crashed_on: Vec<Vec<String>>,
    /// Servers that failed a call or lost data during this graph, with the time (on the
    /// proxy's clock) of the latest such failure. Until work started after that succeeds on
    /// one (it restarted, or the fault passed), no task moves to it and tasks placed on it
    /// move away before they are issued; its staged arrays are never trusted again.
    suspects: HashMap<String, f64>,
    /// Tasks whose kept outputs are known lost.
    lost: HashSet<usize>,
    /// Copies of data handles (object ids) a call could not read: retries read another.
    lost_copies: HashSet<String>,
    retried: u32,
    regenerated: u32,
    /// What went wrong and what was done, for the metaserver's event log.
    incidents: Vec<v1::GraphIncident>,
}

/// The graph's progress that the run loop and its recovery share.
struct Progress {
    /// The graph's owner on the servers (`PROXY/graph-ID`), which names it in the log.
    owner: String,
    run: GraphRun,
    objects: HashMap<(usize, u32), v1::ObjectRef>,
    /// Inputs the tasks' servers kept (`CallRequest.keep_inputs`), under the graph's owner.
    kept_inputs: HashMap<(usize, u32), v1::ObjectRef>,
    /// Copies of replicated handles' new values made before the commit, under the graph's
    /// owner, by the output they copy (`crate::data::written_copies`).
    written_copies: HashMap<(usize, u32), Vec<v1::ObjectRef>>,
    reports: Vec<Option<v1::TaskReport>>,
    actuals: Vec<v1::TaskActual>,
    /// Object ids each task's latest call read from storage.
    inputs: Vec<Vec<String>>,
    /// Back-off before each task's next call.
    delays: Vec<Duration>,
    /// Bytes of each task's latest call request.
    sent_bytes: Vec<u64>,
    faults: Faults,
    /// When the graph started, for the incidents' times.
    started: Instant,
    /// Tasks done before a restart of the proxy and not run again.
    resumed: u32,
}

impl Progress {
    /// Records an incident for the metaserver's event log.
    fn note(&mut self, kind: &str, task: usize, server: &str, detail: String) {
        self.faults.incidents.push(v1::GraphIncident {
            kind: kind.to_string(),
            task: task as u32,
            server: server.to_string(),
            detail,
            at: self.started.elapsed().as_secs_f64(),
        });
    }

    /// Forgets what a task's earlier run produced (it runs again).
    fn forget(&mut self, task: usize) {
        self.objects.retain(|&(t, _), _| t != task);
        self.written_copies.retain(|&(t, _), _| t != task);
        self.reports[task] = None;
        self.actuals.retain(|a| a.task as usize != task);
    }
}

/// How many times a task whose routine crashed runs again: once, on another server if there
/// is one (the server may be at fault: its memory, its libraries), and no more (a routine
/// that crashes twice crashes anywhere).
const CRASH_RETRIES: usize = 1;

/// The graph's failure when `task`'s routine crashed on each of `servers`: the routine's own
/// failure (`ABORTED`, which clients report as a failed session), saying how it ended.
fn crashed_again(graph: &v1::TaskGraph, task: usize, servers: &[String], last: &Status) -> Status {
    Status::aborted(format!(
        "{} crashed on {}: {}",
        describe(graph, task),
        servers.join(", then on "),
        last.message()
    ))
}

fn describe(graph: &v1::TaskGraph, task: usize) -> String {
    let meta = &graph.tasks[task];
    format!("task {task} (`{}`, {})", meta.label, meta.function)
}

/// What the run loop waits for next.
enum Event {
    /// A call ended (replied or failed).
    Call(Issued),
    /// A call's task ended without an answer (it panicked or was cancelled).
    CallLost(String),
    /// A staged upload finished.
    Uploaded(Uploaded),
    /// Every upload queue ended without reporting some uploads.
    UploadsGone,
    /// A task's back-off after a fault ended: it is placed and issued now.
    BackedOff(usize),
    /// The last long call waited as long as it may to borrow cores: it is issued now.
    HoldEnded,
    /// Nothing is out: no call, no upload, no task backing off.
    Idle,
}

/// One graph being run: the state its event handlers share. Tasks become ready
/// ([`GraphExecution::issue_ready`]), calls reply ([`GraphExecution::on_reply`]) or fail
/// ([`GraphExecution::on_failure`]), uploads finish (the staging's `settle`), and at the end
/// kept outputs the client wants are fetched ([`GraphExecution::fetch_kept_outputs`]); a
/// fault anywhere sends affected tasks back through recovery.
struct GraphExecution<'a> {
    proxy: &'a Proxy,
    graph: &'a v1::TaskGraph,
    arguments: &'a [v1::TaskArguments],
    /// One server per task, changed when a task moves after a fault.
    servers: &'a mut [String],
    owner: &'a str,
    used: &'a UsedServers,
    flow: Dataflow,
    progress: Progress,
    staging: Staging,
    calls: JoinSet<Issued>,
    /// Tasks waiting out their back-off after a fault. They are placed when it ends, not
    /// before: a server seen failing may have answered again meanwhile.
    backing_off: JoinSet<usize>,
    /// Tasks whose back-off ended, to be issued.
    backed_off: Vec<usize>,
    start: Instant,
    /// The graph's start on the proxy's clock, for the suspect board.
    origin: f64,
    /// Where a client following the run sees its progress.
    sink: &'a ProgressSink,
    /// The transaction's key in the journal, if it is journaled.
    journal_key: Option<&'a str>,
    /// Whether its finished tasks are being journaled yet (see
    /// [`GraphExecution::journal_progress`]).
    progress_journaled: bool,
    /// The handles the run reads and writes.
    data: &'a crate::data::DataUses,
    /// The client's region for the run's large outputs (`RunRequest.output_region`): each
    /// task's routine writes its wanted outputs in the task's part of it, when its server
    /// is on this host.
    output_region: Option<&'a str>,
    /// Which ready tasks wait for a turn on their server (`crate::turns`).
    turns: Turns,
}

impl Proxy {
    /// Runs the graph on `servers` (one per task, changed when a task moves after a fault),
    /// adding every server it stores anything on to `used`.
    pub(crate) async fn execute(
        &self,
        (graph, arguments, output_region): (&v1::TaskGraph, &[v1::TaskArguments], Option<&str>),
        (servers, staging_plan, turns): (&mut [String], &[v1::StagedInput], Turns),
        (owner, used): (&str, &UsedServers),
        sink: &ProgressSink,
        journaling: Journaling<'_>,
        data: &crate::data::DataUses,
    ) -> Result<Executed, Failed> {
        let start = Instant::now();
        let flow = match Dataflow::new(graph, arguments, data) {
            Ok(flow) => flow,
            Err(status) => {
                return Err(Failed {
                    status,
                    actuals: Vec::new(),
                    makespan: 0.0,
                    incidents: Vec::new(),
                });
            }
        };
        let mut progress = Progress::new(graph, owner);
        if let Some(restored) = journaling.restored {
            progress.restore(graph, &flow, restored);
        }
        let mut execution = GraphExecution {
            proxy: self,
            graph,
            arguments,
            output_region,
            servers,
            owner,
            used,
            flow,
            progress,
            staging: Staging::start(self, staging_plan, arguments, owner, used),
            calls: JoinSet::new(),
            backing_off: JoinSet::new(),
            backed_off: Vec::new(),
            start,
            origin: self.clock(),
            sink,
            journal_key: journaling.key,
            progress_journaled: false,
            data,
            turns,
        };
        let outcome = execution.run().await;
        execution.finish(outcome).await
    }
}

impl Progress {
    fn new(graph: &v1::TaskGraph, owner: &str) -> Progress {
        let n = graph.tasks.len();
        let dependencies = graph
            .edges
            .iter()
            .map(|e| (e.from_task as usize, e.to_task as usize));
        Progress {
            owner: owner.to_string(),
            run: GraphRun::new(n, dependencies),
            objects: HashMap::new(),
            kept_inputs: HashMap::new(),
            written_copies: HashMap::new(),
            reports: vec![None; n],
            actuals: Vec::new(),
            inputs: vec![Vec::new(); n],
            delays: vec![Duration::ZERO; n],
            sent_bytes: vec![0; n],
            faults: Faults {
                attempts: vec![0; n],
                crashed_on: vec![Vec::new(); n],
                suspects: HashMap::new(),
                lost: HashSet::new(),
                lost_copies: HashSet::new(),
                retried: 0,
                regenerated: 0,
                incidents: Vec::new(),
            },
            started: Instant::now(),
            resumed: 0,
        }
    }

    /// Takes up a resumed transaction's finished tasks: those whose objects survived are
    /// done; those whose objects are gone, or whose outputs went to the client inline (lost
    /// with the proxy), run again where something still needs them, back through lineage.
    fn restore(&mut self, graph: &v1::TaskGraph, flow: &Dataflow, restored: Restored) {
        let n = graph.tasks.len();
        let done: HashSet<usize> = restored
            .done
            .iter()
            .map(|r| r.task as usize)
            .filter(|&t| t < n)
            .collect();
        let dependencies = graph
            .edges
            .iter()
            .map(|e| (e.from_task as usize, e.to_task as usize));
        self.run = GraphRun::restore(n, dependencies, |t| done.contains(&t));
        for mut report in restored.done {
            let task = report.task as usize;
            if task >= n {
                continue;
            }
            for output in std::mem::take(&mut report.outputs) {
                if let Some(v1::call_output::Result::Object(object)) = output.result {
                    self.objects.insert((task, output.parameter), object);
                }
            }
            self.reports[task] = Some(report);
        }
        let missing = restored.missing;
        let invalidated = self.run.regenerate(
            |t| missing.contains(&t) || flow.returns_inline(t),
            |t| !flow.returns[t].is_empty(),
        );
        for &t in &invalidated {
            self.forget(t);
        }
        self.faults.lost = missing;
        self.resumed = (done.len() - invalidated.len()) as u32;
    }
}

impl GraphExecution<'_> {
    /// Runs every task, then fetches the kept outputs the client wants and copies the
    /// replicated handles' new values; a loss found then sends the run back to its calls.
    async fn run(&mut self) -> Result<Vec<(usize, v1::CallOutput)>, Status> {
        loop {
            self.run_calls().await?;
            let Some(fetched) = self.fetch_kept_outputs().await? else {
                continue;
            };
            if self.copy_written_values().await? {
                return Ok(fetched);
            }
        }
    }

    /// Copies each replicated handle's new value to the servers of its old copies, under
    /// the graph's owner (`crate::data::written_copies`). A value lost before it was copied sends
    /// its writer back to run again (`false`); a copy its target fails is left to the
    /// commit's replicas.
    async fn copy_written_values(&mut self) -> Result<bool, Status> {
        let outputs: Vec<((usize, u32), v1::ObjectRef)> = self
            .data
            .writes
            .iter()
            .filter_map(|(t, p, _)| Some(((*t, *p), self.progress.objects.get(&(*t, *p))?.clone())))
            .collect();
        for (output, object) in outputs {
            let made: Vec<String> = self
                .progress
                .written_copies
                .get(&output)
                .map_or_else(Vec::new, |copies| {
                    copies.iter().map(|c| c.server.clone()).collect()
                });
            for target in self.data.written_copy_targets(output, &object, &made) {
                Proxy::lock(self.used).insert(target.clone());
                match self
                    .proxy
                    .cluster
                    .copy_from(&target, &object, self.owner)
                    .await
                {
                    Ok(copy) => self
                        .progress
                        .written_copies
                        .entry(output)
                        .or_default()
                        .push(copy),
                    Err(status) => {
                        if let Err(lost) = self
                            .proxy
                            .cluster
                            .stat(&object.server, &object.object_id)
                            .await
                        {
                            self.on_lost_at_end(output.0, object.server.clone(), lost)
                                .await?;
                            return Ok(false);
                        }
                        tracing::warn!(graph = %self.owner, server = %target, error = %status.message(), "cannot copy a handle's new value before the commit; its replicas are made after");
                    }
                }
            }
        }
        Ok(true)
    }

    /// Issues ready tasks and handles what comes back until nothing is out.
    async fn run_calls(&mut self) -> Result<(), Status> {
        loop {
            self.issue_ready().await?;
            match self.next_event().await {
                Event::Call(issued) => {
                    self.turns.ended(issued.task, &issued.server);
                    match issued.result {
                        Ok(reply) => {
                            let (task, server) = (issued.task, issued.server.clone());
                            let times = (issued.started, issued.timed_from, issued.finished);
                            self.on_reply(task, server, times, reply);
                        }
                        Err(ref status) => {
                            let status = status.clone();
                            self.on_failure(&issued, status).await?;
                        }
                    }
                }
                Event::CallLost(e) => {
                    return Err(Status::internal(format!("a task's call was lost: {e}")));
                }
                Event::Uploaded(uploaded) => self.staging.settle(uploaded),
                Event::UploadsGone => self.staging.give_up(),
                Event::BackedOff(task) => self.backed_off.push(task),
                Event::HoldEnded => {}
                Event::Idle => break,
            }
        }
        if self.progress.run.is_complete() {
            Ok(())
        } else {
            Err(Status::internal(
                "the graph stopped with tasks never ready (a cycle?)",
            ))
        }
    }

    /// The next call to end or upload to finish.
    async fn next_event(&mut self) -> Event {
        let uploading = self.staging.uploading();
        let held_until = self
            .turns
            .held_until()
            .map(|until| self.start + Duration::try_from_secs_f64(until).unwrap_or(Duration::ZERO));
        tokio::select! {
            Some(joined) = self.calls.join_next() => match joined {
                Ok(issued) => Event::Call(issued),
                Err(e) => Event::CallLost(e.to_string()),
            },
            uploaded = self.staging.next(), if uploading => match uploaded {
                Some(uploaded) => Event::Uploaded(uploaded),
                None => Event::UploadsGone,
            },
            Some(waited) = self.backing_off.join_next() => match waited {
                Ok(task) => Event::BackedOff(task),
                Err(e) => Event::CallLost(e.to_string()),
            },
            () = tokio::time::sleep_until(held_until.unwrap_or(self.start).into()), if held_until.is_some() => {
                Event::HoldEnded
            }
            else => Event::Idle,
        }
    }

    /// Issues every task that is ready, not waiting for a staged upload, and not waiting
    /// for a turn on its server.
    async fn issue_ready(&mut self) -> Result<(), Status> {
        let mut ready = self.progress.run.take_ready();
        ready.extend(self.staging.take_released());
        ready.append(&mut self.backed_off);
        let mut issuable = Vec::with_capacity(ready.len());
        for task in ready {
            if self.staging.park(task) {
                continue;
            }
            let delay = std::mem::take(&mut self.progress.delays[task]);
            if !delay.is_zero() {
                self.backing_off.spawn(async move {
                    tokio::time::sleep(delay).await;
                    task
                });
                continue;
            }
            self.move_off_suspect(task).await;
            issuable.push(task);
        }
        let servers = &*self.servers;
        let now = self.start.elapsed().as_secs_f64();
        let issuable = self.turns.take(issuable, |task| servers[task].clone(), now);
        // A lone task (nothing else of the graph running or waiting) may be given cores idle
        // elsewhere on its server's host: no call of its own graph would wait for them.
        let alone = issuable.len() == 1
            && self.calls.is_empty()
            && self.backing_off.is_empty()
            && !self.staging.holds_tasks()
            && !self.turns.holds_tasks();
        for task in issuable {
            let distrusted = self.proxy.distrusted(&self.progress.faults.suspects);
            let mut call = self.call_for(task, &distrusted)?;
            call.alone = alone;
            self.issue(task, call);
        }
        Ok(())
    }

    /// Moves `task` to another server if its own is suspect now.
    async fn move_off_suspect(&mut self, task: usize) {
        let suspects = self.proxy.suspects_with(&self.progress.faults.suspects);
        if !suspects.contains(&self.servers[task]) {
            return;
        }
        let from = self.servers[task].clone();
        let moved = self
            .proxy
            .move_task(self.graph, task, self.servers, &suspects, self.used)
            .await;
        if let Some(to) = moved {
            tracing::info!(graph = %self.owner, task, %from, %to, "moving a task off a suspect server");
            self.progress.note("moved", task, &from, format!("to {to}"));
        }
    }

    /// `task`'s call: its arguments, edges fed from stored objects, staged arrays named.
    fn call_for(
        &mut self,
        task: usize,
        distrusted: &HashSet<String>,
    ) -> Result<v1::CallRequest, Status> {
        let mut call = build_call(
            self.graph,
            self.arguments,
            &self.flow,
            &self.progress,
            task,
            self.owner,
        )?;
        if let Some(region) = self.output_region {
            call.output_place = self.flow.output_place(task, region);
        }
        if self.journal_key.is_some() {
            // A journaled task outlives this proxy on its server: restarted, the proxy sends
            // it again under the same key and is answered by the run under way.
            call.call_key = format!("{}/task-{task}", self.owner);
        }
        self.data.rebind(
            task,
            &mut call.arguments,
            &self.progress.faults.lost_copies,
            distrusted,
        )?;
        for (parameter, object) in self.staging.objects_for(task, distrusted) {
            if let Some(slot) = call.arguments.get_mut(parameter as usize) {
                *slot = v1::CallArgument {
                    source: Some(v1::call_argument::Source::Object(object.clone())),
                };
            }
        }
        self.progress.inputs[task] = call
            .arguments
            .iter()
            .filter_map(|a| match &a.source {
                Some(v1::call_argument::Source::Object(o)) => Some(o.object_id.clone()),
                _ => None,
            })
            .collect();
        Ok(call)
    }

    /// Sends `task`'s call to its server after its back-off, if it has one.
    fn issue(&mut self, task: usize, call: v1::CallRequest) {
        let cluster = self.proxy.cluster.clone();
        let server = self.servers[task].clone();
        let start = self.start;
        // Issued now, not when its task first runs: of 10,000 tiny calls issued at once, the
        // last ran 0.16 s later, and its call looked 0.03 s long when it had waited 0.19 s.
        let started = start.elapsed().as_secs_f64();
        let waited_since = self.turns.issued(task, &server, started);
        if self.sink.is_followed() {
            self.progress.sent_bytes[task] = prost::Message::encoded_len(&call) as u64;
        }
        let span = task_span(task, &call.function, &server);
        self.calls.spawn(
            async move {
                let result = cluster.invoke(&server, call).await;
                Issued {
                    task,
                    server,
                    started,
                    timed_from: waited_since.unwrap_or(started),
                    finished: start.elapsed().as_secs_f64(),
                    result,
                }
            }
            .instrument(span),
        );
    }

    /// A call replied: its kept outputs are recorded, the ones the client wants kept for
    /// the reply, and its consumers may become ready.
    fn on_reply(
        &mut self,
        task: usize,
        server: String,
        (sent, started, finished): (f64, f64, f64),
        reply: v1::CallReply,
    ) {
        let moved = if self.sink.is_followed() {
            let replied = prost::Message::encoded_len(&reply) as u64;
            self.progress.sent_bytes[task] + replied + self.flow.fed_bytes[task]
        } else {
            0
        };
        let progress = &mut self.progress;
        ninf_proto::sync::lock(&self.proxy.suspects).worked(&server, self.origin + sent);
        for kept in reply.kept_inputs {
            if let Some(object) = kept.object {
                progress.kept_inputs.insert((task, kept.parameter), object);
            }
        }
        let mut outputs = Vec::new();
        for output in reply.outputs {
            match output.result {
                Some(v1::call_output::Result::Object(object)) => {
                    progress.objects.insert((task, output.parameter), object);
                }
                Some(v1::call_output::Result::Array(_))
                    if self.flow.returns[task].contains(&output.parameter) =>
                {
                    outputs.push(output);
                }
                _ => {}
            }
        }
        progress.actuals.push(v1::TaskActual {
            task: task as u32,
            start: started,
            finish: finished,
            timing: reply.timing,
            error: String::new(),
        });
        progress.reports[task] = Some(v1::TaskReport {
            task: task as u32,
            server,
            actual_start: started,
            actual_finish: finished,
            timing: reply.timing,
            status: reply.status,
            outputs,
            ..Default::default()
        });
        progress.faults.lost.remove(&task);
        progress.run.complete(task);
        self.sink.task_done(progress.run.done(), moved);
        self.journal_progress(task);
    }

    /// Journals that `task` finished, once the transaction has run for
    /// [`JOURNAL_PROGRESS_AFTER`] (with every task finished before then, the first time):
    /// a younger transaction is cheaper to run again after a restart than to journal task by
    /// task.
    fn journal_progress(&mut self, task: usize) {
        let Some(key) = self.journal_key else {
            return;
        };
        if self.start.elapsed() < JOURNAL_PROGRESS_AFTER {
            return;
        }
        let tasks = if self.progress_journaled {
            vec![task]
        } else {
            self.progress_journaled = true;
            (0..self.graph.tasks.len())
                .filter(|&t| self.progress.run.state(t) == Some(crate::run_state::TaskState::Done))
                .collect()
        };
        for t in tasks {
            if let Some(report) = self.journaled_report(t) {
                self.proxy.journal.record(crate::journal::Entry::TaskKept {
                    transaction_id: key.to_string(),
                    report,
                });
            }
        }
    }

    /// `task`'s report as the journal keeps it: its outputs the objects it kept. None for a
    /// task that kept nothing and sent its outputs inline: it runs again on resume anyway.
    fn journaled_report(&self, task: usize) -> Option<v1::TaskReport> {
        let report = self.progress.reports[task].as_ref()?;
        // The task's call kept exactly its `keep` parameters: look those up rather than scan
        // every object of the graph.
        let kept: Vec<v1::CallOutput> = self.flow.keep[task]
            .iter()
            .filter_map(|&parameter| {
                let object = self.progress.objects.get(&(task, parameter))?;
                Some(v1::CallOutput {
                    parameter,
                    result: Some(v1::call_output::Result::Object(object.clone())),
                })
            })
            .collect();
        if kept.is_empty() && self.flow.returns_inline(task) {
            return None;
        }
        Some(v1::TaskReport {
            task: report.task,
            server: report.server.clone(),
            actual_start: report.actual_start,
            actual_finish: report.actual_finish,
            timing: report.timing,
            status: report.status,
            outputs: kept,
            ..Default::default()
        })
    }

    /// A call failed: the graph fails if the call itself was wrong; otherwise the failure
    /// is blamed on its server or on the servers that lost its inputs, and recovery runs.
    async fn on_failure(&mut self, issued: &Issued, status: Status) -> Result<(), Status> {
        let task = issued.task;
        self.progress.run.fail(task);
        self.staging.forget(task);
        self.progress.actuals.push(v1::TaskActual {
            task: task as u32,
            start: issued.timed_from,
            finish: issued.finished,
            timing: None,
            error: status.message().to_string(),
        });
        let failure = {
            let inputs: Vec<&str> = self.progress.inputs[task]
                .iter()
                .map(String::as_str)
                .collect();
            recovery::classify(status.code(), status.message(), &inputs)
        };
        let reason = match &failure {
            CallFailure::Fatal => "fatal",
            CallFailure::Server => "server",
            CallFailure::Crashed => "crash",
            CallFailure::LostInputs(_) => "lost_input",
        };
        let culprits = match failure {
            CallFailure::Fatal => {
                let what = describe(self.graph, task);
                let message = format!("{what} on {}: {}", issued.server, status.message());
                return Err(Status::new(status.code(), message));
            }
            CallFailure::Server => vec![issued.server.clone()],
            CallFailure::Crashed => {
                let crashed_on = &mut self.progress.faults.crashed_on[task];
                crashed_on.push(issued.server.clone());
                if crashed_on.len() > CRASH_RETRIES {
                    return Err(crashed_again(self.graph, task, crashed_on, &status));
                }
                vec![issued.server.clone()]
            }
            CallFailure::LostInputs(ids) => self.blame_lost(&ids),
        };
        self.proxy
            .recover(
                self.graph,
                &self.flow,
                &mut self.progress,
                task,
                &culprits,
                &status,
            )
            .await?;
        self.proxy.metrics.retry(reason);
        self.sink.retried(self.progress.run.done());
        self.progress
            .note("retry", task, &issued.server, status.message().to_string());
        tracing::info!(
            graph = %self.owner,
            task,
            server = %issued.server,
            attempt = self.progress.faults.attempts[task],
            error = %status.message(),
            "retrying a task after a fault"
        );
        Ok(())
    }

    /// The producers of the lost objects `ids` are marked lost, and the data handles' copies
    /// among them; their servers are blamed.
    fn blame_lost(&mut self, ids: &[String]) -> Vec<String> {
        let mut culprits = BTreeSet::new();
        for (&(producer, _), object) in &self.progress.objects {
            if ids.contains(&object.object_id) {
                self.progress.faults.lost.insert(producer);
                culprits.insert(object.server.clone());
            }
        }
        for id in ids {
            if let Some(server) = self.data.copy_server(id) {
                self.progress.faults.lost_copies.insert(id.clone());
                culprits.insert(server.to_string());
            }
        }
        culprits.into_iter().collect()
    }

    /// Fetches the kept outputs the client also wants. `None` when one was lost: its
    /// producer is sent back to run again.
    async fn fetch_kept_outputs(&mut self) -> Result<Option<Vec<(usize, v1::CallOutput)>>, Status> {
        let mut fetched = Vec::new();
        let wanted: Vec<(usize, u32)> = (0..self.graph.tasks.len())
            .flat_map(|task| self.flow.fetched_at_end(task).map(move |p| (task, p)))
            .collect();
        for (task, parameter) in wanted {
            let Some(object) = self.progress.objects.get(&(task, parameter)) else {
                continue;
            };
            match self.proxy.fetch(object).await {
                Ok(array) => fetched.push((
                    task,
                    v1::CallOutput {
                        parameter,
                        result: Some(v1::call_output::Result::Array(array)),
                    },
                )),
                Err(status) => {
                    let server = object.server.clone();
                    self.on_lost_at_end(task, server, status).await?;
                    return Ok(None);
                }
            }
        }
        Ok(Some(fetched))
    }

    /// A kept output could not be fetched at the end: lost with its server (its producer
    /// runs again), or a failure recovery cannot help.
    async fn on_lost_at_end(
        &mut self,
        task: usize,
        server: String,
        status: Status,
    ) -> Result<(), Status> {
        let is_loss = status.code() == Code::NotFound
            || recovery::classify(status.code(), status.message(), &[]) == CallFailure::Server;
        if !is_loss {
            return Err(status);
        }
        self.progress.faults.lost.insert(task);
        self.progress.run.fail(task);
        self.proxy
            .recover(
                self.graph,
                &self.flow,
                &mut self.progress,
                task,
                std::slice::from_ref(&server),
                &status,
            )
            .await?;
        self.proxy.metrics.retry("lost_output");
        self.sink.retried(self.progress.run.done());
        let detail = format!("its output was lost: {}", status.message());
        self.progress.note("regenerate", task, &server, detail);
        Ok(())
    }

    /// Stops the uploads (and, after a failure, the calls still out, before the caller
    /// deletes what they stored) and reports the run.
    async fn finish(
        mut self,
        outcome: Result<Vec<(usize, v1::CallOutput)>, Status>,
    ) -> Result<Executed, Failed> {
        self.staging.stop().await;
        let makespan = || self.start.elapsed().as_secs_f64();
        let fetched = match outcome {
            Ok(fetched) => fetched,
            Err(status) => {
                self.calls.abort_all();
                while self.calls.join_next().await.is_some() {}
                return Err(Failed {
                    status,
                    actuals: self.progress.actuals,
                    makespan: makespan(),
                    incidents: self.progress.faults.incidents,
                });
            }
        };
        let mut reports: Vec<v1::TaskReport> =
            self.progress.reports.into_iter().flatten().collect();
        for (task, output) in fetched {
            if let Some(report) = reports.iter_mut().find(|r| r.task as usize == task) {
                report.outputs.push(output);
            }
        }
        let data_objects = self
            .data
            .writes
            .iter()
            .filter_map(|(task, parameter, _)| {
                let object = self.progress.objects.get(&(*task, *parameter))?;
                Some((*task, *parameter, object.clone()))
            })
            .collect();
        let written_copies = self
            .progress
            .written_copies
            .into_iter()
            .flat_map(|((task, parameter), copies)| {
                copies.into_iter().map(move |c| (task, parameter, c))
            })
            .collect();
        let data_replicas = self
            .progress
            .kept_inputs
            .into_iter()
            .map(|((task, parameter), object)| (task, parameter, object))
            .collect();
        let faults = self.progress.faults;
        Ok(Executed {
            commit: None,
            data_objects,
            written_copies,
            data_replicas,
            reports,
            actuals: self.progress.actuals,
            makespan: makespan(),
            incidents: faults.incidents,
            counts: RunCounts {
                retried: faults.retried,
                regenerated: faults.regenerated,
                staged_uploads: self.staging.uploaded,
                staged_upload_seconds: self.staging.upload_seconds,
                resumed: self.progress.resumed,
            },
        })
    }
}

impl Proxy {
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
            let suspects = self.still_suspect(&faults.suspects);
            let offered = self
                .candidates()
                .await
                .map(|c| {
                    c.iter().any(|c| {
                        !suspects.contains(&c.address) && c.functions.iter().any(|f| f == function)
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
            let failed = self.clock();
            if progress
                .faults
                .suspects
                .insert(culprit.clone(), failed)
                .is_none()
            {
                progress.note("suspect", task, culprit, status.message().to_string());
            }
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
            tracing::info!(graph = %progress.owner, ?invalidated, "regenerating lost intermediates");
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
        for (&(task, _), object) in objects {
            if object.server != server || lost.contains(&task) {
                continue;
            }
            let stat = self.cluster.stat(server, &object.object_id);
            let present = matches!(tokio::time::timeout(STAT_TIMEOUT, stat).await, Ok(Ok(_)));
            if !present {
                lost.insert(task);
            }
        }
    }

    /// The servers the metaserver lists as up.
    async fn candidates(&self) -> Result<Vec<Candidate>, Status> {
        self.metaserver.up_servers().await
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
    ) -> Option<String> {
        let function = &graph.tasks[task].function;
        let candidates = match self.candidates().await {
            Ok(c) => c,
            Err(status) => {
                tracing::warn!(task, error = %status.message(), "cannot list servers to move a task to");
                return None;
            }
        };
        let to = recovery::replacement(function, &candidates, suspects)?;
        servers[task] = to.address.clone();
        Self::lock(used).insert(to.address.clone());
        Some(to.address.clone())
    }

    /// Reads a stored object.
    async fn fetch(&self, object: &v1::ObjectRef) -> Result<v1::Array, Status> {
        self.cluster.get(object).await
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
        alone: false,
        call_key: String::new(),
        keep_inputs: flow.keep_inputs[task].iter().copied().collect(),
        ..Default::default()
    })
}

/// The span of one task's call: at `info` when the proxy exports traces, where each task is a
/// span of its graph's trace; at `debug` otherwise. No `info` event is logged inside it, and
/// each enabled span keeps a formatted copy of its fields in the subscriber's slab: a burst
/// of 100 transactions left about 1 MiB of them scattered over the heap.
fn task_span(task: usize, routine: &str, server: &str) -> tracing::Span {
    if ninf_proto::net::trace::enabled() {
        tracing::info_span!("task", task, routine = %routine, server = %server)
    } else {
        tracing::debug_span!("task", task, routine = %routine, server = %server)
    }
}
