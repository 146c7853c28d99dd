//! A large graph is planned off the state's lock: heartbeats are answered while it is being
//! planned. Observed by the metaserver's own counter of graphs in planning, not by timing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use crate::common::linpack;
use ninf_metaserver::{Metaserver, MetaserverConfig};
use ninf_proto::v1;

/// `tasks` independent products of 100 x 100 matrices.
fn wide_graph(tasks: usize) -> v1::TaskGraph {
    v1::TaskGraph {
        tasks: (0..tasks)
            .map(|i| v1::GraphTask {
                label: format!("mmul#{i}"),
                function: "mmul".into(),
                scalars: HashMap::from([("n".to_string(), 100)]),
                client_out_bytes: 80_000,
                data: Vec::new(),
            })
            .collect(),
        edges: Vec::new(),
    }
}

fn heartbeat(address: &str) -> v1::HeartbeatRequest {
    v1::HeartbeatRequest {
        address: address.into(),
        load: Some(v1::LoadSample::default()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_are_answered_while_a_large_graph_is_planned() {
    let dir = tempfile::tempdir().unwrap();
    let config = MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        scheduler: "flow".into(),
        max_graph_tasks: 1_000_000,
        ..MetaserverConfig::default()
    };
    let metaserver = Metaserver::open(config).await.unwrap();
    let servers = ["a:1", "b:1", "c:1"];
    for (i, address) in servers.iter().enumerate() {
        let module = v1::ModuleInterface {
            name: "linpack".into(),
            functions: linpack(),
            ..Default::default()
        };
        let info = v1::ServerInfo {
            mflops: 500.0 * (i + 1) as f64,
            processors: 1,
            cpus: 2,
            ..Default::default()
        };
        metaserver
            .register(v1::RegisterRequest {
                address: address.to_string(),
                info: Some(info),
                modules: vec![module],
                failed_modules: Vec::new(),
            })
            .await
            .unwrap();
    }

    let scheduling = {
        let metaserver = metaserver.clone();
        tokio::spawn(async move {
            let request = v1::ScheduleRequest {
                graph: Some(wide_graph(6_000)),
                proxy: "test".into(),
                ..Default::default()
            };
            metaserver.schedule(request).await
        })
    };
    let mut observed_planning = false;
    let mut answered_while_planning = 0;
    while !scheduling.is_finished() {
        let before = metaserver.planning_now();
        let reply = metaserver.heartbeat(heartbeat("a:1")).await.unwrap();
        assert!(reply.registered);
        if before == 1 && metaserver.planning_now() == 1 {
            observed_planning = true;
            answered_while_planning += 1;
            if answered_while_planning == 20 {
                break;
            }
        }
        tokio::task::yield_now().await;
    }
    assert!(
        observed_planning,
        "the graph was planned before it could be observed"
    );
    assert!(
        answered_while_planning >= 3,
        "only {answered_while_planning} heartbeats were answered while the graph was planned"
    );
    let reply = scheduling.await.unwrap().unwrap();
    assert_eq!(reply.placements.len(), 6_000);
    assert_eq!(metaserver.planning_now(), 0);
    // The placements were recorded: the graph is running and can be reported.
    metaserver
        .report_actuals(v1::ActualsReport {
            graph_id: reply.graph_id,
            ..Default::default()
        })
        .await
        .unwrap();
}
