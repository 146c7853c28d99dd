//! SIMPLE, FLOW and the baselines on hand-made graphs and grids, asserting the placements the
//! rules give (each expected value is worked out in the comment above it).

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::calibration::{Factor, Overhead};
use ninf_scheduling::{
    GraphError, GridView, Link, LoadPredictor, Location, Predictor, ServerView, Task, TaskGraph,
    by_name,
};

fn server(name: &str, flops: f64, processors: u32, functions: &[&str]) -> ServerView {
    ServerView {
        name: name.into(),
        flops_per_processor: flops,
        processors,
        functions: functions
            .iter()
            .map(|f| f.to_string())
            .collect::<BTreeSet<_>>(),
        up: true,
    }
}

fn task(label: &str, function: &str, flops: f64, client_in: u64, client_out: u64) -> Task {
    Task {
        label: label.into(),
        function: function.into(),
        flops,
        client_in_bytes: client_in,
        client_out_bytes: client_out,
        processors: 1,
    }
}

fn predictor(grid: &GridView, link: Link) -> LoadPredictor {
    LoadPredictor::new(grid, vec![0.0; grid.servers.len()], HashMap::new(), link)
}

const FAST_LINK: Link = Link {
    throughput: 1e8,
    latency: 0.0,
};

fn run(name: &str, graph: &TaskGraph, grid: &GridView, p: &mut dyn Predictor) -> Vec<usize> {
    by_name(name, 7)
        .unwrap()
        .schedule(graph, grid, p)
        .unwrap()
        .servers
}

#[test]
fn simple_reports_each_decision_so_tasks_do_not_pile_up() {
    // s0 runs 2.5 Gflop/s, s1 1 Gflop/s; three independent 2-Gflop tasks, no data.
    // t0: s0 0.8 s, s1 2 s -> s0. t1: s0 now shares with t0 -> 1.25 Gflop/s -> 1.6 s; s1 2 s
    // -> s0. t2: s0 shares three ways -> 2.4 s; s1 2 s -> s1.
    let grid = GridView {
        servers: vec![server("s0", 2.5e9, 1, &["f"]), server("s1", 1e9, 1, &["f"])],
    };
    let mut graph = TaskGraph::default();
    for i in 0..3 {
        graph.add_task(task(&format!("t{i}"), "f", 2e9, 0, 0));
    }
    let mut p = predictor(&grid, FAST_LINK);
    let schedule = by_name("simple", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.servers, vec![0, 0, 1]);
    assert!((schedule.timings[1].finish - 1.6).abs() < 1e-9);
    assert!(
        (schedule.makespan - 2.4).abs() > 0.3,
        "t2 went to s1: makespan 2 s, not 2.4 s"
    );
    assert!((schedule.makespan - 2.0).abs() < 1e-9);
}

#[test]
fn flow_keeps_a_path_on_a_server_that_serves_all_of_it() {
    // s1 is 4x faster but serves only `a`. SIMPLE puts a on s1 (0.25 s vs 1 s) and b on s0,
    // the only server of b. FLOW takes the path a -> b whole to s0, the only server of both.
    let grid = GridView {
        servers: vec![
            server("s0", 1e9, 1, &["a", "b"]),
            server("s1", 4e9, 1, &["a"]),
        ],
    };
    let mut graph = TaskGraph::default();
    let a = graph.add_task(task("a", "a", 1e9, 0, 0));
    let b = graph.add_task(task("b", "b", 1e9, 0, 8));
    graph.add_edge(a, b, 1 << 20);
    assert_eq!(
        run("simple", &graph, &grid, &mut predictor(&grid, FAST_LINK)),
        vec![1, 0]
    );
    let mut p = predictor(&grid, FAST_LINK);
    let schedule = by_name("flow", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.servers, vec![0, 0]);
    assert_eq!(schedule.inter_server_ratio(&graph), 0.0);
    assert_eq!(
        schedule.data,
        vec![Location::Server(0)],
        "data stays on its producer"
    );
}

/// The seed's Fig. 5: E = A B, F = C D, G = E F with n = 1000 (2n^3 flops, 8n^2-byte arrays).
fn cascade() -> TaskGraph {
    let n2 = 8_000_000u64;
    let mut graph = TaskGraph::default();
    let e = graph.add_task(task("mmul E", "mmul", 2e9, 2 * n2, 0));
    let f = graph.add_task(task("mmul F", "mmul", 2e9, 2 * n2, 0));
    let g = graph.add_task(task("mmul G", "mmul", 2e9, 0, n2));
    graph.add_edge(e, g, n2);
    graph.add_edge(f, g, n2);
    graph
}

#[test]
fn flow_places_the_heaviest_path_first_then_the_rest() {
    // s0 2 Gflop/s, s1 1.1 Gflop/s; every link 100 MB/s. Path weights: E 2, F 2, G 4 via E
    // (ties go to the smaller id), so the heaviest path is E -> G.
    // E->G on s0: E ready at 16 MB / 100 MB/s = 0.16 s, computes 1 s; G follows at 1.16 s and
    // ends at 2.16 s. On s1 E alone ends at 0.16 + 1.82 = 1.98 s -> s0.
    // F: on s0 it shares with E from 0.16 s -> 1 Gflop/s -> ends at 2.16 s; on s1 it ends at
    // 1.98 s -> s1. So E, G on s0 and F on s1: one of the two edges crosses servers.
    let grid = GridView {
        servers: vec![
            server("s0", 2e9, 1, &["mmul"]),
            server("s1", 1.1e9, 1, &["mmul"]),
        ],
    };
    let graph = cascade();
    let mut p = predictor(&grid, FAST_LINK);
    let schedule = by_name("flow", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.servers, vec![0, 1, 0]);
    assert_eq!(schedule.inter_server_ratio(&graph), 0.5);
    // Final timing respects both inputs of G: F arrives from s1 at 1.98 + 0.08 s.
    let g = schedule.timings[2];
    assert!(
        (g.start - (0.16 + 2e9 / 1.1e9 + 0.08)).abs() < 1e-9,
        "{g:?}"
    );
    assert!(g.start >= schedule.timings[0].finish && g.start >= schedule.timings[1].finish);
    // SIMPLE reaches the same placement here: E -> s0 (1.16 vs 1.98 s), F -> s1 (2.16 vs
    // 1.98 s), G -> s0 (ends 3.06 s) rather than s1 (ends 3.80 s).
    assert_eq!(
        run("simple", &graph, &grid, &mut predictor(&grid, FAST_LINK)),
        vec![0, 1, 0]
    );
}

/// Five dgefa -> dgesl pairs issued together (the seed's first workload), n = 1000.
fn pairs() -> TaskGraph {
    let mut graph = TaskGraph::default();
    let n = 1000u64;
    for i in 0..5 {
        let fa = graph.add_task(task(
            &format!("dgefa{i}"),
            "dgefa",
            2.0 / 3.0 * 1e9,
            8 * n * n,
            0,
        ));
        let sl = graph.add_task(task(&format!("dgesl{i}"), "dgesl", 2e6, 8 * n, 8 * n));
        graph.add_edge(fa, sl, 8 * n * n + 4 * n);
    }
    graph
}

#[test]
fn flow_never_splits_a_pair_and_uses_both_servers() {
    let grid = GridView {
        servers: vec![
            server("A", 2e9, 2, &["dgefa", "dgesl"]),
            server("B", 1e9, 1, &["dgefa", "dgesl"]),
        ],
    };
    let graph = pairs();
    let mut p = predictor(
        &grid,
        Link {
            throughput: 2e6,
            latency: 0.05,
        },
    );
    let schedule = by_name("flow", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.inter_server_ratio(&graph), 0.0);
    for pair in schedule.servers.chunks(2) {
        assert_eq!(pair[0], pair[1]);
    }
    let on_a = schedule.servers.iter().filter(|&&s| s == 0).count();
    assert!(
        on_a > 0 && on_a < 10,
        "both servers get pairs: {:?}",
        schedule.servers
    );
}

#[test]
fn a_down_server_gets_nothing_and_unserved_routines_are_refused() {
    let mut grid = GridView {
        servers: vec![server("s0", 9e9, 1, &["f"]), server("s1", 1e9, 1, &["f"])],
    };
    grid.servers[0].up = false;
    let mut graph = TaskGraph::default();
    graph.add_task(task("t", "f", 1e9, 0, 0));
    for name in ["simple", "flow", "round-robin", "random"] {
        assert_eq!(
            run(name, &graph, &grid, &mut predictor(&grid, FAST_LINK)),
            vec![1],
            "{name}"
        );
    }
    graph.add_task(task("u", "g", 1e9, 0, 0));
    let error = by_name("flow", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut predictor(&grid, FAST_LINK))
        .unwrap_err();
    assert_eq!(error.to_string(), "no server implements `g` (task `u`)");
}

#[test]
fn invalid_graphs_are_refused_with_the_reason() {
    let grid = GridView {
        servers: vec![server("s0", 1e9, 1, &["f"])],
    };
    let mut graph = TaskGraph::default();
    let a = graph.add_task(task("a", "f", 1.0, 0, 0));
    let b = graph.add_task(task("b", "f", 1.0, 0, 0));
    let c = graph.add_task(task("c", "f", 1.0, 0, 0));
    graph.add_edge(a, b, 1);
    graph.add_edge(b, c, 1);
    graph.add_edge(c, b, 1);
    let e = by_name("simple", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut predictor(&grid, FAST_LINK))
        .unwrap_err();
    assert_eq!(e.to_string(), "the graph has a cycle through b -> c -> b");

    let mut graph = TaskGraph::default();
    graph.add_task(task("a", "f", f64::NAN, 0, 0));
    assert!(matches!(graph.validate(), Err(GraphError::BadFlops { .. })));
    let mut graph = TaskGraph::default();
    let a = graph.add_task(task("a", "f", 1.0, 0, 0));
    graph.add_edge(a, 5, 1);
    assert_eq!(
        graph.validate().unwrap_err().to_string(),
        "edge 0 refers to task 5, but the graph has 1 tasks"
    );
    graph.edges[0].to = a;
    assert_eq!(
        graph.validate().unwrap_err().to_string(),
        "edge 0 goes from task `a` to itself"
    );
    let error = by_name("cpop", 0).err().unwrap();
    assert_eq!(
        error.to_string(),
        "unknown scheduler `cpop` (known: simple, flow, staged-flow, seed-simple, seed-flow, heft, peft, heft-lookahead, search, round-robin, random)"
    );
}

#[test]
fn baselines_are_deterministic_and_respect_capabilities() {
    let grid = GridView {
        servers: vec![
            server("s0", 1e9, 1, &["f"]),
            server("s1", 1e9, 1, &["g"]),
            server("s2", 1e9, 1, &["f"]),
        ],
    };
    let mut graph = TaskGraph::default();
    for i in 0..4 {
        graph.add_task(task(&format!("t{i}"), "f", 1e9, 0, 0));
    }
    assert_eq!(
        run(
            "round-robin",
            &graph,
            &grid,
            &mut predictor(&grid, FAST_LINK)
        ),
        vec![0, 2, 0, 2]
    );
    let first = run("random", &graph, &grid, &mut predictor(&grid, FAST_LINK));
    let again = run("random", &graph, &grid, &mut predictor(&grid, FAST_LINK));
    assert_eq!(first, again, "same seed, same placement");
    assert!(first.iter().all(|&s| s == 0 || s == 2));
}

/// A predictor that hides its speed bound, so SIMPLE evaluates every server.
struct Unbounded(LoadPredictor);

impl Predictor for Unbounded {
    fn speed(&self, server: usize, processors: u32, at: f64) -> f64 {
        self.0.speed(server, processors, at)
    }
    fn compute_time(&self, server: usize, task: &Task, at: f64) -> f64 {
        self.0.compute_time(server, task, at)
    }
    fn link(&self, from: Location, to: Location) -> Link {
        self.0.link(from, to)
    }
    fn transfer_time(&self, from: Location, to: Location, bytes: u64, at: f64) -> f64 {
        self.0.transfer_time(from, to, bytes, at)
    }
    fn place(&mut self, server: usize, processors: u32, start: f64, finish: f64) -> usize {
        self.0.place(server, processors, start, finish)
    }
    fn place_transfer(
        &mut self,
        from: Location,
        to: Location,
        start: f64,
        finish: f64,
    ) -> Option<usize> {
        self.0.place_transfer(from, to, start, finish)
    }
    fn withdraw(&mut self, placement: usize) {
        self.0.withdraw(placement)
    }
    fn fork(&self) -> Box<dyn Predictor> {
        Box::new(Unbounded(self.0.clone()))
    }
}

#[test]
fn simple_skipping_servers_that_cannot_win_changes_no_placement() {
    simple_pruned_and_unpruned_agree(false);
}

#[test]
fn simple_skipping_servers_changes_no_placement_when_overheads_make_fast_servers_lose() {
    simple_pruned_and_unpruned_agree(true);
}

/// SIMPLE with the predictor's bounds against SIMPLE evaluating every server, on 40 servers
/// and 300 tasks; `calibrated`: each server has learned factors and per-call overheads, so
/// that the fastest server is not always the best.
fn simple_pruned_and_unpruned_agree(calibrated: bool) {
    let mut state = 11u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let servers: Vec<ServerView> = (0..40)
        .map(|i| {
            let mut s = server(
                &format!("s{i}"),
                1e9 * (1 + next() % 5) as f64,
                1 + (next() % 3) as u32,
                &["f", "g"],
            );
            if i % 7 == 3 {
                s.functions.remove("g");
            }
            s
        })
        .collect();
    let grid = GridView { servers };
    let mut graph = TaskGraph::default();
    for i in 0..300 {
        let id = graph.add_task(Task {
            processors: 1 + (next() % 2) as u32,
            ..task(
                &format!("t{i}"),
                if next() % 3 == 0 { "g" } else { "f" },
                (next() % 5_000_000_000) as f64,
                next() % 100_000,
                0,
            )
        });
        if id > 10 {
            let from = (next() % id as u64) as usize;
            graph.add_edge(from, id, next() % 1_000_000);
        }
    }
    let loads: Vec<f64> = (0..40).map(|i| (i % 4) as f64 * 0.5).collect();
    let link = Link {
        throughput: 5e7,
        latency: 0.002,
    };
    let mut pruned = LoadPredictor::new(&grid, loads.clone(), HashMap::new(), link);
    let mut full = Unbounded(LoadPredictor::new(&grid, loads, HashMap::new(), link));
    if calibrated {
        for server in 0..grid.servers.len() {
            // Each routine's factor differs between small calls and large ones.
            let mut factor = || {
                let mut at = || 0.5 + (next() % 20) as f64 / 10.0;
                Factor::sized(&[(1e-3, at()), (1.0, at())])
            };
            let factors: HashMap<String, Factor> =
                [("f".to_string(), factor()), ("g".to_string(), factor())].into();
            let overhead = Overhead {
                fixed: (next() % 2_000) as f64 * 1e-3,
                shared: (next() % 500) as f64 * 1e-3,
            };
            pruned.calibrate(server, factors.clone(), overhead);
            full.0.calibrate(server, factors, overhead);
        }
    }
    let a = by_name("simple", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut pruned)
        .unwrap();
    let b = by_name("simple", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut full)
        .unwrap();
    assert_eq!(a, b);
}

/// The metaserver paper's five dgefa/dgesl pairs in call order (dgefa1, dgesl1, dgefa2, ...): dgefa
/// 2/3 n^3 flops, dgesl 2 n^2, the LU factors passed from one to the other.
fn seed_pairs(n: u64) -> TaskGraph {
    let mut graph = TaskGraph::default();
    for k in 0..5 {
        let factor = graph.add_task(task(
            &format!("dgefa{k}"),
            "dgefa",
            2.0 / 3.0 * (n * n * n) as f64,
            8 * n * n,
            0,
        ));
        let solve = graph.add_task(task(
            &format!("dgesl{k}"),
            "dgesl",
            2.0 * (n * n) as f64,
            8 * n,
            8 * n,
        ));
        graph.add_edge(factor, solve, 8 * n * n + 4 * n);
    }
    graph
}

#[test]
fn the_seeds_simple_places_by_speed_and_load_alone_and_splits_pairs() {
    // A: 2 processors of 1.6 Gflop/s; B: 1 of 1 Gflop/s. Every placement counts as a running
    // job for the rest of the schedule, so a 1-processor task gets 1.6 * min(1, 2/(L+1)) on
    // A and min(1, 1/(L+1)) on B:
    //   dgefa0: A 1.6 vs B 1 -> A (A's load 1)   dgesl0: A 1.6 -> A (2)
    //   dgefa1: A 1.07 vs 1 -> A (3)             dgesl1: A 0.8 vs 1 -> B (B's load 1)
    //   dgefa2: A 0.8 vs 0.5 -> A (4)            dgesl2: A 0.64 vs 0.5 -> A (5)
    //   dgefa3: A 0.53 vs 0.5 -> A (6)           dgesl3: A 0.46 vs 0.5 -> B (2)
    //   dgefa4: A 0.46 vs 0.33 -> A (7)          dgesl4: A 0.4 vs 0.33 -> A
    // Transfers never count, even over a slow link: pairs 1 and 3 are split.
    let grid = GridView {
        servers: vec![
            server("a", 1.6e9, 2, &["dgefa", "dgesl"]),
            server("b", 1e9, 1, &["dgefa", "dgesl"]),
        ],
    };
    let slow = Link {
        throughput: 1e5,
        latency: 0.05,
    };
    let graph = seed_pairs(300);
    let mut p = predictor(&grid, slow);
    let schedule = by_name("seed-simple", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.servers, vec![0, 0, 0, 1, 0, 0, 0, 1, 0, 0]);
    assert!((schedule.inter_server_ratio(&graph) - 0.4).abs() < 1e-12);
    // The load hints are gone; only the final, timed placements remain: at time 0 the
    // five dgefa inputs are moving, and A runs nothing yet.
    assert_eq!(p.speed(0, 1, 0.0), 1.6e9);
}

#[test]
fn the_seeds_flow_keeps_each_pair_together_and_spreads_pairs_by_load() {
    // Same grid. Paths are whole pairs, equally heavy, taken in order; each counts as one
    // job: pair0 A 1.6 -> A; pair1 A 1.6 (load 1 of 2) -> A; pair2 A 1.07 vs 1 -> A;
    // pair3 A 0.8 vs B 1 -> B; pair4 A 0.8 vs B 0.5 -> A. No pair is split.
    let grid = GridView {
        servers: vec![
            server("a", 1.6e9, 2, &["dgefa", "dgesl"]),
            server("b", 1e9, 1, &["dgefa", "dgesl"]),
        ],
    };
    let graph = seed_pairs(300);
    let mut p = predictor(&grid, FAST_LINK);
    let schedule = by_name("seed-flow", 0)
        .unwrap()
        .schedule(&graph, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.servers, vec![0, 0, 0, 0, 0, 0, 1, 1, 0, 0]);
    assert_eq!(schedule.inter_server_ratio(&graph), 0.0);
}

#[test]
fn a_task_is_issued_when_its_producers_finish_and_shared_paths_slow_its_inputs() {
    // One server of 1 Gflop/s, 1 MB/s to the client. p (1 Gflop, 1 MB in) then q (1 Gflop,
    // 1 MB in from the client, 1 MB from p on the same server). p: input 0-1 s, computes
    // 1-2 s. q is issued at 2 s (when p ends), its client input moves 2-3 s, it computes
    // 3-4 s. Two such chains side by side: both p inputs start at 0 and share the path, so
    // the second is predicted at 2 s (half the throughput) and its chain ends 1 s later.
    let grid = GridView {
        servers: vec![server("s", 1e9, 2, &["f"])],
    };
    let link = Link {
        throughput: 1e6,
        latency: 0.0,
    };
    let mut one = TaskGraph::default();
    let p0 = one.add_task(task("p", "f", 1e9, 1_000_000, 0));
    let q0 = one.add_task(task("q", "f", 1e9, 1_000_000, 0));
    one.add_edge(p0, q0, 1_000_000);
    let mut p = predictor(&grid, link);
    let schedule = by_name("flow", 0)
        .unwrap()
        .schedule(&one, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.timings[q0].start, 3.0);
    assert_eq!(schedule.makespan, 4.0);

    let mut two = one.clone();
    let p1 = two.add_task(task("p'", "f", 1e9, 1_000_000, 0));
    let q1 = two.add_task(task("q'", "f", 1e9, 1_000_000, 0));
    two.add_edge(p1, q1, 1_000_000);
    let mut p = predictor(&grid, link);
    let schedule = by_name("flow", 0)
        .unwrap()
        .schedule(&two, &grid, &mut p)
        .unwrap();
    assert_eq!(schedule.timings[p0].start, 1.0);
    assert_eq!(schedule.timings[p1].start, 2.0);
    assert_eq!(schedule.makespan, 5.0);
}

/// 3,000 independent calls of a routine the model gives no flops (`noop`), on two
/// one-processor servers that learned it runs 40 us on the first and 80 us on the second,
/// each call answered 0.3 s after it was sent whatever the server: its running time stacks
/// on its server as compute does, so both schedulers split the calls by those times, two to
/// one. Without it every call costs the same 0.3 s wherever it goes, and the split follows
/// nothing the servers run (FLOW put 1,500 on each).
#[test]
fn calls_without_flops_split_by_their_learned_running_time() {
    let grid = GridView {
        servers: vec![
            server("a", 1e9, 1, &["noop"]),
            server("b", 1e9, 1, &["noop"]),
        ],
    };
    let mut graph = TaskGraph::default();
    for i in 0..3000 {
        graph.add_task(task(&format!("noop#{i}"), "noop", 0.0, 8, 0));
    }
    for name in ["flow", "simple"] {
        let mut p = predictor(&grid, FAST_LINK);
        for (server, seconds) in [(0, 40e-6), (1, 80e-6)] {
            let noop = Factor::without_flops(seconds);
            let overhead = Overhead {
                fixed: 0.3,
                shared: 0.0,
            };
            p.calibrate(
                server,
                HashMap::from([("noop".to_string(), noop)]),
                overhead,
            );
        }
        let servers = run(name, &graph, &grid, &mut p);
        let on_first = servers.iter().filter(|&&s| s == 0).count();
        assert!(
            (1900..=2100).contains(&on_first),
            "{name} put {on_first} of 3000 on the faster server"
        );
    }
}
