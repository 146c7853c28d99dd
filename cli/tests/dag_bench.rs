#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `ninf dag-bench --graph FILE --platform FILE`: graphs from STG and WfFormat files on a
//! platform from a file, one JSON line per (graph, scheduler); bad files refused naming the
//! file, line and field.

use std::path::Path;
use std::process::Command;

fn ninf() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ninf"))
}

const PLATFORM: &str = r#"{"servers": [{"name": "slow", "speed": 1.0}, {"name": "fast", "speed": 4.0}],
  "bandwidth": [[0, 2.0], [2.0, 0]]}"#;

/// A fork: t1 (8 s at speed 1) feeds t2 and t3 (4 s each) with 4 bytes each (2 s apart).
const FORK: &str = "3\n0 0 0\n1 8 1 0 0\n2 4 1 1 4\n3 4 1 1 4\n4 0 2 2 0 3 0\n";

#[test]
fn graphs_from_files_are_scheduled_by_every_named_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    let platform = dir.path().join("platform.json");
    std::fs::write(&platform, PLATFORM).unwrap();
    let graph = dir.path().join("fork.stg");
    std::fs::write(&graph, FORK).unwrap();
    let out = Command::new(ninf())
        .args(["dag-bench", "--graph"])
        .arg(&graph)
        .arg("--platform")
        .arg(&platform)
        .args([
            "--schedulers",
            "heft,peft,heft-lookahead,search",
            "--placements",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = lines
        .iter()
        .map(|l| l["scheduler"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["heft", "peft", "heft-lookahead", "search"]);
    for l in &lines {
        assert_eq!(l["graph"], graph.display().to_string());
        assert_eq!(
            (l["tasks"].as_u64(), l["model"].as_str()),
            (Some(5), Some("exclusive"))
        );
        // Everything on the fast server: 2 s, then 1 s and 1 s; moving a branch to the slow
        // one would take 2 s of transfer and 4 s of compute.
        assert_eq!(l["makespan"].as_f64(), Some(4.0), "{l}");
        assert_eq!(l["servers"].as_array().unwrap()[1..4], [1, 1, 1], "{l}");
        assert!(l["schedule_ms"].as_f64().unwrap() >= 0.0);
    }
}

#[test]
fn a_malformed_graph_is_refused_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let platform = dir.path().join("platform.json");
    std::fs::write(&platform, PLATFORM).unwrap();
    let graph = dir.path().join("bad.stg");
    std::fs::write(&graph, "2\n0 0 0\n1 8 1 0\n2 four 1 1\n3 0 1 2\n").unwrap();
    let out = Command::new(ninf())
        .args(["dag-bench", "--graph"])
        .arg(&graph)
        .arg("--platform")
        .arg(&platform)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "{}:4: processing time: expected a number >= 0, found `four`",
        graph.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}
