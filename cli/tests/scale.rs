//! `ninf scale` against a few emulated servers: every one registers, heartbeats and reports
//! its network samples, graphs go through two proxies (probing the servers' paths) and are
//! placed, and the report names what docs/performance.md
//! ("A metaserver for many servers") reads from it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use crate::common::ninf;

#[test]
fn emulated_servers_register_beat_and_take_the_clients_graphs() {
    common::programs::build();
    let output = Command::new(ninf())
        .args(["scale", "--servers", "60", "--servers-per-process", "25"])
        .args([
            "--clients",
            "3",
            "--proxies",
            "2",
            "--seconds",
            "3",
            "--heartbeat-seconds",
            "0.5",
        ])
        .args(["--tasks", "4", "--probe-seconds", "1", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["servers_registered"], 60, "{report}");
    assert_eq!(report["emulator_processes"], 3, "{report}");
    assert_eq!(report["graphs_failed"], 0, "{report}");
    assert!(report["graphs"].as_u64().unwrap() > 0, "{report}");
    // Clients 0 and 2 go through the first proxy, client 1 through the second: both
    // placed graphs, and every graph is counted once.
    let per_proxy: Vec<u64> = report["graphs_per_proxy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_u64().unwrap())
        .collect();
    assert_eq!(per_proxy.len(), 2, "{report}");
    assert!(per_proxy.iter().all(|&g| g > 0), "{report}");
    assert_eq!(
        per_proxy.iter().sum::<u64>(),
        report["graphs"].as_u64().unwrap()
    );
    assert_eq!(report["proxies"], 2, "{report}");
    // Every emulated server beat at least once while the clients ran.
    assert!(
        report["heartbeats_sent"].as_u64().unwrap() >= 60,
        "{report}"
    );
    // Every server reported its network samples with its first heartbeat.
    assert!(
        report["network_reports"].as_u64().unwrap() >= 60,
        "{report}"
    );
    assert!(report["db_bytes"].as_u64().unwrap() > 0, "{report}");
    assert!(
        report["metaserver_rss_mib"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    for key in [
        "registrations_per_s",
        "heartbeats_per_s",
        "heartbeats_missed",
        "schedule_p50_ms",
        "schedule_p99_ms",
        "graphs_per_s",
    ] {
        assert!(report[key].is_number(), "{key} missing: {report}");
    }
}
