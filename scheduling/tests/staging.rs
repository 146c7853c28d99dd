//! Staged uploads on graphs small enough to work out by hand: the order and path of each
//! client array, and the timing the model gives them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::schedule::{evaluate, evaluate_staged};
use ninf_scheduling::staging::{MIN_STAGED_BYTES, plan};
use ninf_scheduling::{
    ClientInput, GridView, Link, LoadPredictor, Location, ServerView, Staged, Task, TaskGraph,
};

const MB: u64 = 1_000_000;

fn server(name: &str) -> ServerView {
    ServerView {
        name: name.into(),
        flops_per_processor: 1e9,
        processors: 1,
        functions: BTreeSet::from(["f".to_string()]),
        up: true,
    }
}

/// Tasks of 1 Gflop (1 s on either server), each with `inputs` client arrays of `bytes`.
fn tasks_with_inputs(tasks: usize, inputs: usize, bytes: u64) -> TaskGraph {
    let task = Task {
        label: "t".into(),
        function: "f".into(),
        flops: 1e9,
        client_in_bytes: inputs as u64 * bytes,
        client_out_bytes: 0,
        processors: 1,
    };
    TaskGraph {
        tasks: vec![task; tasks],
        edges: Vec::new(),
        client_inputs: vec![
            (0..inputs as u32)
                .map(|parameter| ClientInput { parameter, bytes })
                .collect();
            tasks
        ],
        resident_inputs: Vec::new(),
        pinned: Vec::new(),
        pinned_with: Vec::new(),
    }
}

/// The client reaches s0 and s1 at 1 MB/s each; s0 and s1 reach each other at `between`.
fn predictor(grid: &GridView, between: f64) -> LoadPredictor {
    let link = |throughput| Link {
        throughput,
        latency: 0.0,
    };
    let (c, s0, s1) = (Location::Client, Location::Server(0), Location::Server(1));
    let links = HashMap::from([
        ((c, s0), link(1e6)),
        ((c, s1), link(1e6)),
        ((s0, s1), link(between)),
        ((s1, s0), link(between)),
    ]);
    LoadPredictor::new(grid, vec![0.0; 2], links, link(1e6))
}

#[test]
fn two_arrays_of_one_task_take_both_client_paths_when_the_servers_are_close() {
    // One task on s0 reading two 1 MB arrays. With calls carrying their data both share
    // the client's path to s0: in at 2 s, done at 3 s. Staged, one goes to s0 and the other
    // through s1 (1 s) and on to s0 at 10 MB/s (0.1 s): the call is issued at 1 s, the
    // relayed array is in at 1.1 s, done at 2.1 s.
    let grid = GridView {
        servers: vec![server("s0"), server("s1")],
    };
    let graph = tasks_with_inputs(1, 2, MB);
    let mut p = predictor(&grid, 10e6);
    let order = [0];
    let staging = plan(&graph, &grid, &order, &[0], &p);
    assert_eq!(
        staging,
        vec![
            Staged {
                task: 0,
                parameter: 0,
                bytes: MB,
                via: 0
            },
            Staged {
                task: 0,
                parameter: 1,
                bytes: MB,
                via: 1
            },
        ]
    );
    let predecessors = graph.predecessors();
    let plain = evaluate(&graph, &order, &predecessors, &[0], &mut p);
    assert!((plain - 3.0).abs() < 1e-9, "{plain}");
    let staged = evaluate_staged(&graph, &order, &predecessors, &[0], &staging, &mut p);
    assert!((staged - 2.1).abs() < 1e-9, "{staged}");
    // When the servers are far apart the relay costs more than it saves: both go to s0.
    let far = predictor(&grid, 0.1e6);
    let staging = plan(&graph, &grid, &order, &[0], &far);
    assert!(staging.iter().all(|s| s.via == 0), "{staging:?}");
}

#[test]
fn uploads_to_one_server_go_one_at_a_time_in_the_order_tasks_can_start() {
    // Two tasks on s0 (one processor), one 1 MB array each; the servers are far apart
    // (0.01 MB/s), so nothing is relayed. The first array is in at 1 s and its task ends at
    // 2 s; the second is in at 2 s and its task ends at 3 s.
    let grid = GridView {
        servers: vec![server("s0"), server("s1")],
    };
    let graph = tasks_with_inputs(2, 1, MB);
    let mut p = predictor(&grid, 0.01e6);
    let order = [0, 1];
    let staging = plan(&graph, &grid, &order, &[0, 0], &p);
    assert_eq!(
        staging.iter().map(|s| (s.task, s.via)).collect::<Vec<_>>(),
        vec![(0, 0), (1, 0)]
    );
    let predecessors = graph.predecessors();
    let staged = evaluate_staged(&graph, &order, &predecessors, &[0, 0], &staging, &mut p);
    assert!((staged - 3.0).abs() < 1e-9, "{staged}");
    // A task behind another in the graph has its arrays uploaded after those of tasks that
    // can start at once, whatever their ids.
    let mut chain = tasks_with_inputs(3, 1, MB);
    chain.add_edge(0, 1, 8);
    let staging = plan(&chain, &grid, &[0, 2, 1], &[0, 0, 0], &p);
    assert_eq!(
        staging.iter().map(|s| s.task).collect::<Vec<_>>(),
        vec![0, 2, 1]
    );
}

#[test]
fn small_arrays_and_tasks_without_known_inputs_are_not_staged() {
    let grid = GridView {
        servers: vec![server("s0"), server("s1")],
    };
    let p = predictor(&grid, 10e6);
    let small = tasks_with_inputs(2, 2, MIN_STAGED_BYTES - 1);
    assert!(plan(&small, &grid, &[0, 1], &[0, 1], &p).is_empty());
    let mut unknown = tasks_with_inputs(2, 2, MB);
    unknown.client_inputs.clear();
    assert!(plan(&unknown, &grid, &[0, 1], &[0, 1], &p).is_empty());
}
