//! Task graphs and platforms read from STG, WfFormat and platform JSON text, and malformed
//! files refused naming the line and field.

#![allow(clippy::unwrap_used)]

use ninf_scheduling::formats::{FUNCTION, platform, read_graph};
use ninf_scheduling::{Location, Model, by_name};

const STG: &str = "\
    4
    0     0     0
    1     3     1     0
    2     5     1     0
    3     4     2     1     2
    4     2     1     3
    5     0     1     4
# Standard Task Graph Set
# Tasks : 4
";

const STG_COSTS: &str = "4\n0 0 0\n1 3 1 0 0\n2 5 1 0 0\n3 4 2 1 7 2 9\n4 2 1 3 1\n5 0 1 4 0\n";

#[test]
fn stg_reads_tasks_predecessors_and_communication_costs() {
    let g = read_graph("plain.stg", STG).unwrap();
    assert_eq!(g.tasks.len(), 6);
    let flops: Vec<f64> = g.tasks.iter().map(|t| t.flops).collect();
    assert_eq!(flops, vec![0.0, 3.0, 5.0, 4.0, 2.0, 0.0]);
    assert!(
        g.tasks
            .iter()
            .all(|t| t.function == FUNCTION && t.processors == 1)
    );
    let edges: Vec<(usize, usize, u64)> = g.edges.iter().map(|e| (e.from, e.to, e.bytes)).collect();
    assert_eq!(
        edges,
        vec![
            (0, 1, 0),
            (0, 2, 0),
            (1, 3, 0),
            (2, 3, 0),
            (3, 4, 0),
            (4, 5, 0)
        ]
    );

    let g = read_graph("costs.stg", STG_COSTS).unwrap();
    let edges: Vec<(usize, usize, u64)> = g.edges.iter().map(|e| (e.from, e.to, e.bytes)).collect();
    assert_eq!(
        edges,
        vec![
            (0, 1, 0),
            (0, 2, 0),
            (1, 3, 7),
            (2, 3, 9),
            (3, 4, 1),
            (4, 5, 0)
        ]
    );
}

#[test]
fn malformed_stg_is_refused_naming_line_and_field() {
    let cases = [
        (
            "x\n",
            "bad.stg:1: task count: expected a whole number, found `x`",
        ),
        (
            "1\n0 0 0\n1 2.5x 1 0\n2 0 1 1\n",
            "bad.stg:3: processing time: expected a number >= 0, found `2.5x`",
        ),
        (
            "1\n0 0 0\n1 2 2 0\n2 0 1 1\n",
            "bad.stg:3: predecessors: 2 predecessors need 2 fields (or 4 with communication costs), found 1",
        ),
        (
            "1\n0 0 0\n2 2 1 0\n",
            "bad.stg:3: task number: expected 1, found 2",
        ),
        (
            "1\n0 0 0\n1 2 1 7\n2 0 1 1\n",
            "bad.stg:3: predecessor: task 7 does not exist (tasks 0 to 2)",
        ),
        (
            "1\n0 0 0\n1 2 1 0\n",
            "bad.stg:1: task count: 1 tasks need 3 task lines, found 2",
        ),
        (
            "2\n0 0 0\n1 2 1 0 4\n2 2 1 0\n3 0 2 1 2\n",
            "bad.stg:4: predecessors: written without communication costs, but line 3 wrote them with communication costs",
        ),
        (
            "1\n0 0 1 2\n1 2 1 0\n2 0 1 1\n",
            "bad.stg: graph: the graph has a cycle through t0 -> t1 -> t2 -> t0",
        ),
    ];
    for (text, error) in cases {
        assert_eq!(read_graph("bad.stg", text).unwrap_err().to_string(), error);
    }
}

const WF15: &str = r#"{
  "name": "tiny", "schemaVersion": "1.5",
  "workflow": {
    "specification": {
      "tasks": [
        {"name": "split", "id": "split_1", "parents": [], "children": ["work_2", "work_3"],
         "inputFiles": ["in.dat"], "outputFiles": ["a.dat", "b.dat"]},
        {"name": "work", "id": "work_2", "parents": ["split_1"], "children": [],
         "inputFiles": ["a.dat"], "outputFiles": ["c.dat"]},
        {"name": "work", "id": "work_3", "parents": ["split_1"], "children": [],
         "inputFiles": ["a.dat", "b.dat"], "outputFiles": []}
      ],
      "files": [
        {"id": "in.dat", "sizeInBytes": 1000}, {"id": "a.dat", "sizeInBytes": 300},
        {"id": "b.dat", "sizeInBytes": 50}, {"id": "c.dat", "sizeInBytes": 7}
      ]
    },
    "execution": {
      "makespanInSeconds": 10,
      "tasks": [
        {"id": "split_1", "runtimeInSeconds": 2.5},
        {"id": "work_2", "runtimeInSeconds": 4.0},
        {"id": "work_3", "runtimeInSeconds": 1.0}
      ]
    }
  }
}"#;

const WF14: &str = r#"{"name": "old", "schemaVersion": "1.4", "workflow": {"tasks": [
  {"name": "split", "id": "s1", "type": "compute", "runtimeInSeconds": 2.5, "parents": [],
   "files": [{"link": "input", "name": "in.dat", "sizeInBytes": 1000},
             {"link": "output", "name": "a.dat", "sizeInBytes": 300}]},
  {"name": "work", "id": "w2", "runtime": 4.0, "parents": ["split"],
   "files": [{"link": "input", "name": "a.dat", "size": 300}]}
]}}"#;

#[test]
fn wfformat_reads_runtimes_and_the_files_children_read_from_parents() {
    let g = read_graph("tiny.json", WF15).unwrap();
    let tasks: Vec<(&str, f64)> = g
        .tasks
        .iter()
        .map(|t| (t.label.as_str(), t.flops))
        .collect();
    assert_eq!(
        tasks,
        vec![("split_1", 2.5), ("work_2", 4.0), ("work_3", 1.0)]
    );
    let edges: Vec<(usize, usize, u64)> = g.edges.iter().map(|e| (e.from, e.to, e.bytes)).collect();
    // The workflow's input and the file nobody reads cost nothing.
    assert_eq!(edges, vec![(0, 1, 300), (0, 2, 350)]);
    assert!(
        g.tasks
            .iter()
            .all(|t| t.client_in_bytes == 0 && t.client_out_bytes == 0)
    );

    let g = read_graph("old.json", WF14).unwrap();
    let edges: Vec<(usize, usize, u64)> = g.edges.iter().map(|e| (e.from, e.to, e.bytes)).collect();
    assert_eq!(edges, vec![(0, 1, 300)]);
    assert_eq!(g.tasks[1].flops, 4.0);
}

#[test]
fn malformed_wfformat_is_refused_naming_the_task_or_the_place() {
    let no_runtime = WF15.replace(
        r#"{"id": "work_3", "runtimeInSeconds": 1.0}"#,
        r#"{"id": "other", "runtimeInSeconds": 1.0}"#,
    );
    let unknown_parent = WF15.replace(
        r#""parents": ["split_1"], "children": [],
         "inputFiles": ["a.dat", "b.dat"]"#,
        r#""parents": ["merge_9"], "children": [],
         "inputFiles": ["a.dat", "b.dat"]"#,
    );
    let unknown_file = WF15.replace(r#""outputFiles": ["c.dat"]"#, r#""outputFiles": ["d.dat"]"#);
    let bad_size = WF15.replace(r#""sizeInBytes": 50"#, r#""sizeInBytes": "fifty""#);
    let cases = [
        (
            no_runtime,
            "w.json: task `work_3`: no `runtimeInSeconds` in `workflow.execution.tasks`"
                .to_string(),
        ),
        (
            unknown_parent,
            "w.json: task `work_3`: parent `merge_9` is not a task".to_string(),
        ),
        (
            unknown_file,
            "w.json: task `work_2`: file `d.dat` is not in `files`".to_string(),
        ),
        (
            bad_size,
            "w.json: invalid type: string \"fifty\", expected u64 at line 15 column 46".to_string(),
        ),
        (
            r#"{"workflow": {}}"#.to_string(),
            "w.json: workflow: has neither `specification` (schema 1.5) nor `tasks` (schema 1.4)"
                .to_string(),
        ),
    ];
    for (text, error) in cases {
        assert_eq!(read_graph("w.json", &text).unwrap_err().to_string(), error);
    }
}

const PLATFORM: &str = r#"{
  "servers": [{"name": "a", "speed": 1.0}, {"name": "b", "speed": 2.0, "processors": 2}],
  "bandwidth": [[0, 10.0], [20.0, 0]],
  "latency": [[0, 0.5], [0.5, 0]]
}"#;

#[test]
fn a_platform_gives_speeds_links_and_both_models() {
    let p = platform::parse("p.json", PLATFORM).unwrap();
    assert_eq!(p.grid.servers[1].flops_per_processor, 2.0);
    assert_eq!(p.grid.servers[1].processors, 2);
    let ab = p.links[&(Location::Server(0), Location::Server(1))];
    assert_eq!((ab.throughput, ab.latency), (10.0, 0.5));
    assert_eq!(
        p.links[&(Location::Server(1), Location::Server(0))].throughput,
        20.0
    );
    assert_eq!(p.predictor_for(Model::Exclusive).model(), Model::Exclusive);
    assert_eq!(p.predictor_for(Model::Shared).model(), Model::Shared);
    // A chain of two tasks from an STG file: 4 s on b (speed 2) beats a's 8 s.
    let g = read_graph("c.stg", "2\n0 0 0\n1 8 1 0 0\n2 8 1 1 100\n3 0 1 2 0\n").unwrap();
    let mut predictor = p.predictor_for(Model::Exclusive);
    let s = by_name("heft", 1)
        .unwrap()
        .schedule(&g, &p.grid, predictor.as_mut())
        .unwrap();
    assert_eq!(s.servers[1..3], [1, 1]);
    assert_eq!(s.makespan, 8.0);
}

#[test]
fn malformed_platforms_are_refused_naming_the_field() {
    let cases = [
        (
            r#"{"servers": []}"#,
            "p.json: servers: the platform has no server",
        ),
        (
            r#"{"servers": [{"name": "a", "speed": 0}]}"#,
            "p.json: servers[0] (`a`): speed 0 is not a number of flop/s > 0",
        ),
        (
            r#"{"servers": [{"name": "a", "speed": 1}, {"name": "b", "speed": 1}]}"#,
            "p.json: bandwidth: has 0 rows; the platform has 2 servers",
        ),
        (
            r#"{"servers": [{"name": "a", "speed": 1}, {"name": "b", "speed": 1}], "bandwidth": [[0, 1], [1]]}"#,
            "p.json: bandwidth[1]: has 1 entries; the platform has 2 servers",
        ),
        (
            r#"{"servers": [{"name": "a", "speed": 1}, {"name": "b", "speed": 1}], "bandwidth": [[0, -1], [1, 0]]}"#,
            "p.json: bandwidth[0][1]: -1 is not a number of bytes/s > 0",
        ),
        (
            r#"{"servers": [{"name": "a", "sped": 1}]}"#,
            "p.json: unknown field `sped`, expected one of `name`, `speed`, `processors` at line 1 column 33",
        ),
    ];
    for (text, error) in cases {
        assert_eq!(
            platform::parse("p.json", text).unwrap_err().to_string(),
            error
        );
    }
}
