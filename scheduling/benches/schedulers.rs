//! Scheduling cost: a synthetic layered graph of 10,000 tasks placed over 1,000 servers
//! (targets, issue 4: <= 10 us per task for `simple`, <= 50 us per task for `flow`), and
//! 10,000 independent calls over 2 servers, the shape of a transaction of tiny tasks, once
//! as the model alone sees them and once as a live metaserver does: each call costs a learned
//! overhead and the servers run gang slots, so every call overlaps all those before it.
//! Run with `cargo bench -p ninf-scheduling --bench schedulers`; prints one JSON line per
//! scheduler. Figures go to docs/performance.md.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use ninf_scheduling::calibration::Overhead;
use ninf_scheduling::random::SplitMix;
use ninf_scheduling::{GridView, Link, LoadPredictor, ServerView, Task, TaskGraph, by_name};

fn splitmix(random: &mut SplitMix) -> u64 {
    random.next_u64()
}

/// 100 layers of 100 tasks; each task after the first layer reads two tasks of the layer
/// before. Four routines; every server serves all of them.
fn workload() -> (TaskGraph, GridView) {
    let mut rng = SplitMix::new(42);
    let functions = ["dgefa", "dgesl", "mmul", "ddot"];
    let mut graph = TaskGraph::default();
    let (layers, width) = (100, 100);
    for layer in 0..layers {
        for i in 0..width {
            let f = functions[(splitmix(&mut rng) % 4) as usize];
            let id = graph.add_task(Task {
                label: format!("{f}#{layer}.{i}"),
                function: f.into(),
                flops: 1e6 + (splitmix(&mut rng) % 1_000_000_000) as f64,
                client_in_bytes: if layer == 0 { 80_000 } else { 0 },
                client_out_bytes: if layer == layers - 1 { 8_000 } else { 0 },
                processors: 1,
            });
            if layer > 0 {
                for _ in 0..2 {
                    let from = (layer - 1) * width + (splitmix(&mut rng) % width as u64) as usize;
                    graph.add_edge(from, id, 80_000);
                }
            }
        }
    }
    let servers = (0..1000)
        .map(|i| ServerView {
            name: format!("server{i}"),
            flops_per_processor: 1e9 * (1.0 + (i % 7) as f64 / 7.0),
            processors: 1 + (i % 4) as u32,
            functions: functions
                .iter()
                .map(|f| f.to_string())
                .collect::<BTreeSet<_>>(),
            up: true,
        })
        .collect();
    (graph, GridView { servers })
}

/// 10,000 calls of one routine with no edges between them (a transaction of `noop`s), on
/// two servers.
fn independent_calls() -> (TaskGraph, GridView) {
    let mut graph = TaskGraph::default();
    for i in 0..10_000 {
        graph.add_task(Task {
            label: format!("noop#{i}"),
            function: "noop".into(),
            flops: 1.0,
            client_in_bytes: 40,
            client_out_bytes: 0,
            processors: 1,
        });
    }
    let servers = (0..2)
        .map(|i| ServerView {
            name: format!("server{i}"),
            flops_per_processor: 1e9,
            processors: 1,
            functions: ["noop".to_string()].into_iter().collect(),
            up: true,
        })
        .collect();
    (graph, GridView { servers })
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    run(
        "schedule_10000_tasks_1000_servers",
        workload(),
        &["simple", "flow", "round-robin", "random"],
    );
    run(
        "schedule_10000_independent_calls_2_servers",
        independent_calls(),
        &["simple", "flow", "seed-flow"],
    );
    run_live(
        "schedule_10000_independent_calls_2_live_servers",
        independent_calls(),
        &["simple", "flow"],
    );
}

fn run(bench: &str, workload: (TaskGraph, GridView), schedulers: &[&str]) {
    time(bench, workload, schedulers, |_| {});
}

/// As on a live grid under the peer benchmark's tiny tasks: 0.1 ms learned per call, as the
/// metaserver's log shows for `noop`, and 10 ms gang slots.
fn run_live(bench: &str, workload: (TaskGraph, GridView), schedulers: &[&str]) {
    time(bench, workload, schedulers, |predictor| {
        for server in 0..2 {
            let overhead = Overhead {
                fixed: 5e-5,
                shared: 5e-5,
            };
            predictor.calibrate(server, HashMap::new(), overhead);
            predictor.set_quantum(server, 0.01);
        }
    });
}

fn time(
    bench: &str,
    (graph, grid): (TaskGraph, GridView),
    schedulers: &[&str],
    prepare: impl Fn(&mut LoadPredictor),
) {
    for &name in schedulers {
        let mut predictor = LoadPredictor::new(
            &grid,
            vec![0.5; grid.servers.len()],
            HashMap::new(),
            Link {
                throughput: 1e7,
                latency: 0.01,
            },
        );
        prepare(&mut predictor);
        let mut scheduler = by_name(name, 1).unwrap();
        let start = Instant::now();
        let schedule = scheduler.schedule(&graph, &grid, &mut predictor).unwrap();
        let elapsed = start.elapsed().as_secs_f64();
        println!(
            "{{\"bench\":\"{bench}\",\"scheduler\":\"{name}\",\"us_per_task\":{:.2},\"total_ms\":{:.1},\"makespan_s\":{:.2},\"inter_server_ratio\":{:.3}}}",
            elapsed * 1e6 / graph.tasks.len() as f64,
            elapsed * 1e3,
            schedule.makespan,
            schedule.inter_server_ratio(&graph)
        );
    }
}
