//! The turns a placement gives its calls (`TaskPlacement.turns`, `ninf_metaserver::turns`):
//! the server's processors for a call the model gives at least `turns_min_seconds` alone,
//! none for shorter ones or when the configuration turns them off.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{linpack, registration};
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::v1;

/// Products of these sizes from proxy `test`, independent.
fn products(sizes: &[i64]) -> v1::ScheduleRequest {
    let tasks = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| v1::GraphTask {
            label: format!("mmul#{i}"),
            function: "mmul".into(),
            scalars: std::collections::HashMap::from([("n".to_string(), n)]),
            client_out_bytes: (n * n * 8) as u64,
            data: Vec::new(),
        })
        .collect();
    v1::ScheduleRequest {
        graph: Some(v1::TaskGraph {
            tasks,
            edges: Vec::new(),
        }),
        proxy: "test".into(),
        ..Default::default()
    }
}

async fn metaserver(dir: &tempfile::TempDir, turns_min_seconds: f64) -> std::sync::Arc<Metaserver> {
    let metaserver = Metaserver::open(MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        turns_min_seconds,
        ..MetaserverConfig::default()
    })
    .await
    .unwrap();
    let mut two = registration("a:1", linpack());
    if let Some(info) = two.info.as_mut() {
        info.processors = 2;
        info.cpus = 2;
    }
    metaserver.register(two).await.unwrap();
    metaserver
}

fn turns(placed: &v1::ScheduleReply) -> Vec<u32> {
    let mut placements = placed.placements.clone();
    placements.sort_by_key(|p| p.task);
    placements.iter().map(|p| p.turns).collect()
}

#[tokio::test]
async fn long_calls_take_turns_by_their_servers_processors_and_short_ones_go_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = metaserver(&dir, MetaserverConfig::default().turns_min_seconds).await;
    // At 1,000 Mflop/s per processor: n = 500 is 0.25 s alone, past the default 0.1 s;
    // n = 300 0.054 s and n = 50 0.25 ms, shorter.
    let placed = metaserver
        .schedule(products(&[500, 50, 300, 500]))
        .await
        .unwrap();
    assert!(placed.placements.iter().all(|p| p.server == "a:1"));
    assert_eq!(turns(&placed), [2, 0, 0, 2]);
}

#[tokio::test]
async fn an_infinite_threshold_gives_no_call_turns() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = metaserver(&dir, f64::INFINITY).await;
    let placed = metaserver
        .schedule(products(&[500, 50, 500]))
        .await
        .unwrap();
    assert_eq!(turns(&placed), [0, 0, 0]);
}
