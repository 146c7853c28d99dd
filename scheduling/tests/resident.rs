//! Data kept on the grid: a task that reads a data handle's copy costs its transfer from the
//! copy, or nothing where the copy is, through the same input timing every scheduler's
//! predictions go through; so every scheduler that weighs transfers places it next to its data.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::{
    GridView, Link, LoadPredictor, ResidentInput, SCHEDULERS, ServerView, Task, TaskGraph, by_name,
};

/// The schedulers that place without weighing transfers: the baselines, and the seed's,
/// which by design count computation alone when they choose.
const TRANSFER_BLIND: [&str; 4] = ["round-robin", "random", "seed-simple", "seed-flow"];

fn server(name: &str) -> ServerView {
    ServerView {
        name: name.into(),
        flops_per_processor: 1e9,
        processors: 1,
        functions: BTreeSet::from(["solve".to_string()]),
        up: true,
    }
}

/// One 1-Gflop task (1 s anywhere) reading 1 GB kept on `holder` (10 s over the link).
fn graph(holder: usize) -> TaskGraph {
    let mut graph = TaskGraph::default();
    graph.add_task(Task {
        label: "solve#0".into(),
        function: "solve".into(),
        flops: 1e9,
        client_in_bytes: 100,
        client_out_bytes: 100,
        processors: 1,
    });
    graph.resident_inputs = vec![vec![ResidentInput {
        bytes: 1_000_000_000,
        copies: vec![holder],
    }]];
    graph
}

fn predictor(grid: &GridView) -> LoadPredictor {
    let link = Link {
        throughput: 1e8,
        latency: 0.0,
    };
    LoadPredictor::new(grid, vec![0.0; grid.servers.len()], HashMap::new(), link)
}

#[test]
fn every_scheduler_that_weighs_transfers_places_a_task_next_to_its_data() {
    let grid = GridView {
        servers: vec![server("a"), server("b"), server("c")],
    };
    for holder in [1, 2] {
        let graph = graph(holder);
        for name in SCHEDULERS {
            let mut scheduler = by_name(name, 7).unwrap();
            let schedule = scheduler
                .schedule(&graph, &grid, &mut predictor(&grid))
                .unwrap();
            let placed = schedule.servers[0];
            if TRANSFER_BLIND.contains(&name) {
                // Wherever they put it, its timing counts the read from the copy.
                let expected = if placed == holder { 1.0 } else { 11.0 };
                assert!(
                    (schedule.timings[0].finish - expected).abs() < 0.01,
                    "{name} on {placed}: {:?}",
                    schedule.timings[0]
                );
                continue;
            }
            assert_eq!(placed, holder, "{name}");
            assert!(
                schedule.timings[0].finish < 1.01,
                "{name}: read in place, {:?}",
                schedule.timings[0]
            );
        }
    }
}

#[test]
fn a_task_reads_the_copy_where_it_runs_or_else_the_first() {
    let input = ResidentInput {
        bytes: 10,
        copies: vec![2, 0],
    };
    assert_eq!(input.source_for(0), Some(0));
    assert_eq!(input.source_for(2), Some(2));
    assert_eq!(input.source_for(1), Some(2));
    let none = ResidentInput {
        bytes: 10,
        copies: Vec::new(),
    };
    assert_eq!(none.source_for(1), None);
}

#[test]
fn every_scheduler_runs_a_task_that_writes_sticky_data_where_that_data_is() {
    let grid = GridView {
        servers: vec![server("a"), server("b"), server("c")],
    };
    for pin in [0, 2] {
        // Its input is on server 1, so a scheduler free to choose would go there.
        let mut graph = graph(1);
        graph.pinned = vec![Some(pin)];
        for name in SCHEDULERS {
            let mut scheduler = by_name(name, 7).unwrap();
            let schedule = scheduler
                .schedule(&graph, &grid, &mut predictor(&grid))
                .unwrap();
            assert_eq!(schedule.servers[0], pin, "{name}");
        }
    }
}

#[test]
fn a_task_pinned_to_a_server_that_is_down_is_refused_naming_it() {
    let mut grid = GridView {
        servers: vec![server("a"), server("b")],
    };
    grid.servers[1].up = false;
    let mut graph = graph(0);
    graph.pinned = vec![Some(1)];
    let error = by_name("flow", 7)
        .unwrap()
        .schedule(&graph, &grid, &mut predictor(&grid))
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "task `solve#0` must run on b, where the sticky data it writes is, but that server is down"
    );
}
