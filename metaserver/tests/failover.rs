//! Two metaservers on one PostgreSQL: the standby refuses until the active one stops, then
//! takes over with the registry the DB holds, and stores the actuals of a graph the other
//! one placed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::{linpack, one_product, registration};
use ninf_metaserver::{MetaserverConfig, MetaserverError};
use ninf_proto::v1;

fn config(dir: &std::path::Path, url: &str) -> MetaserverConfig {
    MetaserverConfig {
        data_dir: dir.to_path_buf(),
        database_url: Some(url.to_string()),
        heartbeat_timeout_seconds: 60.0,
        ..MetaserverConfig::default()
    }
}

async fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..1000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what} did not happen within 20 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_the_registry_and_the_graphs_the_active_one_placed() {
    let postgres = ninf_grid::postgres::LocalPostgres::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let first = ninf_metaserver::bind(config(&dir.path().join("a"), &postgres.url))
        .await
        .unwrap();
    eventually("the election", || first.metaserver.is_active()).await;
    let second = ninf_metaserver::bind(config(&dir.path().join("b"), &postgres.url))
        .await
        .unwrap();
    first
        .metaserver
        .register(registration("a:1", linpack()))
        .await
        .unwrap();
    let placed = first.metaserver.schedule(one_product()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.metaserver.is_active(), "two active metaservers");

    first.stop().await.unwrap();
    eventually("the take-over", || second.metaserver.is_active()).await;
    let metaserver = &second.metaserver;
    let status = metaserver.status(10).await.unwrap();
    assert_eq!(status.servers.len(), 1);
    assert_eq!(status.servers[0].address, "a:1");
    assert_eq!(status.graphs[0].state, "running");
    // The proxy reports the end of a graph the other metaserver placed: stored.
    metaserver
        .report_actuals(v1::ActualsReport {
            graph_id: placed.graph_id,
            makespan: 0.5,
            ..Default::default()
        })
        .await
        .unwrap();
    let status = metaserver.status(10).await.unwrap();
    assert_eq!(status.graphs[0].graph_id, placed.graph_id);
    assert_eq!(status.graphs[0].state, "done");
    // A graph nobody placed is still refused; new graphs are placed on the known server.
    let unknown = metaserver
        .report_actuals(v1::ActualsReport {
            graph_id: placed.graph_id + 100,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, MetaserverError::UnknownGraph(_)),
        "{unknown}"
    );
    let next = metaserver.schedule(one_product()).await.unwrap();
    assert!(next.graph_id > placed.graph_id);
    second.stop().await.unwrap();
}
