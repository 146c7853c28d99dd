//! HEFT and our `search` scheduler on hand-worked graphs and against brute force over every
//! placement of small graphs (up to 8 tasks on 3 servers).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::random_dag::{Platform, layered};
use ninf_scheduling::search::exhaustive;
use ninf_scheduling::{
    ClientInput, Edge, GridView, Link, LoadPredictor, ServerView, Task, TaskGraph, by_name,
};

fn server(name: &str, flops: f64) -> ServerView {
    ServerView {
        name: name.into(),
        flops_per_processor: flops,
        processors: 1,
        functions: BTreeSet::from(["f".to_string()]),
        up: true,
    }
}

fn task(label: &str, gflops: f64) -> Task {
    Task {
        label: label.into(),
        function: "f".into(),
        flops: gflops * 1e9,
        client_in_bytes: 0,
        client_out_bytes: 0,
        processors: 1,
    }
}

fn edge(from: usize, to: usize, bytes: u64) -> Edge {
    Edge { from, to, bytes }
}

fn predictor(grid: &GridView, throughput: f64) -> LoadPredictor {
    LoadPredictor::new(
        grid,
        vec![0.0; grid.servers.len()],
        HashMap::new(),
        Link {
            throughput,
            latency: 0.0,
        },
    )
}

fn schedule(name: &str, graph: &TaskGraph, grid: &GridView, throughput: f64) -> (Vec<usize>, f64) {
    let mut p = predictor(grid, throughput);
    let s = by_name(name, 1)
        .unwrap()
        .schedule(graph, grid, &mut p)
        .unwrap();
    (s.servers, s.makespan)
}

fn optimum(graph: &TaskGraph, grid: &GridView, throughput: f64) -> (Vec<usize>, f64) {
    let mut p = predictor(grid, throughput);
    exhaustive(graph, grid, &mut p, 100_000).unwrap().unwrap()
}

#[test]
fn heft_ranks_then_inserts_and_keeps_a_fork_on_the_fast_server() {
    // s0 2 Gflop/s, s1 1 Gflop/s; a (2 Gflop) feeds b and c (2 Gflop each) with 100 MB each
    // over 100 MB/s links (1 s). Mean costs: 1.5 s per task, 1 s per edge, so rank(b) =
    // rank(c) = 1.5 and rank(a) = 1.5 + 1 + 1.5 = 4: order a, b, c.
    // a: s0 ends at 1, s1 at 2 -> s0. b: s0 from 1 to 2; s1 from 1 + 1 to 4 -> s0.
    // c: s0 after b, 2 to 3; s1 2 to 4 -> s0. Timed by the common model, c shares s0 with b
    // from 1 (half speed) and still ends at 3; on s1 it could not end before 4.
    let grid = GridView {
        servers: vec![server("s0", 2e9), server("s1", 1e9)],
    };
    let graph = TaskGraph {
        tasks: vec![task("a", 2.0), task("b", 2.0), task("c", 2.0)],
        edges: vec![edge(0, 1, 100_000_000), edge(0, 2, 100_000_000)],
        client_inputs: Vec::new(),
        resident_inputs: Vec::new(),
        pinned: Vec::new(),
        pinned_with: Vec::new(),
    };
    let (servers, makespan) = schedule("heft", &graph, &grid, 1e8);
    assert_eq!(servers, vec![0, 0, 0]);
    assert!((makespan - 3.0).abs() < 1e-9, "{makespan}");
    assert_eq!(optimum(&graph, &grid, 1e8), (vec![0, 0, 0], makespan));
    assert_eq!(
        schedule("search", &graph, &grid, 1e8),
        (vec![0, 0, 0], makespan)
    );
}

#[test]
fn a_fork_join_with_cheap_edges_is_spread_and_an_expensive_chain_is_kept_together() {
    // Three equal servers. a -> {b, c, d} -> e, 1 Gflop each, 1 kB edges: the optimum runs b,
    // c and d on three servers at once (makespan 3 s against 5 s on one).
    let grid = GridView {
        servers: vec![server("s0", 1e9), server("s1", 1e9), server("s2", 1e9)],
    };
    let fork_join = TaskGraph {
        tasks: (0..5).map(|i| task(&format!("t{i}"), 1.0)).collect(),
        edges: vec![
            edge(0, 1, 1_000),
            edge(0, 2, 1_000),
            edge(0, 3, 1_000),
            edge(1, 4, 1_000),
            edge(2, 4, 1_000),
            edge(3, 4, 1_000),
        ],
        client_inputs: Vec::new(),
        resident_inputs: Vec::new(),
        pinned: Vec::new(),
        pinned_with: Vec::new(),
    };
    let (best_servers, best) = optimum(&fork_join, &grid, 1e8);
    assert!((best - 3.0).abs() < 1e-3, "{best}");
    let middle: BTreeSet<usize> = best_servers[1..4].iter().copied().collect();
    assert_eq!(middle.len(), 3);
    for name in ["heft", "search"] {
        let (servers, makespan) = schedule(name, &fork_join, &grid, 1e8);
        assert!(
            (makespan - best).abs() < 1e-9,
            "{name}: {makespan} against {best}"
        );
        let middle: BTreeSet<usize> = servers[1..4].iter().copied().collect();
        assert_eq!(middle.len(), 3, "{name} spread the middle tasks");
    }
    // A chain of three on s0 (2 Gflop/s), s1 and s2 (1 Gflop/s) with 1 GB edges over 10 MB/s:
    // any split costs 100 s, so everything stays on s0 (3 s).
    let grid = GridView {
        servers: vec![server("s0", 2e9), server("s1", 1e9), server("s2", 1e9)],
    };
    let chain = TaskGraph {
        tasks: (0..3).map(|i| task(&format!("t{i}"), 2.0)).collect(),
        edges: vec![edge(0, 1, 1_000_000_000), edge(1, 2, 1_000_000_000)],
        client_inputs: Vec::new(),
        resident_inputs: Vec::new(),
        pinned: Vec::new(),
        pinned_with: Vec::new(),
    };
    assert_eq!(optimum(&chain, &grid, 1e7), (vec![0, 0, 0], 3.0));
    for name in ["flow", "heft", "search"] {
        assert_eq!(
            schedule(name, &chain, &grid, 1e7),
            (vec![0, 0, 0], 3.0),
            "{name}"
        );
    }
}

/// Predicted makespan of scheduler `name` on a fresh predictor of `platform`.
fn makespan_on(name: &str, platform: &Platform, graph: &TaskGraph) -> f64 {
    let mut predictor = platform.predictor();
    by_name(name, 1)
        .unwrap()
        .schedule(graph, &platform.grid, &mut predictor)
        .unwrap()
        .makespan
}

#[test]
fn search_finds_the_brute_force_optimum_of_most_small_graphs() {
    // 60 random layered graphs of 5 to 8 tasks on random 3-server platforms, at
    // communication-to-computation ratios 0.1, 1 and 10; the optimum by trying all 3^n
    // placements. No scheduler may beat it (the model is the same); `search` starts from the
    // list schedulers' results, so it is never worse than any of them.
    let cases = 60;
    let mut optimal = std::collections::BTreeMap::new();
    let mut worst = std::collections::BTreeMap::new();
    for case in 0..cases {
        let platform = Platform::random(3, 100 + case);
        let graph = layered(
            5 + case as usize % 4,
            [0.1, 1.0, 10.0][case as usize % 3],
            &platform,
            200 + case,
        );
        let mut predictor = platform.predictor();
        let (_, best) = exhaustive(&graph, &platform.grid, &mut predictor, 10_000)
            .unwrap()
            .unwrap();
        let mut list_best = f64::INFINITY;
        for name in ["simple", "flow", "heft", "search"] {
            let m = makespan_on(name, &platform, &graph);
            assert!(
                m >= best * (1.0 - 1e-9),
                "{name} beat brute force on case {case}"
            );
            if name == "search" {
                assert!(
                    m <= list_best * (1.0 + 1e-9),
                    "search lost to a list scheduler on case {case}"
                );
            } else {
                list_best = list_best.min(m);
            }
            if m <= best * (1.0 + 1e-9) {
                *optimal.entry(name).or_insert(0) += 1;
            }
            let w = worst.entry(name).or_insert(1.0f64);
            *w = w.max(m / best);
        }
    }
    // Measured: search optimal in 54 of 60 (worst 1.33x the optimum); HEFT 17, FLOW 16,
    // SIMPLE 9 (worst 7.6-8.5x).
    assert!(optimal["search"] >= 53, "{optimal:?}");
    assert!(worst["search"] < 1.35, "{worst:?}");
    assert!(
        optimal["search"] > optimal["heft"] && optimal["heft"] >= optimal["simple"],
        "{optimal:?}"
    );
}

/// The metaserver paper's cascade (7 mmul, 8 matrices from the client) at n = 300 on the `paper`
/// testbed as run: A 2 × 103.9 MFLOPS, B 1 × 73.7 MFLOPS (the servers' start-up benchmarks),
/// client↔A 10, client↔B 7.5 and A↔B 40 Mbit/s (the profile's rates × its speedup of 5).
fn paper_cascade() -> (TaskGraph, GridView, LoadPredictor) {
    use ninf_scheduling::Location;
    let n = 300u64;
    let matrix = 8 * n * n;
    let mmul = |client_in_bytes, client_out_bytes| Task {
        label: "mmul".into(),
        function: "f".into(),
        flops: 2.0 * (n as f64).powi(3),
        client_in_bytes,
        client_out_bytes,
        processors: 1,
    };
    let mut tasks = vec![mmul(2 * matrix + 4, 0); 4];
    tasks.extend([mmul(4, 0), mmul(4, 0), mmul(4, matrix)]);
    let edges = [(0, 4), (1, 4), (2, 5), (3, 5), (4, 6), (5, 6)]
        .map(|(from, to)| edge(from, to, matrix))
        .to_vec();
    let mut a = server("a", 103.9e6);
    a.processors = 2;
    let grid = GridView {
        servers: vec![a, server("b", 73.7e6)],
    };
    let mbit = |rate: f64| Link {
        throughput: rate * 1e6 / 8.0,
        latency: 0.0,
    };
    let (client, a, b) = (Location::Client, Location::Server(0), Location::Server(1));
    let links = HashMap::from([
        ((client, a), mbit(10.0)),
        ((a, client), mbit(10.0)),
        ((client, b), mbit(7.5)),
        ((b, client), mbit(7.5)),
        ((a, b), mbit(40.0)),
        ((b, a), mbit(40.0)),
    ]);
    let predictor = LoadPredictor::new(&grid, vec![0.0, 0.0], links, mbit(10.0));
    // The first stage's two matrices are its parameters 0 and 1; the rest come from edges.
    let mut client_inputs = vec![
        vec![
            ClientInput {
                parameter: 0,
                bytes: matrix,
            },
            ClientInput {
                parameter: 1,
                bytes: matrix,
            },
        ];
        4
    ];
    client_inputs.extend([Vec::new(), Vec::new(), Vec::new()]);
    let graph = TaskGraph {
        tasks,
        edges,
        client_inputs,
        resident_inputs: Vec::new(),
        pinned: Vec::new(),
        pinned_with: Vec::new(),
    };
    (graph, grid, predictor)
}

#[test]
fn on_the_paper_cascade_no_placement_beats_flow_by_one_percent_but_staging_does_by_ten() {
    let (graph, grid, predictor) = paper_cascade();
    let run = |name: &str| {
        let mut p = predictor.clone();
        by_name(name, 1)
            .unwrap()
            .schedule(&graph, &grid, &mut p)
            .unwrap()
    };
    let mut p = predictor.clone();
    let (_, best) = exhaustive(&graph, &grid, &mut p, 1_000).unwrap().unwrap();
    let seed_flow = run("seed-flow");
    assert!(seed_flow.staging.is_empty());
    // The best of all 128 placements, each call carrying its own data as in the seed, is
    // under 1% faster than the seed's FLOW: placement alone cannot take 10% off this graph
    // on this profile (docs/experiments.md).
    assert!(
        best <= seed_flow.makespan && best > 0.99 * seed_flow.makespan,
        "{best} against {}",
        seed_flow.makespan
    );
    // Uploading the matrices one at a time per path, through both of the client's paths,
    // lets the first products start while the rest upload.
    let search = run("search");
    assert!(
        search.makespan < 0.9 * seed_flow.makespan,
        "search {} against seed-flow {}",
        search.makespan,
        seed_flow.makespan
    );
    assert_eq!(search.staging.len(), 8, "{:?}", search.staging);
    let relayed = search
        .staging
        .iter()
        .filter(|s| s.via != search.servers[s.task])
        .count();
    let vias: BTreeSet<usize> = search.staging.iter().map(|s| s.via).collect();
    assert_eq!(vias.len(), 2, "both client paths carry matrices");
    assert!(relayed > 0, "{:?} on {:?}", search.staging, search.servers);
    // Each stage-1 product is ordered: the pair feeding the same stage-2 product first.
    let first_tasks: Vec<usize> = search.staging.iter().map(|s| s.task).collect();
    assert!(
        first_tasks.windows(2).all(|w| w[0] <= w[1]),
        "{first_tasks:?}"
    );
    // FLOW's own placement, staged, gains too: staging is what gains, not placement.
    let staged_flow = run("staged-flow");
    assert!(staged_flow.makespan < seed_flow.makespan);
    assert!(search.makespan <= staged_flow.makespan + 1e-9);
    // HEFT plans each transfer on an average link and loses 20% here.
    assert!(run("heft").makespan > 1.2 * best);
}
