//! Servers whose batch jobs end: every scheduler that places by predictions keeps a task off
//! a server where it is predicted to end past the server's deadline, through the predictor
//! alone.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::predictor::PAST_DEADLINE_SECONDS;
use ninf_scheduling::{
    GridView, Link, LoadPredictor, Predictor, SCHEDULERS, ServerView, Task, TaskGraph, by_name,
};

/// The schedulers that place without predictions.
const BLIND: [&str; 2] = ["round-robin", "random"];

fn server(name: &str, flops: f64) -> ServerView {
    ServerView {
        name: name.into(),
        flops_per_processor: flops,
        processors: 1,
        functions: BTreeSet::from(["work".to_string()]),
        up: true,
    }
}

/// Two 10-Gflop tasks in a chain: 1 s each on the fast server, 5 s each on the slow one.
fn chain() -> TaskGraph {
    let mut graph = TaskGraph::default();
    for i in 0..2 {
        graph.add_task(Task {
            label: format!("work#{i}"),
            function: "work".into(),
            flops: 10e9,
            client_in_bytes: 1000,
            client_out_bytes: 1000,
            processors: 1,
        });
    }
    graph.add_edge(0, 1, 1000);
    graph
}

fn predictor(grid: &GridView, fast_deadline: Option<f64>) -> LoadPredictor {
    let link = Link {
        throughput: 1e9,
        latency: 0.0,
    };
    let mut p = LoadPredictor::new(grid, vec![0.0, 0.0], HashMap::new(), link);
    if let Some(deadline) = fast_deadline {
        p.set_deadline(0, deadline);
    }
    p
}

#[test]
fn a_task_predicted_to_end_past_its_servers_deadline_costs_the_penalty() {
    let grid = GridView {
        servers: vec![server("fast", 10e9), server("slow", 2e9)],
    };
    let p = predictor(&grid, Some(1.5));
    let task = &chain().tasks[0];
    assert!(
        (p.compute_time(0, task, 0.0) - 1.0).abs() < 1e-9,
        "ends at 1 s: in time"
    );
    let late = p.compute_time(0, task, 1.0);
    assert!(
        late > PAST_DEADLINE_SECONDS,
        "ends at 2 s, past 1.5 s: {late}"
    );
    assert!(
        (p.compute_time(1, task, 1.0) - 5.0).abs() < 1e-9,
        "no deadline on the slow one"
    );
}

#[test]
fn every_scheduler_places_around_a_server_that_is_about_to_end() {
    let grid = GridView {
        servers: vec![server("fast", 10e9), server("slow", 2e9)],
    };
    let graph = chain();
    // The baselines choose blind, by design; their schedules past a deadline show it in the
    // makespan, and the metaserver refuses them (docs/slurm.md, "Walltime").
    for name in SCHEDULERS {
        if BLIND.contains(&name) {
            let mut scheduler = by_name(name, 1).unwrap();
            let gone = scheduler
                .schedule(&graph, &grid, &mut predictor(&grid, Some(0.5)))
                .unwrap();
            if gone.servers.contains(&0) {
                assert!(
                    gone.makespan >= PAST_DEADLINE_SECONDS,
                    "{name}: {}",
                    gone.makespan
                );
            }
            continue;
        }
        // Without a deadline the fast server takes both tasks.
        let mut scheduler = by_name(name, 1).unwrap();
        let free = scheduler
            .schedule(&graph, &grid, &mut predictor(&grid, None))
            .unwrap();
        // With the fast server ending at 1.5 s only the first task fits there.
        let mut scheduler = by_name(name, 1).unwrap();
        let ending = scheduler
            .schedule(&graph, &grid, &mut predictor(&grid, Some(1.5)))
            .unwrap();
        for (task, (&server, timing)) in ending.servers.iter().zip(&ending.timings).enumerate() {
            if server == 0 {
                assert!(
                    timing.finish <= 1.5,
                    "{name}: task {task} ends at {} on the ending server",
                    timing.finish
                );
            }
        }
        assert!(
            ending.makespan < PAST_DEADLINE_SECONDS,
            "{name}: {}",
            ending.makespan
        );
        assert!(ending.makespan >= free.makespan - 1e-9, "{name}");
        // Ending at 0.5 s, it can take nothing.
        let mut scheduler = by_name(name, 1).unwrap();
        let gone = scheduler
            .schedule(&graph, &grid, &mut predictor(&grid, Some(0.5)))
            .unwrap();
        assert_eq!(gone.servers, vec![1, 1], "{name}");
    }
}
