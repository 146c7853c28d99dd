//! A graph's placement and its report (the metaserver paper, steps 4 and 6): the proxy asks
//! the metaserver to place a graph (or resumes one its journal holds from before a restart),
//! and tells it afterwards what each task did, which is what the metaserver learns from.
//! Every question goes through the [`Metaserver`](crate::metaserver::Metaserver) trait.

use std::time::{Duration, Instant};

use ninf_proto::v1;
use tonic::Status;

use crate::turns::{TaskTurn, Turns};
use crate::{Executed, Failed, Proxy, admission, execution, journal, unix_ms};

/// Each task's predicted (start, finish), seconds from the graph's start.
pub(crate) type PredictedTimes = Vec<(f64, f64)>;

impl Proxy {
    /// Measures the paths to servers never measured before a graph is placed: a server that
    /// registered after the last probe round would otherwise be scheduled on the default
    /// link's guess. Not more than `probe_before_placement_seconds` of them, though: a grid
    /// that gained thousands of servers at once has its paths measured by the background
    /// probes, and the graph goes on. It asks the metaserver which servers there are, so
    /// `run_graph` does this while it looks up the graph's handles.
    async fn probe_new_servers(&self) {
        let budget = self.config.probe_before_placement_seconds;
        if budget > 0.0
            && let Err(status) = self
                .probe_servers_within(Duration::MAX, Duration::from_secs_f64(budget))
                .await
        {
            tracing::debug!(error = %status.message(), "cannot probe new servers");
        }
    }

    /// [`Proxy::resolve_data`] while [`Proxy::probe_new_servers`] measures new paths: both
    /// ask the metaserver, at once rather than one after the other.
    pub(crate) async fn resolve_data_and_probe(
        &self,
        owner: &str,
        graph: &mut v1::TaskGraph,
        arguments: &[v1::TaskArguments],
    ) -> Result<crate::data::DataUses, Status> {
        let (data, ()) = tokio::join!(
            self.resolve_data(owner, graph, arguments),
            self.probe_new_servers(),
        );
        data
    }

    /// The graph's placement: asked of the metaserver (and journaled), or, for a transaction
    /// the journal holds from before a restart, the one it ran under, with what survived.
    /// `found` is what the journal holds of the transaction (journal key `key`, its graph
    /// as the client sent it hashing to `hash`).
    pub(crate) async fn place_or_resume(
        &self,
        graph: &v1::TaskGraph,
        (key, hash, found): (Option<&str>, u64, journal::Found),
        client: &str,
        (scheduler, label): (String, String),
    ) -> Result<Placed, Status> {
        match found {
            journal::Found::Resume(run) => return Ok(self.resume(*run).await),
            journal::Found::Stale(run) => {
                self.abandon(&run, "the client sent another graph under its id", false)
                    .await;
            }
            journal::Found::Nothing => {}
            journal::Found::Answered => {
                return Err(Status::internal(
                    "an answered transaction reached its placement",
                ));
            }
        }
        // Step 4: the metaserver checks the graph against the IDL and places it.
        let client_links = Self::lock(&self.links).unsent();
        let request = v1::ScheduleRequest {
            graph: Some(graph.clone()),
            proxy: self.name.clone(),
            client_links: client_links.clone(),
            scheduler,
            label,
            avoid: Self::lock(&self.suspects).current(self.clock()),
            request_id: key.map_or_else(new_request_id, str::to_string),
        };
        let asked = Instant::now();
        let placement = match self.schedule(request).await {
            Ok(placement) => {
                Self::lock(&self.links).taken(&client_links);
                placement
            }
            Err(status) => {
                Self::lock(&self.links).send_all_again();
                return Err(status);
            }
        };
        let schedule_seconds = asked.elapsed().as_secs_f64();
        let owner = format!("{}/graph-{}", self.name, placement.graph_id);
        if let Some(key) = key {
            let run = journal::JournaledRun {
                transaction_id: key.to_string(),
                client: client.to_string(),
                graph_hash: hash,
                owner: owner.clone(),
                placement: placement.clone(),
                accepted_ms: unix_ms(),
                tasks: Vec::new(),
                commit: None,
                answered_ms: None,
            };
            self.journal
                .record_durably(journal::Entry::Accepted(Box::new(run)))
                .await;
        }
        Ok(Placed {
            placement,
            owner,
            also_used: Vec::new(),
            restored: None,
            committed: None,
            schedule_seconds,
        })
    }

    /// Reports the run's actual times to the metaserver and makes the client's reply.
    pub(crate) async fn report_outcome(
        &self,
        graph: &v1::TaskGraph,
        placement: &v1::ScheduleReply,
        predicted: PredictedTimes,
        outcome: Result<Executed, Failed>,
    ) -> Result<v1::RunReply, Status> {
        let graph_id = placement.graph_id;
        match outcome {
            Ok(mut executed) => {
                self.report_actuals(v1::ActualsReport {
                    graph_id,
                    tasks: std::mem::take(&mut executed.actuals),
                    makespan: executed.makespan,
                    error: String::new(),
                    incidents: std::mem::take(&mut executed.incidents),
                })
                .await;
                Ok(run_reply(graph, placement, &predicted, executed))
            }
            Err(Failed {
                status,
                actuals,
                makespan,
                incidents,
            }) => {
                self.report_actuals(v1::ActualsReport {
                    graph_id,
                    tasks: actuals,
                    makespan,
                    error: status.message().to_string(),
                    incidents,
                })
                .await;
                Err(status)
            }
        }
    }

    /// The answer of transaction `key`, answered before (its reply was lost), as the
    /// journal keeps it: nothing runs, nothing is written, the metaserver is not told again.
    /// An error if the journal no longer has it: it is never run twice.
    pub(crate) async fn answer_again(
        &self,
        key: &str,
        graph: &v1::TaskGraph,
    ) -> Result<v1::RunReply, Status> {
        let (placement, commit) = self.journal.answer(key).await.map_err(|why| {
            Status::failed_precondition(format!(
                "transaction `{key}` was answered already and is not run again: {why}"
            ))
        })?;
        tracing::info!(transaction = %key, graph = placement.graph_id, "answering a transaction again from the journal");
        let (_, predicted) = placed_servers(&placement, graph.tasks.len())?;
        Ok(run_reply(
            graph,
            &placement,
            &predicted,
            Executed::committed(commit),
        ))
    }

    /// Tells the metaserver what happened to a graph (a failure to do so is only logged).
    pub(crate) async fn report_actuals(&self, report: v1::ActualsReport) {
        let graph = report.graph_id;
        if let Err(status) = self.metaserver.report_actuals(report).await {
            tracing::warn!(graph, error = %status.message(), "cannot report actuals");
        }
    }

    /// Asks the metaserver for a placement, waiting for it if it is restarting.
    async fn schedule(&self, request: v1::ScheduleRequest) -> Result<v1::ScheduleReply, Status> {
        self.with_metaserver(|| self.metaserver.schedule(request.clone()))
            .await
    }
}

/// A transaction's key in the journal: its client's id for it, on the client (ids are the
/// client's own); none when the client gave no id.
pub(crate) fn journal_key(client: &str, transaction_id: &str) -> Option<String> {
    (!transaction_id.is_empty()).then(|| format!("{client}#{transaction_id}"))
}

/// Where a graph runs: its placement and the owner of what it stores, with what a resumed
/// transaction brings from before the restart.
pub(crate) struct Placed {
    pub(crate) placement: v1::ScheduleReply,
    pub(crate) owner: String,
    /// Servers it may have stored on besides its placement's.
    pub(crate) also_used: Vec<String>,
    pub(crate) restored: Option<execution::Restored>,
    /// What a resumed transaction that had run to its end did, its data writes to finish:
    /// it does not run again.
    pub(crate) committed: Option<v1::JournaledCommit>,
    /// Seconds the metaserver took to place it (0 when resumed).
    pub(crate) schedule_seconds: f64,
}

/// The client's reply for a graph that ran to its end (or was answered before), its task
/// reports named after `graph`'s tasks.
fn run_reply(
    graph: &v1::TaskGraph,
    placement: &v1::ScheduleReply,
    predicted: &PredictedTimes,
    executed: Executed,
) -> v1::RunReply {
    let Executed {
        mut reports,
        makespan,
        counts,
        ..
    } = executed;
    for report in reports.iter_mut() {
        let task = report.task as usize;
        if let Some(t) = graph.tasks.get(task) {
            report.label = t.label.clone();
            report.function = t.function.clone();
        }
        if let Some(&times) = predicted.get(task) {
            (report.predicted_start, report.predicted_finish) = times;
        }
    }
    v1::RunReply {
        graph_id: placement.graph_id,
        scheduler: placement.scheduler.clone(),
        tasks: reports,
        predicted_makespan: placement.predicted_makespan,
        actual_makespan: makespan,
        inter_server_ratio: placement.inter_server_ratio,
        schedule_seconds: 0.0,
        tasks_retried: counts.retried,
        regenerated: counts.regenerated,
        staged_uploads: counts.staged_uploads,
        staged_upload_seconds: counts.staged_upload_seconds,
        resumed_tasks: counts.resumed,
    }
}

/// Each task's server and predicted times, from the metaserver's placement; an error if it
/// left a task without a server.
pub(crate) fn placed_servers(
    placement: &v1::ScheduleReply,
    tasks: usize,
) -> Result<(Vec<String>, PredictedTimes), Status> {
    let mut servers = vec![String::new(); tasks];
    let mut predicted = vec![(0.0, 0.0); tasks];
    for p in &placement.placements {
        if let Some(slot) = servers.get_mut(p.task as usize) {
            *slot = p.server.clone();
            predicted[p.task as usize] = (p.predicted_start, p.predicted_finish);
        }
    }
    match servers.iter().position(String::is_empty) {
        Some(task) => Err(Status::internal(format!(
            "the metaserver placed no server for task {task}"
        ))),
        None => Ok((servers, predicted)),
    }
}

/// Each task's turns on its server (`TaskPlacement.turns`), ordered by predicted start;
/// with `wait_to_borrow`, the graph's last long call may wait to borrow cores.
pub(crate) fn placed_turns(
    placement: &v1::ScheduleReply,
    tasks: usize,
    wait_to_borrow: bool,
) -> Turns {
    let mut turns = vec![TaskTurn::default(); tasks];
    for p in &placement.placements {
        if let Some(task) = turns.get_mut(p.task as usize) {
            *task = TaskTurn {
                turns: p.turns,
                start: p.predicted_start,
                alone: p.alone_seconds,
            };
        }
    }
    Turns::new(turns, wait_to_borrow)
}

/// The staged uploads to make. Staged arrays are stored on the servers like intermediates:
/// staged only if the client's quota has room for them, else each goes with its call.
pub(crate) fn staging_within_quota<'a>(
    placement: &'a v1::ScheduleReply,
    admitted: &mut admission::Admitted,
) -> &'a [v1::StagedInput] {
    let staged_bytes = placement
        .staging
        .iter()
        .fold(0u64, |sum, s| sum.saturating_add(s.bytes));
    if staged_bytes == 0 || admitted.try_grow(staged_bytes) {
        return &placement.staging;
    }
    tracing::info!(
        graph = placement.graph_id,
        staged_bytes,
        "no room in the client's storage quota to stage its arrays; they go with their calls"
    );
    &[]
}

/// An id for a schedule request of a transaction the client gave none: the time and a
/// number, unique to this proxy.
fn new_request_id() -> String {
    static ASKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = ASKED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{number}")
}
