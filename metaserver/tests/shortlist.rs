//! The shortlist a graph on a large grid is planned on: the servers that should run its
//! routines soonest, those near the client, those holding its data, and a rotation that
//! spreads graphs over identical servers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;

use ninf_metaserver::Registry;
use ninf_metaserver::planner::Planner;
use ninf_metaserver::shortlist::{Asked, Shortlist};
use ninf_proto::v1;
use ninf_scheduling::{Link, PredictorKind, Task, TaskGraph};

fn routines() -> Vec<v1::FunctionInterface> {
    common::linpack()
}

fn address(i: usize) -> String {
    format!("10.0.{}.{}:7000", i / 250, i % 250)
}

/// `n` one-processor servers of 1 GFLOPS offering LINPACK's routines, registered at 0 s;
/// those in `fast` have 5 GFLOPS.
fn grid(n: usize, fast: &[usize]) -> Registry {
    let routines = routines();
    let mut registry = Registry::new(4, 5.0, 1000.0);
    for i in 0..n {
        let info = v1::ServerInfo {
            mflops: if fast.contains(&i) { 5000.0 } else { 1000.0 },
            processors: 1,
            ..Default::default()
        };
        registry.register(i as i64 + 1, &address(i), info, &routines, 0.0);
    }
    registry
}

fn graph_of(function: &str) -> v1::TaskGraph {
    v1::TaskGraph {
        tasks: vec![v1::GraphTask {
            label: format!("{function}#0"),
            function: function.into(),
            scalars: HashMap::from([("n".to_string(), 100)]),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn choose(registry: &Registry, graph: &v1::TaskGraph, turn: u64) -> Option<Vec<usize>> {
    let placed = HashMap::new();
    let asked = Asked {
        graph,
        client: "client:p",
        avoid: &[],
        placed_since_sample: &placed,
        turn,
        now: 1.0,
    };
    small().choose(registry, &asked)
}

fn small() -> Shortlist {
    Shortlist {
        per_routine: 4,
        near_client: 2,
        whole_grid_up_to: 50,
    }
}

fn busy() -> v1::LoadSample {
    v1::LoadSample {
        processors: 1,
        busy_rows: 5,
        ..Default::default()
    }
}

#[test]
fn a_small_grid_is_planned_whole() {
    let registry = grid(50, &[]);
    assert_eq!(choose(&registry, &graph_of("mmul"), 0), None);
}

#[test]
fn the_fastest_servers_for_the_load_they_carry_are_kept() {
    let mut registry = grid(300, &[17, 140, 250, 299]);
    // 250 is fast but carries five jobs: a sixth of 5 GFLOPS is slower than an idle 1.
    registry.heartbeat(&address(250), Some(&busy()), 1.0);
    let chosen = choose(&registry, &graph_of("mmul"), 0).unwrap();
    assert_eq!(chosen.len(), 4);
    for fast in [17, 140, 299] {
        assert!(chosen.contains(&fast), "{fast} missing from {chosen:?}");
    }
    assert!(!chosen.contains(&250), "{chosen:?}");
}

#[test]
fn placements_made_since_a_sample_count_as_load() {
    let registry = grid(300, &[17, 140]);
    let placed = HashMap::from([(address(17).leak() as &str, 4u32)]);
    let graph = graph_of("mmul");
    let asked = Asked {
        graph: &graph,
        client: "client:p",
        avoid: &[],
        placed_since_sample: &placed,
        turn: 0,
        now: 1.0,
    };
    let chosen = Shortlist {
        per_routine: 1,
        ..small()
    }
    .choose(&registry, &asked)
    .unwrap();
    assert_eq!(chosen, [140]);
}

#[test]
fn a_burst_of_graphs_spreads_over_identical_servers() {
    let registry = grid(300, &[]);
    let graph = graph_of("mmul");
    let first = choose(&registry, &graph, 0).unwrap();
    let second = choose(&registry, &graph, 1).unwrap();
    assert_eq!(first, [0, 1, 2, 3]);
    assert_eq!(second, [4, 5, 6, 7]);
}

#[test]
fn servers_holding_the_graphs_data_and_near_the_client_are_kept() {
    let registry = grid(300, &[]);
    let mut graph = graph_of("dgesl");
    graph.tasks[0].data.push(v1::GraphData {
        parameter: 0,
        id: "a".into(),
        servers: vec![address(123)],
        reads: true,
        ..Default::default()
    });
    let near = Link {
        throughput: 1e9,
        latency: 1e-4,
    };
    let far = Link {
        throughput: 1e6,
        latency: 1e-2,
    };
    let mut registry = registry;
    registry.add_link("client:p", &address(200), near);
    registry.add_link("client:p", &address(201), far);
    registry.add_link("client:other", &address(250), near);
    registry.add_link("client:p", &address(202), near);
    let placed = HashMap::new();
    let asked = Asked {
        graph: &graph,
        client: "client:p",
        avoid: &[],
        placed_since_sample: &placed,
        turn: 0,
        now: 1.0,
    };
    let chosen = small().choose(&registry, &asked).unwrap();
    assert_eq!(chosen, [0, 1, 2, 3, 123, 200, 202]);
}

#[test]
fn down_draining_and_avoided_servers_come_last() {
    let mut registry = grid(300, &[]);
    // All but servers 0-5 heartbeat at 10 s: 0-5 are down (timeout 5 s); 6 drains.
    for i in 6..300 {
        registry.heartbeat(&address(i), None, 10.0);
    }
    registry.leave(&address(6), true);
    let graph = graph_of("mmul");
    let avoid = [address(7), address(8)];
    let placed = HashMap::new();
    let asked = Asked {
        graph: &graph,
        client: "client:p",
        avoid: &avoid,
        placed_since_sample: &placed,
        turn: 0,
        now: 10.0,
    };
    assert_eq!(small().choose(&registry, &asked).unwrap(), [9, 10, 11, 12]);
    // A routine only down servers serve still finds them, to fail as on the whole grid.
    let routines = routines();
    let only: Vec<_> = routines
        .iter()
        .filter(|r| r.name == "mmul")
        .cloned()
        .collect();
    let mut registry = grid(300, &[]);
    for i in 0..300 {
        registry.register(
            i as i64 + 1,
            &address(i),
            v1::ServerInfo::default(),
            &only,
            10.0,
        );
    }
    registry.register(1, &address(0), v1::ServerInfo::default(), &routines, 0.0);
    let graph = graph_of("dgefa");
    let asked = Asked {
        graph: &graph,
        now: 10.0,
        ..asked
    };
    assert_eq!(small().choose(&registry, &asked).unwrap(), [0]);
}

#[test]
fn a_graph_planned_on_its_shortlist_goes_to_the_fastest_server() {
    let registry = grid(1000, &[777]);
    let graph = graph_of("mmul");
    let chosen = choose(&registry, &graph, 5).unwrap();
    let shortlisted = registry.subset(&chosen);
    assert_eq!(shortlisted.servers().len(), 4);
    let mut tasks = TaskGraph::default();
    tasks.add_task(Task {
        label: "mmul#0".into(),
        function: "mmul".into(),
        flops: 2e9,
        client_in_bytes: 1000,
        client_out_bytes: 1000,
        processors: 1,
    });
    let link = Link {
        throughput: 1e9,
        latency: 1e-4,
    };
    let planner = Planner::new(PredictorKind::LatestSample, link);
    let mut scheduler = ninf_scheduling::by_name("simple", 0).unwrap();
    let schedule = planner
        .plan(&shortlisted, &tasks, &[], scheduler.as_mut(), 1.0)
        .unwrap();
    let server = &shortlisted.servers()[schedule.servers[0]];
    assert_eq!(server.address, address(777));
}
