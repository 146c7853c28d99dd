//! What the dashboard's pages show, as JSON: pure functions from the metaserver's state and
//! records, so tests check them without a browser.

use std::collections::{BTreeMap, BTreeSet};

use ninf_proto::v1;
use ninf_scheduling::Link;
use serde::Serialize;

use crate::db::{EdgeRecord, PlacementRow};
use crate::registry::{Registry, ServerEntry};

/// One server, for the servers page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerView {
    pub address: String,
    pub up: bool,
    pub mflops: f64,
    pub processors: u32,
    pub cpus: u32,
    /// Running plus queued jobs at the last sample, and the recent samples, oldest first.
    pub load: f64,
    pub load_history: Vec<f64>,
    pub running_jobs: u32,
    pub queued_jobs: u32,
    pub stored_bytes: u64,
    pub seconds_since_heartbeat: f64,
    /// Routine names by module.
    pub modules: BTreeMap<String, Vec<String>>,
    /// Modules the server could not start: (executable, why).
    pub failed_modules: Vec<(String, String)>,
    /// Its batch job and allocation queue, and the seconds its job has left; empty and 0
    /// when it runs outside a batch system.
    pub batch_job: String,
    pub allocation: String,
    pub walltime_left: f64,
    pub draining: bool,
}

/// The servers page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overview {
    pub scheduler: String,
    pub predictor: String,
    pub servers: Vec<ServerView>,
    pub running_graphs: usize,
    pub last_event: u64,
    /// The allocation queues (docs/slurm.md).
    pub queues: Vec<QueueView>,
}

/// One allocation queue, for the servers page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueView {
    pub name: String,
    /// `active` or `paused`.
    pub state: String,
    pub pending: usize,
    pub running: usize,
    /// Its servers up now.
    pub servers: u32,
    pub failures: u32,
    pub last_error: String,
}

pub fn queue_view(queue: &ninf_proto::v1::AllocQueue) -> QueueView {
    let count = |state: &str| queue.jobs.iter().filter(|j| j.state == state).count();
    QueueView {
        name: queue
            .spec
            .as_ref()
            .map(|s| s.name.clone())
            .unwrap_or_default(),
        state: queue.state.clone(),
        pending: count("pending"),
        running: count("running"),
        servers: queue.jobs.iter().map(|j| j.servers).sum(),
        failures: queue.failures,
        last_error: queue.last_error.clone(),
    }
}

pub fn server_view(registry: &Registry, server: &ServerEntry, now: f64) -> ServerView {
    let mut modules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, interface) in server.routines.iter() {
        modules
            .entry(interface.module.clone())
            .or_default()
            .push(name.clone());
    }
    let latest = server.latest.unwrap_or_default();
    ServerView {
        address: server.address.clone(),
        up: registry.is_up(server, now),
        mflops: server.info.mflops,
        processors: server.info.processors,
        cpus: server.info.cpus,
        load: server.load.back().copied().unwrap_or(0.0),
        load_history: server.load.iter().copied().collect(),
        running_jobs: latest.running_jobs,
        queued_jobs: latest.queued_jobs,
        stored_bytes: latest.stored_bytes,
        seconds_since_heartbeat: (now - server.last_heartbeat).max(0.0),
        modules,
        failed_modules: server
            .failed_modules
            .iter()
            .map(|f| (f.executable.clone(), f.reason.clone()))
            .collect(),
        batch_job: server.info.batch_job.clone(),
        allocation: server.info.allocation.clone(),
        walltime_left: if server.info.walltime_end > 0.0 {
            (server.info.walltime_end - now).max(0.0)
        } else {
            0.0
        },
        draining: server.draining,
    }
}

/// The network page: the latest throughput and latency of every measured path, as a matrix
/// over every location (servers first, in registration order, then client sites).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkMatrix {
    pub locations: Vec<String>,
    /// `[from][to]` in MB/s; `None` where nobody has measured.
    pub throughput_mb_s: Vec<Vec<Option<f64>>>,
    pub latency_ms: Vec<Vec<Option<f64>>>,
}

pub fn network_matrix(servers: &[String], links: &[(String, String, Link)]) -> NetworkMatrix {
    let mut locations: Vec<String> = servers.to_vec();
    let others: BTreeSet<&String> = links
        .iter()
        .flat_map(|(from, to, _)| [from, to])
        .filter(|l| !servers.contains(l))
        .collect();
    locations.extend(others.into_iter().cloned());
    let n = locations.len();
    let index = |l: &str| locations.iter().position(|x| x == l);
    let mut throughput = vec![vec![None; n]; n];
    let mut latency = vec![vec![None; n]; n];
    for (from, to, link) in links {
        if let (Some(i), Some(j)) = (index(from), index(to)) {
            throughput[i][j] = Some(link.throughput / 1e6);
            latency[i][j] = Some(link.latency * 1e3);
        }
    }
    NetworkMatrix {
        locations,
        throughput_mb_s: throughput,
        latency_ms: latency,
    }
}

/// A graph in the list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphView {
    pub id: u64,
    pub label: String,
    pub scheduler: String,
    pub tasks: u32,
    pub edges: u32,
    pub state: String,
    pub predicted_makespan: f64,
    /// `None` while it runs.
    pub actual_makespan: Option<f64>,
    pub inter_server_ratio: f64,
    pub error: String,
}

pub fn graph_view(g: &v1::GraphSummary) -> GraphView {
    GraphView {
        id: g.graph_id,
        label: g.label.clone(),
        scheduler: g.scheduler.clone(),
        tasks: g.tasks,
        edges: g.edges,
        state: g.state.clone(),
        predicted_makespan: g.predicted_makespan,
        actual_makespan: (g.state != "running").then_some(g.actual_makespan),
        inter_server_ratio: g.inter_server_ratio,
        error: g.error.clone(),
    }
}

/// An edge on the Gantt chart: `crosses` when producer and consumer ran on different
/// servers (its bytes went over the network).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GanttEdge {
    pub from_task: u32,
    pub to_task: u32,
    pub bytes: u64,
    pub crosses: bool,
}

/// A graph's page: its summary, one row per server used (in order of first use), one bar per
/// task with predicted and actual times, and its edges.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gantt {
    pub graph: GraphView,
    pub rows: Vec<String>,
    pub tasks: Vec<PlacementRow>,
    pub edges: Vec<GanttEdge>,
}

pub fn gantt(graph: GraphView, tasks: Vec<PlacementRow>, edges: &[EdgeRecord]) -> Gantt {
    let mut rows: Vec<String> = Vec::new();
    for t in &tasks {
        if !rows.contains(&t.server_address) {
            rows.push(t.server_address.clone());
        }
    }
    let server = |task: u32| {
        tasks
            .iter()
            .find(|t| t.task == task)
            .map(|t| t.server_address.as_str())
    };
    let edges = edges
        .iter()
        .map(|e| GanttEdge {
            from_task: e.from_task,
            to_task: e.to_task,
            bytes: e.bytes,
            crosses: server(e.from_task) != server(e.to_task),
        })
        .collect();
    Gantt {
        graph,
        rows,
        tasks,
        edges,
    }
}

/// One server's gang time table, for the gang page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GangView {
    pub server: String,
    /// Why the table could not be read (the server is down or refused).
    pub error: Option<String>,
    pub processors: u32,
    pub rows: u32,
    pub max_rows: u32,
    pub quantum: f64,
    pub policy: String,
    /// `cells[row][column]`: the job holding that processor in that row's slot.
    pub cells: Vec<Vec<Option<u64>>>,
    pub current_row: Option<u32>,
    pub running_now: Vec<u64>,
    pub jobs: Vec<GangJobView>,
    pub queued: u32,
    pub expected_wait_seconds: f64,
    pub admitted: u64,
    pub finished: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GangJobView {
    pub job: u64,
    pub function: String,
    pub processors: u32,
    /// `runnable`, `idle`, `stopped` or `queued`.
    pub state: String,
    pub row: Option<u32>,
    pub columns: Vec<u32>,
}

pub fn gang_view(server: &str, status: &v1::GangStatus) -> GangView {
    let columns = status.processors as usize;
    let mut cells = vec![vec![None; columns]; status.rows as usize];
    for job in status.jobs.iter().filter(|j| j.admitted) {
        for &column in &job.columns {
            if let Some(cell) = cells
                .get_mut(job.row as usize)
                .and_then(|r| r.get_mut(column as usize))
            {
                *cell = Some(job.job);
            }
        }
    }
    GangView {
        server: server.to_string(),
        error: None,
        processors: status.processors,
        rows: status.rows,
        max_rows: status.max_rows,
        quantum: status.quantum,
        policy: status.policy.clone(),
        cells,
        current_row: status.slot_active.then_some(status.current_row),
        running_now: status.running_now.clone(),
        jobs: status
            .jobs
            .iter()
            .map(|j| GangJobView {
                job: j.job,
                function: j.function.clone(),
                processors: j.processors,
                state: j.state.clone(),
                row: j.admitted.then_some(j.row),
                columns: j.columns.clone(),
            })
            .collect(),
        queued: status.queued,
        expected_wait_seconds: status.expected_wait_seconds,
        admitted: status.admitted,
        finished: status.finished,
    }
}

/// A server whose table could not be read.
pub fn gang_unreachable(server: &str, error: String) -> GangView {
    GangView {
        server: server.to_string(),
        error: Some(error),
        processors: 0,
        rows: 0,
        max_rows: 0,
        quantum: 0.0,
        policy: String::new(),
        cells: Vec::new(),
        current_row: None,
        running_now: Vec::new(),
        jobs: Vec::new(),
        queued: 0,
        expected_wait_seconds: 0.0,
        admitted: 0,
        finished: 0,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn placement(task: u32, server: &str) -> PlacementRow {
        PlacementRow {
            task,
            server_address: server.into(),
            predicted_start: f64::from(task),
            predicted_finish: f64::from(task) + 1.0,
            actual_start: Some(f64::from(task)),
            actual_finish: None,
            label: format!("mmul#{task}"),
            function: "mmul".into(),
            processors: 1,
            compute_seconds: None,
            stopped_seconds: None,
            fetch_seconds: None,
            queue_seconds: None,
        }
    }

    #[test]
    fn gantt_rows_follow_first_use_and_edges_that_cross_servers_are_marked() {
        let summary = v1::GraphSummary {
            graph_id: 9,
            state: "running".into(),
            ..Default::default()
        };
        let tasks = vec![placement(0, "b"), placement(1, "a"), placement(2, "b")];
        let edges = [
            EdgeRecord {
                from_task: 0,
                to_task: 2,
                bytes: 8,
            },
            EdgeRecord {
                from_task: 1,
                to_task: 2,
                bytes: 16,
            },
        ];
        let g = gantt(graph_view(&summary), tasks, &edges);
        assert_eq!(g.rows, vec!["b", "a"]);
        assert_eq!(
            g.graph.actual_makespan, None,
            "a running graph has no actual yet"
        );
        let crosses: Vec<(u32, bool)> = g.edges.iter().map(|e| (e.from_task, e.crosses)).collect();
        assert_eq!(crosses, vec![(0, false), (1, true)]);
    }

    #[test]
    fn the_network_matrix_puts_servers_first_and_leaves_unmeasured_paths_empty() {
        let link = |mb: f64| Link {
            throughput: mb * 1e6,
            latency: 0.002,
        };
        let links = vec![
            ("a".to_string(), "b".to_string(), link(40.0)),
            ("client:p".to_string(), "a".to_string(), link(10.0)),
        ];
        let m = network_matrix(&["a".to_string(), "b".to_string()], &links);
        assert_eq!(m.locations, vec!["a", "b", "client:p"]);
        assert_eq!(m.throughput_mb_s[0][1], Some(40.0));
        assert_eq!(m.throughput_mb_s[2][0], Some(10.0));
        assert_eq!(m.throughput_mb_s[1][0], None);
        assert_eq!(m.latency_ms[0][1], Some(2.0));
    }

    #[test]
    fn the_gang_table_places_each_job_on_its_row_and_columns() {
        let status = v1::GangStatus {
            processors: 4,
            rows: 2,
            slot_active: true,
            current_row: 1,
            running_now: vec![7],
            jobs: vec![
                v1::GangJob {
                    job: 5,
                    processors: 2,
                    admitted: true,
                    row: 0,
                    columns: vec![0, 1],
                    state: "runnable".into(),
                    ..Default::default()
                },
                v1::GangJob {
                    job: 7,
                    processors: 4,
                    admitted: true,
                    row: 1,
                    columns: vec![0, 1, 2, 3],
                    state: "runnable".into(),
                    ..Default::default()
                },
                v1::GangJob {
                    job: 8,
                    processors: 1,
                    state: "queued".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let v = gang_view("s", &status);
        assert_eq!(v.cells[0], vec![Some(5), Some(5), None, None]);
        assert_eq!(v.cells[1], vec![Some(7); 4]);
        assert_eq!(v.current_row, Some(1));
        assert_eq!(v.jobs[2].row, None, "a queued job has no row");
    }
}
