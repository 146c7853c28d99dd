//! Data handles against the in-memory cluster and records ([`crate::fake`]): a put or a copy
//! whose server did its work but whose reply was lost leaves nothing behind once the
//! background deletion has run, and touches nothing else the handle holds there.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use ninf_proto::v1;

use super::upload::Upload;
use crate::cluster::Cluster;
use crate::fake::{FakeCluster, FakeServer, doubles};
use crate::fake_metaserver::{FakeMetaserver, fake_parts};
use crate::{Proxy, ProxyConfig};

fn grid() -> (Arc<FakeCluster>, Arc<FakeMetaserver>, Arc<Proxy>) {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", FakeServer::default()),
        ("s2", FakeServer::default()),
    ]));
    let (parts, metaserver) = fake_parts(&cluster);
    let config = ProxyConfig::new("127.0.0.1:1");
    let proxy = Proxy::with_parts(config, "test".into(), parts, None, None).unwrap();
    (cluster, metaserver, proxy)
}

fn persistent(values: &[f64]) -> (v1::DataSpec, Upload) {
    let spec = v1::DataSpec {
        element_type: v1::ElementType::Double as i32,
        bytes: 8 * values.len() as u64,
        shape: vec![values.len() as u64],
        mode: v1::DataMode::Persistent as i32,
        ..Default::default()
    };
    (spec, Upload::whole(doubles(values).data))
}

/// Longer than the background deletion's first waits (the clock is paused: it jumps).
async fn background_deletions_run() {
    tokio::time::sleep(Duration::from_secs(5)).await;
}

#[tokio::test(start_paused = true)]
async fn a_put_whose_reply_was_lost_is_placed_again_and_leaves_nothing_where_it_failed() {
    let (cluster, metaserver, proxy) = grid();
    cluster.drop_replies("s1", 1);
    let (spec, upload) = persistent(&[1.0, 2.0]);
    let info = proxy.put_data("client", spec, upload).await.unwrap();
    let servers: Vec<&str> = info.copies.iter().map(|c| c.server.as_str()).collect();
    assert_eq!(
        servers,
        ["s2"],
        "placed again, away from the server that failed"
    );
    // s1 stored the first try under a handle freed since: deleted in the background.
    assert_eq!(cluster.owners_on("s1"), ["handle-1"]);
    background_deletions_run().await;
    assert!(
        cluster.owners_on("s1").is_empty(),
        "the first try's bytes stay"
    );
    assert_eq!(cluster.owners_on("s2"), [info.id.as_str()]);
    assert!(metaserver.handle("handle-1").is_none());
    assert_eq!(metaserver.handle(&info.id).unwrap().copies, info.copies);
}

#[tokio::test(start_paused = true)]
async fn a_copy_whose_reply_was_lost_leaves_nothing_and_spares_the_handles_other_objects() {
    let (cluster, metaserver, proxy) = grid();
    let (spec, upload) = persistent(&[3.0]);
    let info = proxy.put_data("client", spec, upload).await.unwrap();
    let id = info.id.clone();
    let source = v1::ObjectRef {
        server: "s1".into(),
        object_id: info.copies[0].object_id.clone(),
    };
    // s2 already holds an object of the handle's (another copy on its way in, say).
    let other = cluster
        .put("s2", &id, doubles(&[3.0]))
        .await
        .expect("stored");
    // The first copy's reply is lost; the copy is asked again, and this one answers.
    cluster.drop_replies("s2", 1);
    proxy
        .replicate("client", &id, &source, &["s2".to_string()])
        .await;
    background_deletions_run().await;
    assert_eq!(
        cluster.owners_on("s2"),
        [id.as_str(), id.as_str()],
        "the lost copy is deleted, the other object and the second copy stay"
    );
    cluster
        .stat("s2", &other.object_id)
        .await
        .expect("the other object stays");
    let copies: Vec<String> = metaserver
        .handle(&id)
        .unwrap()
        .copies
        .into_iter()
        .map(|c| c.server)
        .collect();
    assert_eq!(copies, ["s1", "s2"]);
}

#[tokio::test(start_paused = true)]
async fn a_replica_whose_server_restarts_under_the_copy_is_made_once_it_is_back() {
    let (cluster, metaserver, proxy) = grid();
    let (spec, upload) = persistent(&[4.0]);
    let info = proxy.put_data("client", spec, upload).await.unwrap();
    let id = info.id.clone();
    let source = v1::ObjectRef {
        server: "s1".into(),
        object_id: info.copies[0].object_id.clone(),
    };
    // s2 is down for 0.5 s, as `ninf chaos` keeps a killed server.
    cluster.set_dead("s2", true);
    let back = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            cluster.set_dead("s2", false);
        })
    };
    proxy
        .replicate("client", &id, &source, &["s2".to_string()])
        .await;
    back.await.unwrap();
    let copies: Vec<String> = metaserver
        .handle(&id)
        .unwrap()
        .copies
        .into_iter()
        .map(|c| c.server)
        .collect();
    assert_eq!(copies, ["s1", "s2"]);
    assert_eq!(cluster.owners_on("s2"), [id.as_str()]);

    // A server down for good: the copy is given up after its tries, the value kept on s1.
    cluster.set_dead("s2", true);
    let other = proxy.put_data("client", persistent(&[5.0]).0, persistent(&[5.0]).1);
    let other = other.await.unwrap();
    let from = v1::ObjectRef {
        server: other.copies[0].server.clone(),
        object_id: other.copies[0].object_id.clone(),
    };
    proxy
        .replicate("client", &other.id, &from, &["s2".to_string()])
        .await;
    assert_eq!(metaserver.handle(&other.id).unwrap().copies.len(), 1);
}
