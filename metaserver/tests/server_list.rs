//! The server list a proxy asks for before every graph is sent again only when it changed:
//! a registration, a leave, a server gone silent or back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{linpack, one_product, registration};
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::v1;

fn addresses(status: &v1::GridStatus) -> Vec<&str> {
    status.servers.iter().map(|s| s.address.as_str()).collect()
}

#[tokio::test]
async fn the_server_list_is_sent_again_only_once_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = Metaserver::open(MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        heartbeat_seconds: 0.2,
        heartbeat_timeout_seconds: 0.5,
        ..MetaserverConfig::default()
    })
    .await
    .unwrap();
    metaserver
        .register(registration("a:1", linpack()))
        .await
        .unwrap();
    let first = metaserver.servers_status(0);
    assert_eq!(addresses(&first), ["a:1"]);
    assert!(first.network.is_empty() && first.graphs.is_empty());
    assert_ne!(first.servers_changes, 0);
    let seen = first.servers_changes;

    let same = metaserver.servers_status(seen);
    assert!(same.servers_unchanged);
    assert!(same.servers.is_empty());
    assert_eq!(same.servers_changes, seen);
    let beat = |address: &str| v1::HeartbeatRequest {
        address: address.into(),
        load: None,
    };
    metaserver.heartbeat(beat("a:1")).await.unwrap();
    assert!(metaserver.servers_status(seen).servers_unchanged);

    metaserver
        .register(registration("b:1", linpack()))
        .await
        .unwrap();
    let grown = metaserver.servers_status(seen);
    assert!(!grown.servers_unchanged);
    assert_eq!(addresses(&grown), ["a:1", "b:1"]);

    metaserver
        .leave(v1::LeaveRequest {
            address: "b:1".into(),
            draining: true,
            reason: "walltime".into(),
        })
        .await
        .unwrap();
    let left = metaserver.servers_status(grown.servers_changes);
    assert!(!left.servers_unchanged);
    assert!(
        left.servers
            .iter()
            .any(|s| s.address == "b:1" && s.draining)
    );

    // Silent past the timeout: the upkeep marks both down, a change; a's heartbeat brings
    // it back, another.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let before = metaserver.servers_status(0).servers_changes;
    metaserver.mark_down().await.unwrap();
    let down = metaserver.servers_status(before);
    assert!(!down.servers_unchanged);
    assert!(down.servers.iter().all(|s| !s.up));
    metaserver.heartbeat(beat("a:1")).await.unwrap();
    let back = metaserver.servers_status(down.servers_changes);
    assert!(!back.servers_unchanged);
    assert!(back.servers.iter().any(|s| s.address == "a:1" && s.up));
}

/// A graph whose routine only servers gone silent implement is refused for now
/// (`Unavailable`, which a proxy asks again after, naming them) and placed once one of them
/// beats again; with every such server draining, the refusal is final
/// (`FailedPrecondition`), as before.
#[tokio::test]
async fn a_graph_whose_servers_are_only_down_is_refused_for_now_and_placed_once_one_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = Metaserver::open(MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        heartbeat_seconds: 0.1,
        heartbeat_timeout_seconds: 0.3,
        ..MetaserverConfig::default()
    })
    .await
    .unwrap();
    for address in ["a:1", "b:1"] {
        metaserver
            .register(registration(address, linpack()))
            .await
            .unwrap();
    }
    // Silent past the timeout: both down.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let refused = tonic::Status::from(metaserver.schedule(one_product()).await.unwrap_err());
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(
        refused.message(),
        "graph refused for now: every server that implements `mmul` (task `mmul#0`) is down \
         (a:1, b:1); it can run once one of them is back"
    );
    let beat = v1::HeartbeatRequest {
        address: "a:1".into(),
        load: None,
    };
    metaserver.heartbeat(beat).await.unwrap();
    let placed = metaserver.schedule(one_product()).await.unwrap();
    assert_eq!(placed.placements[0].server, "a:1");

    // Both draining: nothing to wait for.
    for address in ["a:1", "b:1"] {
        metaserver
            .leave(v1::LeaveRequest {
                address: address.into(),
                draining: true,
                reason: "walltime".into(),
            })
            .await
            .unwrap();
    }
    let refused = tonic::Status::from(metaserver.schedule(one_product()).await.unwrap_err());
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert_eq!(
        refused.message(),
        "graph refused: no server implements `mmul` (task `mmul#0`)"
    );
}
