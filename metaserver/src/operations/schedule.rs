//! Steps 4-5: a proxy asks for a graph to be placed. The graph is checked against the IDL
//! and planned by the configured scheduler on a snapshot of the registry and the planner,
//! on a blocking thread and off the state's lock: a 100,000-task graph takes seconds to
//! plan, and heartbeats, registrations and status requests are answered meanwhile. Graphs
//! are still planned one at a time, so each sees the placements of the one before; their
//! records are written after, several graphs to a commit.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use ninf_proto::v1;
use ninf_scheduling::templates::TemplateKey;
use ninf_scheduling::{Link, Schedule, TaskGraph, Timing};

use crate::db::{EdgeRecord, GraphRecord, NewGraph, PlacementRecord};
use crate::graph::{self, GraphRejection};
use crate::operations::network::{client_end, unstored_client_links};
use crate::planner::Planner;
use crate::shortlist::Asked;
use crate::{Metaserver, MetaserverError, Registry, State, unix_now};

/// What planning one graph needs, owned, so that it can run on another thread.
struct PlanInput {
    graph: v1::TaskGraph,
    scheduler: String,
    seed: u64,
    max_tasks: usize,
    client_links: Vec<(String, Link)>,
    avoid: Vec<String>,
    registry: Registry,
    planner: Planner,
    now: f64,
}

/// A planned graph, before it is recorded.
struct Plan {
    tasks: TaskGraph,
    /// The model's schedule: its placements and the timings its bookings keep.
    schedule: Schedule,
    /// What the metaserver expects the graph to take: like graphs' makespan once enough
    /// have run ([`crate::planner::Planner::expect`]), else the model's.
    predicted_makespan: f64,
    /// The template it was expected from, which it teaches once it ends.
    template: TemplateKey,
    placements: Vec<PlacementRecord>,
    /// Each task's `TaskPlacement.turns` and `.alone_seconds` ([`crate::turns`]).
    turns: Vec<crate::turns::TaskTurns>,
    staging: Vec<v1::StagedInput>,
    /// The registry the plan's server indices refer to.
    registry: Registry,
}

/// Whether a graph refused for `error` may run once an allocation queue's servers come: no
/// live server serves one of its routines, or none has the walltime left for one of its tasks.
fn wants_capacity(error: &MetaserverError) -> bool {
    matches!(
        error,
        MetaserverError::Graph(GraphRejection::UnknownRoutine { .. })
            | MetaserverError::Graph(GraphRejection::Structure(
                ninf_scheduling::GraphError::Unimplemented { .. }
            ))
            | MetaserverError::NoCapacity(_)
    )
}

impl Metaserver {
    /// Steps 4-5: checks and places a graph, records the placements. A graph that only
    /// fits on servers still to come waits for them while an allocation queue is active.
    pub async fn schedule(
        &self,
        request: v1::ScheduleRequest,
    ) -> Result<v1::ScheduleReply, MetaserverError> {
        let since = std::time::Instant::now();
        loop {
            match self.schedule_now(&request).await {
                Err(e) if wants_capacity(&e) && self.wait_for_capacity(since).await => {
                    tracing::debug!(error = %e, "graph waits for an allocation queue's servers");
                }
                Err(e) => return Err(self.down_for_now(e)),
                other => return other,
            }
        }
    }

    /// A graph refused because no server that is up implements one of its routines is
    /// refused for now when servers that implement it are only down (their heartbeats
    /// late, not draining): they may be back in a moment.
    fn down_for_now(&self, error: MetaserverError) -> MetaserverError {
        let MetaserverError::Graph(GraphRejection::Structure(
            ninf_scheduling::GraphError::Unimplemented { label, function },
        )) = &error
        else {
            return error;
        };
        let state = self.state();
        let now = unix_now();
        let down: Vec<&str> = state
            .registry
            .serving(function)
            .iter()
            .filter_map(|&i| state.registry.servers().get(i))
            .filter(|s| !s.draining && !state.registry.is_up(s, now))
            .map(|s| s.address.as_str())
            .collect();
        if down.is_empty() {
            return error;
        }
        let shown = down.len().min(3);
        let mut servers = down[..shown].join(", ");
        if down.len() > shown {
            servers.push_str(&format!(" and {} more", down.len() - shown));
        }
        MetaserverError::ServersDown {
            label: label.clone(),
            function: function.clone(),
            servers,
        }
    }

    /// Places a graph on the servers there are now. Graphs are planned and booked one at a
    /// time, so that each sees the placements of the one before; their records are written
    /// after, several graphs in one commit, and a graph is answered once its record is.
    async fn schedule_now(
        &self,
        request: &v1::ScheduleRequest,
    ) -> Result<v1::ScheduleReply, MetaserverError> {
        let scheduler = if request.scheduler.is_empty() {
            self.config.scheduler.clone()
        } else {
            request.scheduler.clone()
        };
        let now = unix_now();
        let began = std::time::Instant::now();
        let (plan, graph_id, times) = {
            let _one_at_a_time = self.scheduling.lock().await;
            self.store_client_links(request, now).await?;
            let stored = began.elapsed();
            let input = self.plan_input(request, scheduler.clone(), now);
            let copied = began.elapsed();
            let plan = self.plan_off_lock(input).await?;
            let graph_id = self.book(&plan, &scheduler, now);
            (plan, graph_id, [stored, copied, began.elapsed()])
        };
        let inter_server_ratio = plan.schedule.inter_server_ratio(&plan.tasks);
        let new = NewGraph {
            id: graph_id,
            graph: GraphRecord {
                label: request.label.clone(),
                proxy: request.proxy.clone(),
                scheduler: scheduler.clone(),
                predictor: self.config.predictor.clone(),
                tasks: plan.tasks.tasks.len() as u32,
                edges: plan.tasks.edges.len() as u32,
                created: now,
                predicted_makespan: plan.predicted_makespan,
                inter_server_ratio,
                request_id: request.request_id.clone(),
            },
            placements: plan.placements.clone(),
            edges: plan
                .tasks
                .edges
                .iter()
                .map(|e| EdgeRecord {
                    from_task: e.from as u32,
                    to_task: e.to as u32,
                    bytes: e.bytes,
                })
                .collect(),
        };
        if let Err(e) = self.graph_log.record(new).await {
            self.unbook(graph_id);
            return Err(MetaserverError::Recording(e));
        }
        let [stored, copied, planned] = times;
        let recorded = began.elapsed();
        // Recording took 1-6 ms under `ninf load`, as long as a whole graph there.
        self.state().planner.started_at(graph_id, unix_now());
        self.graph_changed(graph_id);
        self.alloc.worked(now);
        tracing::info!(
            graph = graph_id,
            label = %request.label,
            tasks = plan.tasks.tasks.len(),
            %scheduler,
            predicted_makespan = plan.predicted_makespan,
            model_makespan = plan.schedule.makespan,
            load_band = plan.template.band,
            inter_server_ratio,
            servers_planned_on = plan.registry.servers().len(),
            links_ms = stored.as_secs_f64() * 1e3,
            copy_ms = (copied - stored).as_secs_f64() * 1e3,
            plan_ms = (planned - copied).as_secs_f64() * 1e3,
            record_ms = (recorded - planned).as_secs_f64() * 1e3,
            "graph scheduled"
        );
        Ok(reply(
            graph_id,
            scheduler,
            &self.config.predictor,
            plan,
            inter_server_ratio,
        ))
    }

    /// Numbers a planned graph and books its placements, so that the next graph planned
    /// sees them; returns its id.
    fn book(&self, plan: &Plan, scheduler: &str, now: f64) -> u64 {
        let graph_id = self.next_graph_id.fetch_add(1, Ordering::SeqCst);
        let mut state = self.state();
        let State {
            planner,
            running,
            registry,
            ..
        } = &mut *state;
        let placed = unix_now();
        for placement in &plan.placements {
            registry.busy_until(
                &placement.server_address,
                placed + placement.predicted_finish,
            );
        }
        planner.record(
            graph_id,
            &plan.tasks,
            &plan.schedule,
            &plan.registry,
            placed,
        );
        planner.file_under(graph_id, plan.template, now);
        let graph = crate::RunningGraph {
            scheduler: scheduler.to_string(),
            predicted_makespan: plan.predicted_makespan,
        };
        running.insert(graph_id, graph);
        graph_id
    }

    /// Takes back the bookings of a graph whose record could not be written: it is refused,
    /// and its placements must not count as load. (A server's busy-until mark, which only
    /// keeps an allocation queue from letting it go, stays.)
    fn unbook(&self, graph_id: u64) {
        let mut state = self.state();
        state.running.remove(&graph_id);
        state.planner.forget(graph_id);
    }

    /// Graphs being planned right now (0 or 1): for tests and metrics.
    pub fn planning_now(&self) -> u64 {
        self.planning.load(Ordering::Relaxed)
    }

    /// The proxy's measurements enter the DB and the registry when it asks for a
    /// schedule, those it has not sent before. A proxy sends each once (it sent all it
    /// kept with every graph, 80,000 samples at 10,000 servers); the registry keeps the
    /// history the planning reads, under the proxy's end of the path (`client:<proxy>`),
    /// and a restarted metaserver reads it back from the DB.
    async fn store_client_links(
        &self,
        request: &v1::ScheduleRequest,
        now: f64,
    ) -> Result<(), MetaserverError> {
        let (fresh, newest) =
            unstored_client_links(request, &self.state().client_links_stored, now);
        if fresh.is_empty() {
            return Ok(());
        }
        self.db.add_links(&fresh).await?;
        let mut state = self.state();
        for link in &fresh {
            let sample = Link {
                throughput: link.throughput,
                latency: link.latency,
            };
            state.registry.add_link(&link.from, &link.to, sample);
        }
        state.client_links_stored.extend(newest);
        Ok(())
    }

    /// Everything the plan needs, with the registry (the graph's shortlist of it) and
    /// planner copied under a brief lock.
    fn plan_input(&self, request: &v1::ScheduleRequest, scheduler: String, now: f64) -> PlanInput {
        let graph = request.graph.clone().unwrap_or_default();
        let client = client_end(&request.proxy);
        let (registry, client_links, planner, scheduled) = {
            let mut state = self.state();
            state.scheduled += 1;
            let mut registry = self.shortlisted(&state, &graph, &client, request, now);
            registry.plan_for_client(&client);
            let client_links = state.registry.series_from(&client, registry.servers());
            let planner = state.planner.for_planning(&registry, now);
            (registry, client_links, planner, state.scheduled)
        };
        PlanInput {
            graph,
            scheduler,
            // Varies the random scheduler's choices from graph to graph.
            seed: self.config.random_seed ^ scheduled.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            max_tasks: self.config.max_graph_tasks,
            client_links,
            avoid: request.avoid.clone(),
            registry,
            planner,
            now,
        }
    }

    /// The registry of the servers `graph` is planned on: the whole grid when it is small,
    /// else its [`crate::shortlist`].
    fn shortlisted(
        &self,
        state: &State,
        graph: &v1::TaskGraph,
        client: &str,
        request: &v1::ScheduleRequest,
        now: f64,
    ) -> Registry {
        let placed = placed_since_sample(&state.planner, &state.registry);
        let asked = Asked {
            graph,
            client,
            avoid: &request.avoid,
            placed_since_sample: &placed,
            turn: state.scheduled,
            now,
        };
        match self.config.shortlist.choose(&state.registry, &asked) {
            Some(indices) => state.registry.subset(&indices),
            None => state.registry.clone(),
        }
    }

    /// Runs [`plan`] on a blocking thread, counted in [`Metaserver::planning_now`].
    async fn plan_off_lock(&self, input: PlanInput) -> Result<Plan, MetaserverError> {
        self.planning.fetch_add(1, Ordering::Relaxed);
        let planned = tokio::task::spawn_blocking(move || plan(input)).await;
        self.planning.fetch_sub(1, Ordering::Relaxed);
        planned.map_err(|e| MetaserverError::Planning(e.to_string()))?
    }
}

/// The processors of the placements still counted on each server that were made after its
/// latest load sample (or that it has none of): what the sample cannot show yet.
fn placed_since_sample<'a>(planner: &'a Planner, registry: &Registry) -> HashMap<&'a str, u32> {
    let mut placed: HashMap<&str, u32> = HashMap::new();
    for p in planner.active() {
        let sampled = registry.get(&p.server).and_then(|s| s.load_sampled_at);
        if sampled.is_none_or(|at| p.placed_at > at) {
            *placed.entry(&*p.server).or_default() += p.processors;
        }
    }
    placed
}

/// Checks the graph against the IDL and places it: pure, on owned copies.
fn plan(input: PlanInput) -> Result<Plan, MetaserverError> {
    let PlanInput {
        graph,
        registry,
        now,
        ..
    } = &input;
    let mut scheduler = ninf_scheduling::by_name(&input.scheduler, input.seed)
        .map_err(|e| MetaserverError::BadRequest(e.to_string()))?;
    let locate = |address: &str| {
        let index = registry.index_of(address)?;
        registry
            .is_up(&registry.servers()[index], *now)
            .then_some(index)
    };
    let tasks = graph::check_graph(
        graph,
        input.max_tasks,
        |f| registry.describe(f, *now),
        (locate, |index| registry.same_host(index, *now)),
    )?;
    let schedule = input
        .planner
        .plan_avoiding(
            registry,
            &tasks,
            &input.client_links,
            &input.avoid,
            scheduler.as_mut(),
            *now,
        )
        .map_err(GraphRejection::from)?;
    let deadlines = registry.deadlines(*now, input.planner.walltime_margin);
    within_walltime(&tasks, &schedule, registry, &deadlines, &input)?;
    let template = input.planner.template_of(&tasks, *now);
    // The deadline rule is the model's, which the scheduler placed by: a graph like graphs
    // expect to run a task past its server's batch job keeps the model's times.
    let expected = input
        .planner
        .expect(template, &schedule)
        .filter(|e| first_past_deadline(&schedule.servers, &e.timings, &deadlines).is_none());
    let (timings, predicted_makespan) = match &expected {
        Some(e) => (&e.timings, e.makespan),
        None => (&schedule.timings, schedule.makespan),
    };
    let servers = registry.servers();
    let address = |server: usize| servers.get(server).map(|s| s.address.clone());
    let placements = schedule
        .servers
        .iter()
        .zip(timings)
        .enumerate()
        .map(|(task, (&server, timing))| PlacementRecord {
            task: task as u32,
            label: tasks.tasks[task].label.clone(),
            function: tasks.tasks[task].function.clone(),
            server_address: address(server).unwrap_or_default(),
            processors: tasks.tasks[task].processors,
            predicted_start: timing.start,
            predicted_finish: timing.finish,
        })
        .collect();
    let turns = schedule
        .servers
        .iter()
        .zip(&tasks.tasks)
        .map(|(&server, task)| {
            servers.get(server).map_or_else(Default::default, |entry| {
                crate::turns::turns_of(
                    task,
                    registry.flops_per_processor(entry),
                    entry.info.processors,
                    input.planner.turns_min_seconds,
                )
            })
        })
        .collect();
    let staging = schedule
        .staging
        .iter()
        .filter_map(|s| {
            Some(v1::StagedInput {
                task: s.task as u32,
                parameter: s.parameter,
                server: address(s.via)?,
                bytes: s.bytes,
            })
        })
        .collect();
    Ok(Plan {
        tasks,
        schedule,
        predicted_makespan,
        template,
        placements,
        turns,
        staging,
        registry: input.registry,
    })
}

/// Refuses a schedule with a task predicted to end past its server's batch job (less the
/// margin): the predictor made every such placement the worst, so no server can take it now.
fn within_walltime(
    tasks: &TaskGraph,
    schedule: &Schedule,
    registry: &Registry,
    deadlines: &[Option<f64>],
    input: &PlanInput,
) -> Result<(), MetaserverError> {
    let margin = input.planner.walltime_margin;
    let Some((task, server)) = first_past_deadline(&schedule.servers, &schedule.timings, deadlines)
    else {
        return Ok(());
    };
    let name = registry
        .servers()
        .get(server)
        .map_or("?", |s| s.address.as_str());
    Err(MetaserverError::NoCapacity(format!(
        "no server has the time left for task {}: the best placement, on {name}, \
         would end past its batch job's end less {margin} s",
        tasks.tasks[task].label
    )))
}

/// The first task (and its server) `timings` have end past its server's `deadlines`
/// ([`Registry::deadlines`]: the batch job's end less the margin).
fn first_past_deadline(
    servers: &[usize],
    timings: &[Timing],
    deadlines: &[Option<f64>],
) -> Option<(usize, usize)> {
    servers
        .iter()
        .zip(timings)
        .enumerate()
        .find(|(_, (server, timing))| {
            matches!(deadlines.get(**server), Some(Some(deadline)) if timing.finish > *deadline)
        })
        .map(|(task, (&server, _))| (task, server))
}

fn reply(
    graph_id: u64,
    scheduler: String,
    predictor: &str,
    plan: Plan,
    inter_server_ratio: f64,
) -> v1::ScheduleReply {
    v1::ScheduleReply {
        graph_id,
        scheduler,
        predictor: predictor.to_string(),
        placements: plan
            .placements
            .into_iter()
            .zip(plan.turns)
            .map(|(p, turns)| v1::TaskPlacement {
                task: p.task,
                server: p.server_address,
                predicted_start: p.predicted_start,
                predicted_finish: p.predicted_finish,
                turns: turns.turns,
                alone_seconds: turns.alone_seconds,
            })
            .collect(),
        predicted_makespan: plan.predicted_makespan,
        inter_server_ratio,
        staging: plan.staging,
    }
}
