//! Fuzzes graph validation: a graph built from arbitrary bytes (task count, edges, flops,
//! processors) is either refused with a named error or has an order that respects every
//! edge; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ninf_scheduling::graph::{Task, TaskGraph};

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let tasks = usize::from(count % 32);
    let mut graph = TaskGraph::default();
    for i in 0..tasks {
        let byte = rest.get(i).copied().unwrap_or(1);
        graph.add_task(Task {
            label: format!("t{i}"),
            function: "f".into(),
            flops: match byte % 4 {
                0 => -1.0,
                1 => f64::NAN,
                _ => f64::from(byte),
            },
            client_in_bytes: 0,
            client_out_bytes: 0,
            processors: u32::from(byte % 3),
        });
    }
    for pair in rest.get(tasks..).unwrap_or(&[]).chunks_exact(2) {
        graph.add_edge(usize::from(pair[0] % 40), usize::from(pair[1] % 40), 8);
    }
    match graph.validate() {
        Ok(()) => {
            let order = graph
                .topological_order()
                .expect("a valid graph has an order");
            let mut position = vec![0; tasks];
            for (i, &t) in order.iter().enumerate() {
                position[t] = i;
            }
            for e in &graph.edges {
                assert!(position[e.from] < position[e.to]);
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
