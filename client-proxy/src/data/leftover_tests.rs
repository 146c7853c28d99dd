//! Data handles against the in-memory cluster and records ([`crate::fake`]): a put or a copy
//! whose server did its work but whose reply was lost leaves nothing behind once the
//! background deletion has run, and touches nothing else the handle holds there; a new
//! value's copy that fails is handed to the metaserver's repair; a new value whose writer
//! died before the commit is kept from its copy.

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
    cluster.drop_replies("s2", 1);
    proxy
        .replicate("client", &id, &source, &["s2".to_string()])
        .await;
    background_deletions_run().await;
    assert_eq!(
        cluster.owners_on("s2"),
        [id.as_str()],
        "the lost copy is deleted, the other object stays"
    );
    cluster
        .stat("s2", &other.object_id)
        .await
        .expect("the other object stays");
    assert_eq!(metaserver.handle(&id).unwrap().copies.len(), 1);

    // Copied again with its reply: adopted by the handle and recorded.
    proxy
        .replicate("client", &id, &source, &["s2".to_string()])
        .await;
    assert_eq!(cluster.owners_on("s2"), [id.as_str(), id.as_str()]);
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
async fn a_new_values_copy_to_a_dead_server_is_handed_to_the_repair_avoiding_it() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", FakeServer::default()),
        ("s2", FakeServer::default()),
        (
            "s3",
            FakeServer {
                dead: true,
                ..FakeServer::default()
            },
        ),
    ]));
    let (parts, metaserver) = fake_parts(&cluster);
    let config = ProxyConfig::new("127.0.0.1:1");
    let proxy = Proxy::with_parts(config, "test".into(), parts, None, None).unwrap();
    let (spec, upload) = persistent(&[3.0]);
    let info = proxy.put_data("client", spec, upload).await.unwrap();
    let source = v1::ObjectRef {
        server: "s1".into(),
        object_id: info.copies[0].object_id.clone(),
    };

    // Copied where it can be: nothing to repair.
    proxy
        .replicate("client", &info.id, &source, &["s2".to_string()])
        .await;
    assert!(metaserver.repairs().is_empty());

    // s3 is down: the copy there is asked of the metaserver's repair, s3 avoided.
    proxy
        .replicate(
            "client",
            &info.id,
            &source,
            &["s3".to_string(), "s2".to_string()],
        )
        .await;
    let repairs = metaserver.repairs();
    assert_eq!(repairs.len(), 1, "{repairs:?}");
    assert_eq!(repairs[0].id, info.id);
    assert_eq!(repairs[0].owner, "client");
    assert_eq!(repairs[0].avoid, ["s3"]);
}

#[tokio::test(start_paused = true)]
async fn a_new_value_whose_writer_died_before_the_commit_is_kept_from_its_copy() {
    let (cluster, metaserver, proxy) = grid();
    let (spec, upload) = persistent(&[3.0]);
    let info = proxy.put_data("client", spec, upload).await.unwrap();
    let id = info.id.clone();
    // A run wrote the value [4] on s1 and copied it to s2 before its commit; then s1 died.
    let written = cluster
        .put("s1", "p/graph-1", doubles(&[4.0]))
        .await
        .unwrap();
    let copy = cluster
        .put("s2", "p/graph-1", doubles(&[4.0]))
        .await
        .unwrap();
    cluster.set_dead("s1", true);
    let handle_object = |object: &v1::ObjectRef| v1::HandleObject {
        handle: id.clone(),
        object: Some(object.clone()),
    };
    let commit = v1::JournaledCommit {
        writes: vec![handle_object(&written)],
        written_copies: vec![handle_object(&copy)],
        ..Default::default()
    };
    proxy.apply_commit("client", &commit).await.unwrap();
    let copies = metaserver.handle(&id).unwrap().copies;
    assert_eq!(
        copies,
        [v1::DataCopy {
            server: "s2".into(),
            object_id: copy.object_id.clone(),
        }],
        "the copy stands in for the value its writer lost"
    );
    let value = cluster.get(&copy).await.unwrap();
    assert_eq!(crate::fake::values(&value.data), [4.0]);
    assert_eq!(cluster.owners_on("s2"), [id.as_str()]);

    // With no copy, the commit fails naming the handle and the writer's server.
    let commit = v1::JournaledCommit {
        writes: vec![handle_object(&written)],
        ..Default::default()
    };
    let err = proxy.apply_commit("client", &commit).await.unwrap_err();
    assert!(
        err.message().starts_with(&format!(
            "cannot keep the new value of data handle `{id}` on s1"
        )),
        "{}",
        err.message()
    );
}

/// A commit whose proxy died after the records took the new value and before the old
/// copies were deleted is applied again from the journal: the old copies the run found go
/// (the records no longer name them), and the new value's copies stay, though the records
/// list them already.
#[tokio::test(start_paused = true)]
async fn a_commit_applied_again_deletes_the_old_value_and_keeps_the_new() {
    use crate::metaserver::{DataRecordsRequest, Metaserver};
    let (cluster, metaserver, proxy) = grid();
    let (spec, upload) = persistent(&[3.0]);
    let info = proxy.put_data("client", spec, upload).await.unwrap();
    let id = info.id.clone();
    let old = info.copies[0].clone();
    assert_eq!(old.server, "s1");
    // The run wrote [4] on s2 and copied it to s1 before its commit.
    let written = cluster
        .put("s2", "p/graph-1", doubles(&[4.0]))
        .await
        .unwrap();
    let copy = cluster
        .put("s1", "p/graph-1", doubles(&[4.0]))
        .await
        .unwrap();
    let handle_object = |object: &v1::ObjectRef| v1::HandleObject {
        handle: id.clone(),
        object: Some(object.clone()),
    };
    let old_object = v1::ObjectRef {
        server: old.server.clone(),
        object_id: old.object_id.clone(),
    };
    let commit = v1::JournaledCommit {
        writes: vec![handle_object(&written)],
        written_copies: vec![handle_object(&copy)],
        old_copies: vec![handle_object(&old_object)],
        ..Default::default()
    };
    // The first proxy's life: both adopted and recorded, then it died.
    cluster.adopt(&written, &id).await.unwrap();
    cluster.adopt(&copy, &id).await.unwrap();
    let as_copy = |o: &v1::ObjectRef| v1::DataCopy {
        server: o.server.clone(),
        object_id: o.object_id.clone(),
    };
    let record = v1::AddCopyRequest {
        id: id.clone(),
        owner: "client".into(),
        copy: Some(as_copy(&written)),
        replace: true,
        further_copies: vec![as_copy(&copy)],
        only_if_room: false,
    };
    metaserver
        .data(DataRecordsRequest::AddCopy(record))
        .await
        .unwrap();

    proxy.apply_commit("client", &commit).await.unwrap();
    background_deletions_run().await;
    assert!(
        cluster.get(&old_object).await.is_err(),
        "the old value is gone"
    );
    for kept in [&written, &copy] {
        let value = cluster.get(kept).await.unwrap();
        assert_eq!(crate::fake::values(&value.data), [4.0]);
    }
    let mut copies = metaserver.handle(&id).unwrap().copies;
    copies.sort_by(|a, b| a.server.cmp(&b.server));
    assert_eq!(copies, [as_copy(&copy), as_copy(&written)]);
}
