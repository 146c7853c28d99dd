//! Graphs are planned one at a time and recorded after, several to a commit: graphs placed
//! at once each get their own id, every one of them is in the resource DB when its proxy
//! has the answer, and a reopened metaserver numbers on past them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::common::{linpack, one_product, registration};
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::v1;

/// A metaserver over the resource DB in `dir`, with two servers of `linpack` registered.
async fn open(dir: &std::path::Path) -> Arc<Metaserver> {
    let config = MetaserverConfig {
        data_dir: dir.to_path_buf(),
        scheduler: "flow".into(),
        ..MetaserverConfig::default()
    };
    let metaserver = Metaserver::open(config).await.unwrap();
    for address in ["a:1", "b:1"] {
        metaserver
            .register(registration(address, linpack()))
            .await
            .unwrap();
    }
    metaserver
}

async fn place(metaserver: &Metaserver, label: String) -> v1::ScheduleReply {
    let request = v1::ScheduleRequest {
        label,
        ..one_product()
    };
    metaserver.schedule(request).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphs_placed_at_once_get_their_own_ids_and_are_recorded_when_answered() {
    let dir = tempfile::tempdir().unwrap();
    let metaserver = open(dir.path()).await;
    let placing: Vec<_> = (0..40)
        .map(|i| {
            let metaserver = metaserver.clone();
            tokio::spawn(async move {
                let reply = place(&metaserver, format!("g{i}")).await;
                // Answered means recorded: the record is there the moment the reply is.
                let graphs = metaserver.db().recent_graphs(100).await.unwrap();
                let mine = graphs.iter().find(|g| g.graph_id == reply.graph_id);
                assert_eq!(mine.map(|g| g.label.clone()), Some(format!("g{i}")));
                reply
            })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for placed in placing {
        let reply = placed.await.unwrap();
        assert_eq!(reply.placements.len(), 1);
        ids.insert(reply.graph_id);
    }
    assert_eq!(ids, (1..=40).collect::<BTreeSet<u64>>());
    // Each is running as far as the metaserver knows: its report is taken.
    for &graph_id in &ids {
        metaserver
            .report_actuals(v1::ActualsReport {
                graph_id,
                ..Default::default()
            })
            .await
            .unwrap();
    }
    metaserver.db().close().await;
    drop(metaserver);

    let reopened = open(dir.path()).await;
    let next = place(&reopened, "after".into()).await;
    assert_eq!(next.graph_id, 41);
    let graphs = reopened.db().recent_graphs(100).await.unwrap();
    assert_eq!(graphs.len(), 41);
    assert_eq!(graphs[0].label, "after");
    assert_eq!(
        graphs.iter().filter(|g| g.state == "done").count(),
        40,
        "the reports of the first 40 were recorded"
    );
}
