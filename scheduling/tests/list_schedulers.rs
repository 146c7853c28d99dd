//! HEFT, PEFT and lookahead HEFT under the exclusive model on the textbook graphs whose
//! schedules are published, and on a fork worked by hand.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};

use ninf_scheduling::classic::ClassicPredictor;
use ninf_scheduling::list::peft::optimistic_costs;
use ninf_scheduling::schedule::Prepared;
use ninf_scheduling::{
    GridView, Link, Location, Model, Predictor, Schedule, ServerView, Task, TaskGraph, by_name,
};

/// The exclusive model with each task's compute time on each server read from a table, as
/// the papers give them (tasks labelled by their row).
#[derive(Clone)]
struct Table {
    inner: ClassicPredictor,
    costs: Vec<Vec<f64>>,
}

impl Predictor for Table {
    fn model(&self) -> Model {
        Model::Exclusive
    }
    fn earliest_start(&self, server: usize, processors: u32, ready: f64, duration: f64) -> f64 {
        self.inner
            .earliest_start(server, processors, ready, duration)
    }
    fn speed(&self, server: usize, processors: u32, at: f64) -> f64 {
        self.inner.speed(server, processors, at)
    }
    fn compute_time(&self, server: usize, task: &Task, _at: f64) -> f64 {
        let row: usize = task.label.parse().unwrap();
        self.costs[row][server]
    }
    fn link(&self, from: Location, to: Location) -> Link {
        self.inner.link(from, to)
    }
    fn place(&mut self, server: usize, processors: u32, start: f64, finish: f64) -> usize {
        self.inner.place(server, processors, start, finish)
    }
    fn withdraw(&mut self, placement: usize) {
        self.inner.withdraw(placement)
    }
    fn fork(&self) -> Box<dyn Predictor> {
        Box::new(self.clone())
    }
}

/// `costs[task][server]`, edges `(from, to, communication cost)`; every link carries one
/// byte per second, so an edge's bytes are its cost between two servers.
fn textbook(costs: &[&[f64]], edges: &[(usize, usize, u64)]) -> (TaskGraph, GridView, Table) {
    let servers = costs[0].len();
    let grid = GridView {
        servers: (0..servers)
            .map(|s| ServerView {
                name: format!("p{}", s + 1),
                flops_per_processor: 1.0,
                processors: 1,
                functions: BTreeSet::from(["f".to_string()]),
                up: true,
            })
            .collect(),
    };
    let mut graph = TaskGraph::default();
    for t in 0..costs.len() {
        graph.add_task(Task {
            label: t.to_string(),
            function: "f".into(),
            flops: 1.0,
            client_in_bytes: 0,
            client_out_bytes: 0,
            processors: 1,
        });
    }
    for &(from, to, bytes) in edges {
        graph.add_edge(from, to, bytes);
    }
    let link = Link {
        throughput: 1.0,
        latency: 0.0,
    };
    let table = Table {
        inner: ClassicPredictor::new(&grid, HashMap::new(), link),
        costs: costs.iter().map(|r| r.to_vec()).collect(),
    };
    (graph, grid, table)
}

fn run(name: &str, graph: &TaskGraph, grid: &GridView, table: &Table) -> Schedule {
    let mut predictor = table.clone();
    by_name(name, 1)
        .unwrap()
        .schedule(graph, grid, &mut predictor)
        .unwrap()
}

/// Topcuoglu, Hariri and Wu (2002), Fig. 2 and Table 1 (tasks n1..n10 as 0..9).
fn topcuoglu() -> (TaskGraph, GridView, Table) {
    textbook(
        &[
            &[14.0, 16.0, 9.0],
            &[13.0, 19.0, 18.0],
            &[11.0, 13.0, 19.0],
            &[13.0, 8.0, 17.0],
            &[12.0, 13.0, 10.0],
            &[13.0, 16.0, 9.0],
            &[7.0, 15.0, 11.0],
            &[5.0, 11.0, 14.0],
            &[18.0, 12.0, 20.0],
            &[21.0, 7.0, 16.0],
        ],
        &[
            (0, 1, 18),
            (0, 2, 12),
            (0, 3, 9),
            (0, 4, 11),
            (0, 5, 14),
            (1, 7, 19),
            (1, 8, 16),
            (2, 6, 23),
            (3, 7, 27),
            (3, 8, 23),
            (4, 8, 13),
            (5, 7, 15),
            (6, 9, 17),
            (7, 9, 11),
            (8, 9, 13),
        ],
    )
}

/// Arabnejad and Barbosa (2014), the sample graph of Fig. 2 and its Table 1 (T1..T10 as
/// 0..9).
fn arabnejad() -> (TaskGraph, GridView, Table) {
    textbook(
        &[
            &[22.0, 21.0, 36.0],
            &[22.0, 18.0, 18.0],
            &[32.0, 27.0, 43.0],
            &[7.0, 10.0, 4.0],
            &[29.0, 27.0, 35.0],
            &[26.0, 17.0, 24.0],
            &[14.0, 25.0, 30.0],
            &[29.0, 23.0, 36.0],
            &[15.0, 21.0, 8.0],
            &[13.0, 16.0, 33.0],
        ],
        &[
            (0, 1, 17),
            (0, 2, 31),
            (0, 3, 29),
            (0, 4, 13),
            (0, 5, 7),
            (1, 7, 3),
            (1, 8, 30),
            (2, 6, 16),
            (3, 7, 11),
            (3, 8, 7),
            (4, 8, 57),
            (5, 7, 5),
            (6, 9, 9),
            (7, 9, 42),
            (8, 9, 7),
        ],
    )
}

#[test]
fn heft_schedules_topcuoglus_graph_in_80_as_published() {
    let (graph, grid, table) = topcuoglu();
    let schedule = run("heft", &graph, &grid, &table);
    assert_eq!(schedule.makespan, 80.0);
    // Fig. 4 (a): n1, n3, n5, n7 on P3; n2, n8 on P1; n4, n6, n9, n10 on P2.
    assert_eq!(schedule.servers, vec![2, 0, 2, 1, 2, 1, 2, 0, 1, 1]);
    let starts: Vec<f64> = schedule.timings.iter().map(|t| t.start).collect();
    assert_eq!(
        starts,
        vec![0.0, 27.0, 9.0, 18.0, 28.0, 26.0, 38.0, 57.0, 56.0, 73.0]
    );
}

#[test]
fn peft_builds_the_published_optimistic_cost_table_and_schedules_in_122() {
    let (graph, grid, table) = arabnejad();
    let prepared = Prepared::new(&graph, &grid).unwrap();
    let oct = optimistic_costs(&graph, &prepared, &grid, &table);
    let expected: Vec<Vec<f64>> = [
        [64, 68, 86],
        [42, 39, 42],
        [27, 41, 43],
        [42, 39, 50],
        [28, 37, 28],
        [42, 39, 44],
        [13, 16, 22],
        [13, 16, 33],
        [13, 16, 20],
        [0, 0, 0],
    ]
    .iter()
    .map(|row| row.iter().map(|&c| f64::from(c)).collect())
    .collect();
    assert_eq!(oct, expected);

    let schedule = run("peft", &graph, &grid, &table);
    assert_eq!(schedule.makespan, 122.0);
    assert_eq!(schedule.servers, vec![0, 0, 0, 0, 2, 1, 0, 1, 2, 1]);
    let starts: Vec<f64> = schedule.timings.iter().map(|t| t.start).collect();
    assert_eq!(
        starts,
        vec![0.0, 29.0, 51.0, 22.0, 35.0, 29.0, 83.0, 54.0, 81.0, 106.0]
    );
}

#[test]
fn peft_and_lookahead_see_the_child_that_heft_sends_away() {
    // x is fastest on p1, but its child y is ten times faster on p2 and the edge costs 5:
    // HEFT puts x on p1 and pays the transfer; looking ahead puts both on p2.
    let (graph, grid, table) = textbook(&[&[1.0, 2.0], &[10.0, 1.0]], &[(0, 1, 5)]);
    let heft = run("heft", &graph, &grid, &table);
    assert_eq!((heft.servers.clone(), heft.makespan), (vec![0, 1], 7.0));
    for name in ["peft", "heft-lookahead", "search"] {
        let s = run(name, &graph, &grid, &table);
        assert_eq!((s.servers, s.makespan), (vec![1, 1], 3.0), "{name}");
    }
}

#[test]
fn search_never_loses_to_the_list_schedulers_it_starts_from() {
    for (graph, grid, table) in [topcuoglu(), arabnejad()] {
        let search = run("search", &graph, &grid, &table).makespan;
        for name in ["heft", "peft", "heft-lookahead"] {
            let list = run(name, &graph, &grid, &table).makespan;
            assert!(search <= list, "search {search} > {name} {list}");
        }
    }
}
