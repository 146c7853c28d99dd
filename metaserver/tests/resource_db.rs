//! The registry under a fake clock, and the resource DB (SQLite and PostgreSQL) across a
//! reopen and with retention.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::linpack;
use ninf_metaserver::db::{
    ActualRecord, EdgeRecord, GraphRecord, NewGraph, PlacementRecord, ResourceDb, Retention,
    StoredLink, StoredLoad,
};
use ninf_metaserver::{CLIENT, Registry};
use ninf_proto::v1;
use ninf_scheduling::{Link, Location};

fn info(mflops: f64, processors: u32) -> v1::ServerInfo {
    v1::ServerInfo {
        mflops,
        processors,
        cpus: 2,
        ..Default::default()
    }
}

fn load(running: u32, queued: u32) -> v1::LoadSample {
    v1::LoadSample {
        running_jobs: running,
        queued_jobs: queued,
        ..Default::default()
    }
}

#[test]
fn a_server_is_down_once_its_heartbeats_stop_and_up_when_they_resume() {
    let mut registry = Registry::new(4, 5.0, 1000.0);
    registry.register(1, "a:1", info(500.0, 2), &linpack(), 100.0);
    registry.register(2, "b:1", info(0.0, 1), &linpack(), 100.0);
    let view = registry.grid_view(104.0);
    assert!(view.servers.iter().all(|s| s.up));
    assert_eq!(view.servers[0].flops_per_processor, 500e6);
    // No benchmark figure: the configured default.
    assert_eq!(view.servers[1].flops_per_processor, 1000e6);
    assert!(view.servers[0].functions.contains("dgefa"));
    assert!(registry.heartbeat("a:1", Some(&load(1, 2)), 104.0));
    let view = registry.grid_view(106.0);
    assert_eq!((view.servers[0].up, view.servers[1].up), (true, false));
    assert_eq!(registry.peers("a:1", 106.0), Vec::<String>::new());
    assert_eq!(registry.peers("b:1", 106.0), vec!["a:1".to_string()]);
    assert!(
        !registry.heartbeat("c:1", None, 106.0),
        "unknown servers are told to register"
    );
    assert!(registry.heartbeat("b:1", None, 107.0));
    assert!(registry.grid_view(107.0).servers[1].up);
}

#[test]
fn a_heartbeats_peers_are_a_window_that_moves_over_every_other_server_in_turn() {
    let mut registry = Registry::new(10, 5.0, 1000.0);
    let names: Vec<String> = (0..10).map(|i| format!("s{i}:1")).collect();
    for (i, name) in names.iter().enumerate() {
        registry.register(i as i64, name, info(500.0, 1), &linpack(), 100.0);
    }
    // s7 is down: it is nobody's peer.
    for name in names.iter().filter(|n| *n != "s7:1") {
        assert!(registry.heartbeat(name, None, 104.0));
    }
    let now = 106.0;
    assert_eq!(
        registry.peers_to_probe("s2:1", now, 3, 0),
        ["s3:1", "s4:1", "s5:1"]
    );
    assert_eq!(
        registry.peers_to_probe("s2:1", now, 3, 1),
        ["s6:1", "s8:1", "s9:1"]
    );
    // Over enough turns a server is shown every peer that is up, and never itself.
    let mut seen = std::collections::BTreeSet::new();
    for turn in 0..10 {
        let window = registry.peers_to_probe("s2:1", now, 3, turn);
        assert!(window.len() <= 3);
        seen.extend(window);
    }
    let others: std::collections::BTreeSet<String> = names
        .iter()
        .filter(|n| *n != "s2:1" && *n != "s7:1")
        .cloned()
        .collect();
    assert_eq!(seen, others);
    // A window as large as the grid is every peer that is up.
    assert_eq!(registry.peers_to_probe("s9:1", now, 20, 5).len(), 8);
}

#[test]
fn history_keeps_the_latest_samples_and_adds_the_proxys_measurements() {
    let mut registry = Registry::new(3, 5.0, 1000.0);
    registry.register(1, "a:1", info(500.0, 2), &linpack(), 0.0);
    registry.register(2, "b:1", info(500.0, 2), &linpack(), 0.0);
    for jobs in 0..5 {
        registry.heartbeat("a:1", Some(&load(jobs, 0)), 1.0);
    }
    let link = |t: f64| Link {
        throughput: t,
        latency: 0.001,
    };
    registry.add_link("a:1", "b:1", link(1e6));
    registry.add_link("a:1", "b:1", link(f64::NAN));
    registry.add_link("a:1", "nowhere:1", link(3e6));
    let history = registry.history(&[("b:1".to_string(), link(2e6))]);
    assert_eq!(history.load[0], vec![2.0, 3.0, 4.0]);
    // A gang-scheduled server's sample: 2 busy rows of 2 processors and one queued job.
    let gang = v1::LoadSample {
        running_jobs: 3,
        queued_jobs: 1,
        processors: 2,
        busy_rows: 2,
        max_rows: 4,
        ..Default::default()
    };
    registry.heartbeat("b:1", Some(&gang), 2.0);
    assert_eq!(
        registry.history(&[]).load[1],
        vec![5.0],
        "demand in processors: rows x processors + queued"
    );
    assert!(history.load[1].is_empty());
    assert_eq!(
        history.links[&(Location::Server(0), Location::Server(1))],
        vec![link(1e6)],
        "the NaN sample was refused"
    );
    assert_eq!(
        history.links[&(Location::Client, Location::Server(1))],
        vec![link(2e6)]
    );
    assert_eq!(
        history.links.len(),
        2,
        "paths to unregistered servers are not schedulable"
    );
    assert_eq!(registry.latest_links().len(), 2);
    assert!(
        registry
            .latest_links()
            .iter()
            .all(|(from, _, _)| from != CLIENT)
    );
}

#[test]
fn a_bad_descriptor_is_refused_without_hiding_the_servers_other_routines() {
    let mut registry = Registry::new(3, 5.0, 1000.0);
    let mut routines = linpack();
    routines[0].calc_order = "n +".into();
    let rejected = registry.register(1, "a:1", info(1.0, 1), &routines, 0.0);
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].0, routines[0].name);
    let server = registry.get("a:1").unwrap();
    assert_eq!(server.routines.len(), routines.len() - 1);
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn registrations_and_history_survive_a_reopen_and_retention_bounds_them() {
    let dir = tempfile::tempdir().unwrap();
    registrations_and_history_on(&format!(
        "sqlite://{}",
        dir.path().join("meta.db").display()
    ));
}

#[test]
fn on_postgresql_registrations_and_history_survive_a_reopen_and_retention_bounds_them() {
    let postgres = ninf_grid::postgres::LocalPostgres::start().unwrap();
    registrations_and_history_on(&postgres.url);
}

fn registrations_and_history_on(url: &str) {
    let rt = runtime();
    rt.block_on(async {
        let db = ResourceDb::open(url).await.unwrap();
        let id = db
            .register("a:1", &info(750.0, 2), &linpack(), 10.0)
            .await
            .unwrap();
        // Registering again replaces, keeping the id.
        let again = v1::ServerInfo {
            quantum_seconds: 0.05,
            bulk_local: "ninf-bulk-0123456789abcdef0123456789abcdef".into(),
            ..info(800.0, 2)
        };
        assert_eq!(
            db.register("a:1", &again, &linpack(), 11.0).await.unwrap(),
            id
        );
        for t in 0..5 {
            let sample = StoredLoad {
                time: 20.0 + f64::from(t),
                load: f64::from(t),
                load_average: 0.5,
                free_memory_bytes: 1 << 30,
                stored_bytes: 0,
            };
            db.heartbeat(id, sample).await.unwrap();
        }
        // Heartbeats written together, out of order: every sample is kept, and the server's
        // last heartbeat is the latest of them.
        let sample = |time: f64, load: f64| StoredLoad {
            time,
            load,
            load_average: 0.5,
            free_memory_bytes: 1 << 30,
            stored_bytes: 7,
        };
        db.heartbeats(&[(id, sample(24.5, 5.0)), (id, sample(24.2, 6.0))])
            .await
            .unwrap();
        db.add_links(&[StoredLink {
            from: "a:1".into(),
            to: "b:1".into(),
            throughput: 1e8,
            latency: 1e-4,
            time: 21.0,
        }])
        .await
        .unwrap();
        for g in 0..3u32 {
            let graph = GraphRecord {
                label: format!("g{g}"),
                proxy: "p".into(),
                scheduler: "flow".into(),
                predictor: "latest".into(),
                tasks: 1,
                edges: 0,
                created: 30.0,
                predicted_makespan: 1.0,
                inter_server_ratio: 0.0,
                request_id: String::new(),
            };
            let placement = PlacementRecord {
                task: 0,
                label: "mmul#0".into(),
                function: "mmul".into(),
                server_address: "a:1".into(),
                processors: 1,
                predicted_start: 0.0,
                predicted_finish: 1.0,
            };
            let graph_id = record_one(&db, graph, vec![placement], vec![]).await;
            let actual = ActualRecord {
                task: 0,
                start: 0.1,
                finish: 0.9,
                compute_seconds: 0.7,
                stopped_seconds: 0.0,
                fetch_seconds: 0.0,
                queue_seconds: 0.0,
            };
            db.record_actuals(graph_id, 0.95, "", &[actual])
                .await
                .unwrap();
        }
        db.close().await;
    });
    rt.block_on(async {
        let db = ResourceDb::open(url).await.unwrap();
        let servers = db.servers().await.unwrap();
        assert_eq!(servers.len(), 1);
        assert_eq!(servers[0].address, "a:1");
        assert_eq!(servers[0].info.mflops, 800.0);
        assert_eq!(servers[0].info.quantum_seconds, 0.05);
        assert_eq!(
            servers[0].info.bulk_local,
            "ninf-bulk-0123456789abcdef0123456789abcdef"
        );
        assert_eq!(servers[0].last_heartbeat, 24.5);
        assert_eq!(servers[0].routines.len(), linpack().len());
        let recent: Vec<f64> = db
            .recent_load(servers[0].id, 3)
            .await
            .unwrap()
            .iter()
            .map(|s| s.load)
            .collect();
        assert_eq!(recent, vec![4.0, 6.0, 5.0]);
        let graphs = db.recent_graphs(10).await.unwrap();
        assert_eq!(graphs.len(), 3);
        assert_eq!(
            (graphs[0].label.as_str(), graphs[0].state.as_str()),
            ("g2", "done")
        );
        let placements = db.placements(graphs[0].graph_id).await.unwrap();
        assert_eq!(placements[0].actual_finish, Some(0.9));
        // Keep samples newer than t = 22.5 and the 2 latest graphs.
        let retention = Retention {
            samples: Duration::from_secs_f64(10.0),
            graphs: 2,
        };
        db.prune(retention, 32.5).await.unwrap();
        let (load, network, graphs, placements) = db.history_sizes().await.unwrap();
        assert_eq!((load, network, graphs, placements), (4, 0, 2, 2));
        a_request_asked_again_supersedes_its_first_graph(&db).await;
        a_large_graph_keeps_every_placement_edge_and_actual_exactly(&db).await;
        a_backlog_of_samples_is_pruned_in_steps_to_the_cutoff(&db).await;
        graphs_recorded_together_are_all_written_or_none(&db).await;
        use_marks_written_together_keep_each_handles_latest(&db).await;
    });
}

/// Records one graph as the metaserver does, under the id after the last; returns it.
async fn record_one(
    db: &ResourceDb,
    graph: GraphRecord,
    placements: Vec<PlacementRecord>,
    edges: Vec<EdgeRecord>,
) -> u64 {
    let id = db.last_graph_id().await.unwrap() + 1;
    let new = NewGraph {
        id,
        graph,
        placements,
        edges,
    };
    db.record_graphs(&[new]).await.unwrap();
    id
}

/// Graphs the metaserver recorded in one commit each keep the id it gave them; a batch in
/// which one graph cannot be written (its id is taken) writes none of its graphs.
async fn graphs_recorded_together_are_all_written_or_none(db: &ResourceDb) {
    let last = db.last_graph_id().await.unwrap();
    let new = |id: u64, label: &str| NewGraph {
        id,
        graph: GraphRecord {
            label: label.into(),
            proxy: "p".into(),
            scheduler: "flow".into(),
            predictor: "latest".into(),
            tasks: 1,
            edges: 0,
            created: 60.0,
            predicted_makespan: 1.0,
            inter_server_ratio: 0.0,
            request_id: String::new(),
        },
        placements: vec![PlacementRecord {
            task: 0,
            label: format!("{label}#0"),
            function: "noop".into(),
            server_address: "a:1".into(),
            processors: 1,
            predicted_start: 0.0,
            predicted_finish: 1.0,
        }],
        edges: vec![],
    };
    // Out of order, as commits of graphs placed one after the other may land.
    let batch = [new(last + 2, "second"), new(last + 1, "first")];
    db.record_graphs(&batch).await.unwrap();
    assert_eq!(db.last_graph_id().await.unwrap(), last + 2);
    let failing = [new(last + 3, "third"), new(last + 1, "again")];
    let error = db.record_graphs(&failing).await.unwrap_err();
    assert!(
        error.to_string().to_lowercase().contains("unique")
            || error.to_string().contains("duplicate"),
        "{error}"
    );
    assert_eq!(db.last_graph_id().await.unwrap(), last + 2, "none written");
    let graphs = db.recent_graphs(2).await.unwrap();
    let written: Vec<(u64, &str)> = graphs
        .iter()
        .map(|g| (g.graph_id, g.label.as_str()))
        .collect();
    assert_eq!(written, [(last + 2, "second"), (last + 1, "first")]);
    assert_eq!(db.placements(last + 1).await.unwrap()[0].label, "first#0");
}

/// More samples older than the cutoff than one pruning step deletes, and more of them at one
/// time than a step holds: every one of them goes, and every newer one stays.
async fn a_backlog_of_samples_is_pruned_in_steps_to_the_cutoff(db: &ResourceDb) {
    let sample = |i: u32, time: f64| StoredLink {
        from: format!("s{}:1", i % 97),
        to: format!("s{}:1", i % 89),
        throughput: 1e6 + f64::from(i),
        latency: 0.001,
        time,
    };
    let mut samples: Vec<StoredLink> = (0..6_000).map(|i| sample(i, 100.0)).collect();
    samples.extend((0..12_000).map(|i| sample(i, 100.0 + f64::from(i + 1) / 1000.0)));
    db.add_links(&samples).await.unwrap();
    let retention = Retention {
        samples: Duration::from_secs_f64(10.0),
        graphs: 1000,
    };
    db.prune(retention, 116.0005).await.unwrap();
    let (_, network, _, _) = db.history_sizes().await.unwrap();
    assert_eq!(network, 6_000, "the samples from t = 106.001 to 112");
    let kept = db.links_since(0.0).await.unwrap();
    assert_eq!(kept.first().map(|l| l.time), Some(100.0 + 6_001.0 / 1000.0));
    assert_eq!(kept.last().map(|l| l.time), Some(112.0));
}

/// A graph of 2,500 tasks (more rows than one statement's parameters could carry): every
/// placement, edge and actual time comes back as written, times to the last bit, names
/// with quotes and non-ASCII letters intact, an infinite prediction stored as the largest
/// finite time, and a task without an actual left without one.
async fn a_large_graph_keeps_every_placement_edge_and_actual_exactly(db: &ResourceDb) {
    let n = 2_500u32;
    let record = GraphRecord {
        label: "large".into(),
        proxy: "p".into(),
        scheduler: "flow".into(),
        predictor: "latest".into(),
        tasks: n,
        edges: n - 1,
        created: 50.0,
        predicted_makespan: 1.0,
        inter_server_ratio: 0.0,
        request_id: String::new(),
    };
    let time = |t: u32| f64::from(t) / 3.0 + 1e-9;
    let placements: Vec<PlacementRecord> = (0..n)
        .map(|t| PlacementRecord {
            task: t,
            label: format!("mmul#{t} \"ωの\""),
            function: "mmul".into(),
            server_address: format!("s{}:1", t % 3),
            processors: 1 + t % 4,
            predicted_start: time(t),
            predicted_finish: if t == 7 { f64::INFINITY } else { time(t + 1) },
        })
        .collect();
    let edges: Vec<EdgeRecord> = (1..n)
        .map(|t| EdgeRecord {
            from_task: t - 1,
            to_task: t,
            bytes: u64::from(t) << 20,
        })
        .collect();
    let graph = record_one(db, record, placements.clone(), edges.clone()).await;
    let actuals: Vec<ActualRecord> = (1..n)
        .map(|t| ActualRecord {
            task: t,
            start: time(t) * 1.5,
            finish: time(t) * 2.5,
            compute_seconds: 0.1 * f64::from(t),
            stopped_seconds: 0.01 * f64::from(t),
            fetch_seconds: 0.001 * f64::from(t),
            queue_seconds: 0.002 * f64::from(t),
        })
        .collect();
    db.record_actuals(graph, 9.5, "", &actuals).await.unwrap();

    let rows = db.placements(graph).await.unwrap();
    assert_eq!(rows.len(), n as usize);
    for (row, placed) in rows.iter().zip(&placements) {
        assert_eq!(row.task, placed.task);
        assert_eq!(row.label, placed.label);
        assert_eq!(row.function, placed.function);
        assert_eq!(row.server_address, placed.server_address);
        assert_eq!(row.processors, placed.processors);
        assert_eq!(
            row.predicted_start.to_bits(),
            placed.predicted_start.to_bits()
        );
        let finish = if placed.task == 7 {
            f64::MAX
        } else {
            placed.predicted_finish
        };
        assert_eq!(row.predicted_finish.to_bits(), finish.to_bits());
        if row.task == 0 {
            assert_eq!((row.actual_start, row.actual_finish), (None, None));
            assert_eq!((row.compute_seconds, row.stopped_seconds), (None, None));
            assert_eq!((row.fetch_seconds, row.queue_seconds), (None, None));
        } else {
            let actual = &actuals[row.task as usize - 1];
            assert_eq!(
                row.actual_start.map(f64::to_bits),
                Some(actual.start.to_bits())
            );
            assert_eq!(
                row.actual_finish.map(f64::to_bits),
                Some(actual.finish.to_bits())
            );
            assert_eq!(
                (row.compute_seconds, row.stopped_seconds),
                (Some(actual.compute_seconds), Some(actual.stopped_seconds))
            );
            assert_eq!(
                (row.fetch_seconds, row.queue_seconds),
                (Some(actual.fetch_seconds), Some(actual.queue_seconds))
            );
        }
    }
    assert_eq!(db.graph_edges(graph).await.unwrap(), edges);
}

/// A proxy asks again, under the same request id, for a graph whose first placement it never
/// had the answer to: the first record is failed as superseded; another proxy's request of
/// the same id is not touched.
async fn a_request_asked_again_supersedes_its_first_graph(db: &ResourceDb) {
    let graph = |label: &str, proxy: &str| GraphRecord {
        label: label.into(),
        proxy: proxy.into(),
        scheduler: "flow".into(),
        predictor: "latest".into(),
        tasks: 1,
        edges: 0,
        created: 40.0,
        predicted_makespan: 1.0,
        inter_server_ratio: 0.0,
        request_id: "r1".into(),
    };
    for (label, proxy) in [("other", "q"), ("first", "p"), ("again", "p")] {
        record_one(db, graph(label, proxy), vec![], vec![]).await;
    }
    let graphs = db.recent_graphs(3).await.unwrap();
    let states: Vec<(&str, &str, &str)> = graphs
        .iter()
        .map(|g| (g.label.as_str(), g.state.as_str(), g.error.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("again", "running", ""),
            ("first", "failed", ninf_metaserver::db::SUPERSEDED),
            ("other", "running", ""),
        ]
    );
}

/// Use marks of many lookups written in one commit: each handle keeps its latest mark, the
/// order eviction reads; a mark of a handle freed meanwhile is dropped, not an error.
async fn use_marks_written_together_keep_each_handles_latest(db: &ResourceDb) {
    for id in ["h1", "h2"] {
        let info = v1::DataInfo {
            id: id.into(),
            owner: "p".into(),
            spec: Some(v1::DataSpec {
                bytes: 800,
                ..Default::default()
            }),
            lease_until: 1e12,
            created: 10.0,
            ..Default::default()
        };
        db.insert_data(&info).await.unwrap();
        let copy = v1::DataCopy {
            server: "a:1".into(),
            object_id: format!("o-{id}"),
        };
        db.add_data_copy(id, &copy, false).await.unwrap();
    }
    let marks = [
        ("h1".to_string(), 30.0),
        ("h2".to_string(), 20.0),
        ("h1".to_string(), 25.0),
        ("freed".to_string(), 40.0),
    ];
    db.touch_data_all(&marks).await.unwrap();
    let mut kept: Vec<(String, f64)> = db
        .kept_on("a:1")
        .await
        .unwrap()
        .into_iter()
        .map(|k| (k.handle, k.used_at))
        .collect();
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(kept, [("h1".to_string(), 30.0), ("h2".to_string(), 20.0)]);
}
