//! Two metaservers sharing one PostgreSQL: one active, the other a standby that refuses
//! requests, takes over when the active one stops, and the grid keeps computing through it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::{ensure_executables, local_mmul, matrix, module};
use ninf::grid::GridClient;
use ninf_client_proxy::config::ProxyConfig;
use ninf_compute_server::config::ServerConfig;
use ninf_grid::postgres::LocalPostgres;
use ninf_metaserver::config::MetaserverConfig;
use ninf_proto::v1;

fn metaserver_config(dir: &std::path::Path, url: &str) -> MetaserverConfig {
    MetaserverConfig {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.to_path_buf(),
        database_url: Some(url.to_string()),
        heartbeat_seconds: 0.2,
        heartbeat_timeout_seconds: 3.0,
        ..MetaserverConfig::default()
    }
}

/// Waits up to 20 s for `condition`.
fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..2000 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what} did not happen within 20 s");
}

fn square(client: &GridClient, n: usize, seed: u64) {
    let a = matrix(n, seed);
    let mut c = vec![0.0; n * n];
    client
        .call(
            "mmul",
            &mut [(n as i32).into(), (&a).into(), (&a).into(), (&mut c).into()],
        )
        .unwrap();
    assert_eq!(c, local_mmul(n, &a, &a));
}

#[test]
fn a_standby_metaserver_takes_over_and_the_grid_keeps_computing() {
    ensure_executables();
    let postgres = LocalPostgres::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let first = rt
        .block_on(ninf_metaserver::bind(metaserver_config(
            &dir.path().join("a"),
            &postgres.url,
        )))
        .unwrap();
    eventually("the first metaserver's election", || {
        first.metaserver.is_active()
    });
    let second = rt
        .block_on(ninf_metaserver::bind(metaserver_config(
            &dir.path().join("b"),
            &postgres.url,
        )))
        .unwrap();
    // A standby answers nothing but that it is one.
    let refused = rt.block_on(async {
        let channel = ninf_proto::net::connect(&second.address, None, Default::default())
            .await
            .unwrap();
        v1::scheduling_client::SchedulingClient::new(channel)
            .status(v1::StatusRequest {
                recent_graphs: 0,
                data: false,
                ..Default::default()
            })
            .await
            .unwrap_err()
    });
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(
        refused.message().contains("standby"),
        "{}",
        refused.message()
    );
    assert!(!second.metaserver.is_active());

    let list = format!("{},{}", first.address, second.address);
    let server_config = ServerConfig {
        listen: "127.0.0.1:0".into(),
        metaserver: Some(list.clone()),
        modules: vec![module("linpack")],
        ..ServerConfig::default()
    };
    let info = v1::ServerInfo {
        mflops: 1000.0,
        cpus: 1,
        ..Default::default()
    };
    let server = rt
        .block_on(ninf_compute_server::bind(&server_config, info))
        .unwrap();
    let proxy = rt
        .block_on(ninf_client_proxy::bind(ProxyConfig {
            listen: "127.0.0.1:0".into(),
            ..ProxyConfig::new(list)
        }))
        .unwrap();
    let up = |metaserver: &ninf_metaserver::Metaserver| {
        let status = rt.block_on(metaserver.status(10)).unwrap();
        status.servers.iter().filter(|s| s.up).count()
    };
    eventually("the server's registration", || up(&first.metaserver) == 1);
    let client = GridClient::connect(&proxy.address).unwrap();
    square(&client, 16, 1);
    // A handle kept on the grid is in the shared resource DB, not the active one's memory.
    let kept_value: Vec<f64> = (0..256).map(f64::from).collect();
    let kept = client
        .put(&kept_value, &[], ninf::grid::DataMode::Persistent)
        .unwrap();

    // The active metaserver stops: the standby takes the lock, the registry the DB holds
    // and the server's heartbeats, and the proxy's next schedule goes to it.
    rt.block_on(first.stop()).unwrap();
    eventually("the standby's take-over", || second.metaserver.is_active());
    square(&client, 16, 2);
    let mut back = vec![0.0; kept_value.len()];
    client.get(&kept, &mut back).unwrap();
    assert_eq!(back, kept_value, "the handle survived the fail-over");
    assert_eq!(client.data().unwrap()[0].data, kept);
    client.free(&kept).unwrap();
    let status = rt.block_on(second.metaserver.status(10)).unwrap();
    assert_eq!(status.servers.len(), 1);
    assert!(status.servers[0].up);
    // Both graphs are in the shared resource DB, the first placed by the other metaserver.
    let done: Vec<&str> = status.graphs.iter().map(|g| g.state.as_str()).collect();
    assert_eq!(done, vec!["done", "done"]);

    rt.block_on(async {
        proxy.stop().await.unwrap();
        server.stop().await.unwrap();
        second.stop().await.unwrap();
    });
}
