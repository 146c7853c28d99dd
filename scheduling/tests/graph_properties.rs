//! Property tests of graph validation over random input: any edge list, including cycles,
//! self-loops and dangling ends, gets `Ok` or a named error, never a panic; and `Ok` means
//! a topological order exists that respects every edge.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use ninf_scheduling::graph::{GraphError, Task, TaskGraph};
use proptest::prelude::*;

fn graph(tasks: usize, edges: Vec<(usize, usize)>, flops: f64, processors: u32) -> TaskGraph {
    let mut g = TaskGraph::default();
    for i in 0..tasks {
        g.add_task(Task {
            label: format!("t{i}"),
            function: "mmul".into(),
            flops,
            client_in_bytes: 0,
            client_out_bytes: 0,
            processors,
        });
    }
    for (from, to) in edges {
        g.add_edge(from, to, 8);
    }
    g
}

proptest! {
    #[test]
    fn validation_names_the_problem_or_orders_every_edge(
        tasks in 0usize..12,
        edges in prop::collection::vec((0usize..14, 0usize..14), 0..30),
        flops in prop_oneof![Just(1e6), Just(-1.0), Just(f64::NAN), Just(0.0)],
        processors in 0u32..3,
    ) {
        let g = graph(tasks, edges.clone(), flops, processors);
        match g.validate() {
            Ok(()) => {
                let order = g.topological_order().unwrap();
                prop_assert_eq!(order.len(), tasks);
                let position: Vec<usize> = {
                    let mut p = vec![0; tasks];
                    for (i, &t) in order.iter().enumerate() { p[t] = i; }
                    p
                };
                for (from, to) in edges {
                    prop_assert!(position[from] < position[to]);
                }
            }
            Err(GraphError::UnknownTask { task, tasks: n, .. }) => {
                prop_assert!(task >= n);
            }
            Err(GraphError::SelfLoop { .. }) => {
                prop_assert!(edges.iter().any(|(a, b)| a == b));
            }
            Err(GraphError::BadFlops { .. }) => prop_assert!(flops.is_nan() || flops < 0.0),
            Err(GraphError::NoProcessors { .. }) => prop_assert_eq!(processors, 0),
            Err(GraphError::Cycle(labels)) => prop_assert!(labels.len() >= 2),
            Err(other) => prop_assert!(!other.to_string().is_empty()),
        }
    }
}
