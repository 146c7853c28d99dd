//! The metaserver's event log and the dashboard's API over HTTP: a server registering again
//! with other routines is a `reloaded` event naming them, the faults a proxy reports become
//! events of their graph, a graph's edges are kept for its Gantt chart, and the dashboard
//! refuses requests without the grid's token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{Read, Write};

use crate::common::{linpack, registration};
use ninf_metaserver::MetaserverConfig;
use ninf_proto::v1;

/// A chain of two products: task 0's C feeds task 1's A.
fn chain() -> v1::TaskGraph {
    let task = |i: usize| v1::GraphTask {
        label: format!("mmul#{i}"),
        function: "mmul".into(),
        scalars: HashMap::from([("n".to_string(), 50)]),
        client_out_bytes: 20_000,
        data: Vec::new(),
    };
    v1::TaskGraph {
        tasks: vec![task(0), task(1)],
        edges: vec![v1::GraphEdge {
            from_task: 0,
            from_parameter: 3,
            to_task: 1,
            to_parameter: 1,
            bytes: 20_000,
        }],
    }
}

/// GET `path` on `address` with an optional bearer token: (status line, body).
fn get(address: &str, path: &str, token: Option<&str>) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: ninf\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_registrations_and_graphs_reach_the_event_log_and_the_dashboard() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let token = ninf_proto::net::auth::generate_token(&token_file).unwrap();
    let running = ninf_metaserver::bind(MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        scheduler: "round-robin".into(),
        auth_token_file: Some(token_file),
        dashboard_listen: Some("127.0.0.1:0".into()),
        ..MetaserverConfig::default()
    })
    .await
    .unwrap();
    let metaserver = running.metaserver.clone();
    metaserver
        .register(registration("a:1", linpack()))
        .await
        .unwrap();
    metaserver
        .register(registration("b:1", linpack()))
        .await
        .unwrap();
    let without_dgefa: Vec<_> = linpack()
        .into_iter()
        .filter(|f| f.name != "dgefa")
        .collect();
    metaserver
        .register(registration("a:1", without_dgefa))
        .await
        .unwrap();

    let placed = metaserver
        .schedule(v1::ScheduleRequest {
            graph: Some(chain()),
            proxy: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let graph = placed.graph_id;
    let incident = v1::GraphIncident {
        kind: "retry".into(),
        task: 1,
        server: "b:1".into(),
        detail: "connection refused".into(),
        at: 0.25,
    };
    metaserver
        .report_actuals(v1::ActualsReport {
            graph_id: graph,
            makespan: 0.5,
            error: "mmul#1 failed 3 times".into(),
            incidents: vec![incident],
            ..Default::default()
        })
        .await
        .unwrap();

    let events = metaserver.events_since(0, 100);
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e.kind.as_str(), e.server.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("registered", "a:1"),
            ("registered", "b:1"),
            ("reloaded", "a:1"),
            ("retry", "b:1"),
            ("graph-failed", ""),
        ]
    );
    assert!(
        events[2].message.contains("removed [dgefa]"),
        "{}",
        events[2].message
    );
    assert!(events[3].message.contains("connection refused"));
    assert_eq!(events[3].graph, Some(graph));
    assert_eq!(metaserver.events_since(3, 100).len(), 2, "only the newer");

    // The dashboard: refused without the token; with it, the graph's page has its edge.
    let dashboard = running.dashboard.as_ref().unwrap().address.clone();
    let (status, body) = get(&dashboard, "/api/events", None);
    assert!(status.contains("401"), "{status}");
    assert!(body.contains("?token="), "{body}");
    let (status, body) = get(&dashboard, &format!("/api/graphs/{graph}"), Some(&token));
    assert!(status.contains("200"), "{status} {body}");
    let gantt: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(gantt["graph"]["state"], "failed");
    assert_eq!(gantt["edges"][0]["from_task"], 0);
    assert_eq!(gantt["edges"][0]["bytes"], 20_000);
    let crosses = placed.placements[0].server != placed.placements[1].server;
    assert_eq!(gantt["edges"][0]["crosses"], crosses);
    let (status, _) = get(&dashboard, "/api/graphs/999", Some(&token));
    assert!(status.contains("404"), "{status}");
    let (_, body) = get(&dashboard, "/", Some(&token));
    assert!(
        body.contains("/assets/app.js"),
        "the page is served: {body}"
    );
    running.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_lists_each_servers_modules_those_it_could_not_start_and_its_site() {
    let dir = tempfile::tempdir().unwrap();
    let running = ninf_metaserver::bind(MetaserverConfig {
        data_dir: dir.path().to_path_buf(),
        ..MetaserverConfig::default()
    })
    .await
    .unwrap();
    let metaserver = running.metaserver.clone();
    let mut request = registration("a:1", linpack());
    request.failed_modules = vec![v1::FailedModule {
        executable: "/srv/ninf-exec-broken".into(),
        reason: "it exited at start-up (exit status: 1)".into(),
    }];
    metaserver.register(request).await.unwrap();
    let status = metaserver.status(0).await.unwrap();
    let server = &status.servers[0];
    assert_eq!(server.modules, ["linpack"]);
    assert_eq!(server.failed_modules.len(), 1);
    assert_eq!(server.failed_modules[0].executable, "/srv/ninf-exec-broken");
    assert_eq!(server.site, "a", "no site named: its host's");
    // A registration again without the failure clears it.
    metaserver
        .register(registration("a:1", linpack()))
        .await
        .unwrap();
    let status = metaserver.status(0).await.unwrap();
    assert!(status.servers[0].failed_modules.is_empty());
    // The site a server names is listed as it named it; with none, its address's /24.
    let mut named = registration("10.1.2.3:1", linpack());
    if let Some(info) = named.info.as_mut() {
        info.site = "tokyo".into();
    }
    metaserver.register(named).await.unwrap();
    metaserver
        .register(registration("10.1.2.4:1", linpack()))
        .await
        .unwrap();
    let status = metaserver.status(0).await.unwrap();
    let site_of = |address: &str| {
        let server = status.servers.iter().find(|s| s.address == address);
        server.map(|s| s.site.clone())
    };
    assert_eq!(site_of("10.1.2.3:1").as_deref(), Some("tokyo"));
    assert_eq!(site_of("10.1.2.4:1").as_deref(), Some("10.1.2.0/24"));
    running.stop().await.unwrap();
}
