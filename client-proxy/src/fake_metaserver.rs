//! An in-memory metaserver for tests of the proxy's whole run of a graph: it lists the fake
//! cluster's servers as up, places each graph's tasks where the test says (or round robin),
//! keeps every report it is sent and the records of data handles, and can be unreachable for
//! its next few questions, as a restarting metaserver is, or refuse a graph outright.

use std::sync::{Arc, Mutex};

use ninf_proto::v1;
use tonic::Status;

use crate::cluster::Cluster;
use crate::fake::FakeCluster;
use crate::metaserver::{DataRecordsReply, DataRecordsRequest, Metaserver};

/// What [`crate::Proxy::with_parts`] takes, over `cluster` and a fake metaserver that
/// lists its servers, with that metaserver for the test to steer and inspect.
pub(crate) type Parts = (Arc<dyn Cluster>, Arc<dyn Metaserver>);

pub(crate) fn fake_parts(cluster: &Arc<FakeCluster>) -> (Parts, Arc<FakeMetaserver>) {
    let metaserver = FakeMetaserver::over(cluster.clone());
    ((cluster.clone(), metaserver.clone()), metaserver)
}

#[derive(Default)]
struct State {
    /// Its next this many questions fail as an unreachable metaserver's do.
    unreachable: u32,
    /// Its next this many placements fail so, whatever else it answers.
    placements_unreachable: u32,
    /// The refusal every placement gets, if any.
    refusal: Option<Status>,
    /// Each task's server, by task; round robin over the servers when empty.
    placement: Vec<String>,
    /// Each task's turns (`TaskPlacement.turns`), by task; none when missing.
    turns: Vec<u32>,
    /// Each task's `TaskPlacement.alone_seconds`, by task; 1 s when missing.
    alone: Vec<f64>,
    /// Placement requests, answered or not.
    schedules: u32,
    next_graph: u64,
    reports: Vec<v1::ActualsReport>,
    /// Data handles by id, as the records keep them.
    handles: std::collections::BTreeMap<String, v1::DataInfo>,
    next_handle: u64,
    /// Repairs asked for, in order (answered with no copy made).
    repairs: Vec<v1::RepairDataRequest>,
}

pub(crate) struct FakeMetaserver {
    cluster: Arc<FakeCluster>,
    state: Mutex<State>,
}

impl FakeMetaserver {
    pub(crate) fn over(cluster: Arc<FakeCluster>) -> Arc<FakeMetaserver> {
        Arc::new(FakeMetaserver {
            cluster,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        ninf_proto::sync::lock(&self.state)
    }

    /// Places task i on `servers[i]`.
    pub(crate) fn place_on(&self, servers: &[&str]) {
        self.state().placement = servers.iter().map(|s| s.to_string()).collect();
    }

    /// Gives task i `turns[i]` turns on its server.
    pub(crate) fn give_turns(&self, turns: &[u32]) {
        self.state().turns = turns.to_vec();
    }

    /// Tells the proxy task i runs `alone[i]` seconds alone on its server.
    pub(crate) fn give_alone_seconds(&self, alone: &[f64]) {
        self.state().alone = alone.to_vec();
    }

    /// Fails its next `questions` questions as unreachable.
    pub(crate) fn unreachable_for(&self, questions: u32) {
        self.state().unreachable = questions;
    }

    /// Fails its next `placements` placement requests as unreachable.
    pub(crate) fn placements_unreachable_for(&self, placements: u32) {
        self.state().placements_unreachable = placements;
    }

    /// Refuses every graph with `status`.
    pub(crate) fn refuse(&self, status: Status) {
        self.state().refusal = Some(status);
    }

    pub(crate) fn schedules(&self) -> u32 {
        self.state().schedules
    }

    pub(crate) fn reports(&self) -> Vec<v1::ActualsReport> {
        self.state().reports.clone()
    }

    /// The handle `id` as the records list it.
    pub(crate) fn handle(&self, id: &str) -> Option<v1::DataInfo> {
        self.state().handles.get(id).cloned()
    }

    /// The repairs asked for so far (`DataRecords.Repair`), in order.
    pub(crate) fn repairs(&self) -> Vec<v1::RepairDataRequest> {
        self.state().repairs.clone()
    }

    /// A new handle placed on the first servers not avoided, as many as its replicas.
    fn create(&self, request: v1::CreateDataRequest) -> Result<DataRecordsReply, Status> {
        let spec = request.spec.unwrap_or_default();
        let wanted = spec.replicas.max(1) as usize;
        let servers: Vec<String> = self
            .cluster
            .servers()
            .into_iter()
            .map(|(address, _)| address)
            .filter(|address| !request.avoid.contains(address))
            .take(wanted)
            .collect();
        if servers.len() < wanted {
            return Err(Status::failed_precondition(
                "too few servers for the copies",
            ));
        }
        let mut state = self.state();
        state.next_handle += 1;
        let id = format!("handle-{}", state.next_handle);
        let info = v1::DataInfo {
            id: id.clone(),
            owner: request.owner,
            spec: Some(spec),
            ..Default::default()
        };
        state.handles.insert(id, info.clone());
        Ok(DataRecordsReply::Created(v1::CreateDataReply {
            info: Some(info),
            server: servers[0].clone(),
            servers,
            evicted: Vec::new(),
            earlier_tries: Vec::new(),
        }))
    }

    /// Records a copy (with its further copies); `replace` makes them the only ones, the
    /// others stale.
    fn add_copy(&self, request: v1::AddCopyRequest) -> Result<DataRecordsReply, Status> {
        let mut state = self.state();
        let Some(info) = state.handles.get_mut(&request.id) else {
            return Err(Status::not_found(format!("no handle {}", request.id)));
        };
        let copy = request.copy.unwrap_or_default();
        let mut stale = match request.replace {
            true => std::mem::take(&mut info.copies),
            false => Vec::new(),
        };
        for copy in std::iter::once(copy).chain(request.further_copies) {
            stale.retain(|c| *c != copy);
            if !info.copies.contains(&copy) {
                info.copies.push(copy);
            }
        }
        Ok(DataRecordsReply::CopyAdded(v1::AddCopyReply {
            info: Some(info.clone()),
            stale,
            replicate_to: Vec::new(),
        }))
    }

    /// Counts one question; an error while it is unreachable.
    fn asked(&self) -> Result<(), Status> {
        let mut state = self.state();
        if state.unreachable > 0 {
            state.unreachable -= 1;
            return Err(Status::unavailable("the metaserver is restarting"));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Metaserver for FakeMetaserver {
    async fn describe(&self, function: &str) -> Result<v1::FunctionInterface, Status> {
        self.asked()?;
        match function {
            "inc" => Ok(v1::FunctionInterface {
                name: "inc".into(),
                ..Default::default()
            }),
            other => Err(Status::not_found(format!("no server offers `{other}`"))),
        }
    }

    async fn status(&self, _seen: u64) -> Result<v1::GridStatus, Status> {
        self.asked()?;
        let servers = self
            .cluster
            .servers()
            .into_iter()
            .map(|(address, mflops)| v1::ServerStatus {
                site: self.cluster.site_of(&address),
                address,
                up: true,
                mflops,
                processors: 1,
                functions: vec!["inc".into()],
                ..Default::default()
            })
            .collect();
        Ok(v1::GridStatus {
            servers,
            ..Default::default()
        })
    }

    async fn schedule(&self, request: v1::ScheduleRequest) -> Result<v1::ScheduleReply, Status> {
        {
            let mut state = self.state();
            state.schedules += 1;
            if state.placements_unreachable > 0 {
                state.placements_unreachable -= 1;
                return Err(Status::unavailable("the metaserver is restarting"));
            }
        }
        self.asked()?;
        let mut state = self.state();
        if let Some(refusal) = &state.refusal {
            return Err(refusal.clone());
        }
        let servers: Vec<String> = self.cluster.servers().into_iter().map(|(a, _)| a).collect();
        let tasks = request.graph.map_or(0, |g| g.tasks.len());
        let placements = (0..tasks)
            .map(|task| v1::TaskPlacement {
                task: task as u32,
                server: state
                    .placement
                    .get(task)
                    .cloned()
                    .unwrap_or_else(|| servers[task % servers.len()].clone()),
                predicted_start: task as f64,
                predicted_finish: task as f64 + 1.0,
                turns: state.turns.get(task).copied().unwrap_or(0),
                alone_seconds: state.alone.get(task).copied().unwrap_or(1.0),
            })
            .collect();
        state.next_graph += 1;
        Ok(v1::ScheduleReply {
            graph_id: state.next_graph,
            scheduler: "fake".into(),
            placements,
            predicted_makespan: tasks as f64,
            ..Default::default()
        })
    }

    async fn report_actuals(&self, report: v1::ActualsReport) -> Result<(), Status> {
        self.asked()?;
        self.state().reports.push(report);
        Ok(())
    }

    async fn data(&self, request: DataRecordsRequest) -> Result<DataRecordsReply, Status> {
        self.asked()?;
        let missing = |id: &str| Status::not_found(format!("no handle {id}"));
        match request {
            DataRecordsRequest::Create(request) => self.create(request),
            DataRecordsRequest::AddCopy(request) => self.add_copy(request),
            DataRecordsRequest::Lookup(request) => {
                let info = self.state().handles.get(&request.id).cloned();
                info.map(DataRecordsReply::Info)
                    .ok_or_else(|| missing(&request.id))
            }
            DataRecordsRequest::Forget(request) => {
                let info = self.state().handles.remove(&request.id);
                info.map(DataRecordsReply::Info)
                    .ok_or_else(|| missing(&request.id))
            }
            DataRecordsRequest::Repair(request) => {
                let info = self.state().handles.get(&request.id).cloned();
                self.state().repairs.push(request.clone());
                let info = info.ok_or_else(|| missing(&request.id))?;
                Ok(DataRecordsReply::Repaired(v1::RepairDataReply {
                    info: Some(info),
                    copies_made: 0,
                }))
            }
            DataRecordsRequest::List(_) | DataRecordsRequest::Renew(_) => Err(
                Status::unimplemented("the fake lists and renews no handles"),
            ),
        }
    }
}
