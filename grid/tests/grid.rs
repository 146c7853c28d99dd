//! End to end on loopback with real processes: an embedded grid (metaserver on SQLite, proxy,
//! compute servers running the real executables) and the client library's transactions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{
    ExternalServer, TestGrid, local_mmul, matrix, max_difference, sample_sum, scrape,
    solved_by_sending,
};
use ninf::grid::{GridClient, TxArg};
use ninf_grid::workloads;
use ninf_proto::net::tls::GridTls;
use ninf_proto::v1;

#[test]
fn the_seeds_mmul_transaction_builds_its_three_node_graph_and_computes_g() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let client = grid.client("flow");
    let n = 20usize;
    let (a, b, c, d) = (matrix(n, 1), matrix(n, 2), matrix(n, 3), matrix(n, 4));
    let (mut e, mut f, mut g) = (vec![0.0; n * n], vec![0.0; n * n], vec![0.0; n * n]);
    let mut tx = client.transaction_begin();
    let [ha, hb, hc, hd] = [&a, &b, &c, &d].map(|m| tx.input(m));
    let [he, hf, hg] = [&mut e, &mut f, &mut g].map(|m| tx.buffer(m));
    let nn = TxArg::from(n as i64);
    tx.call("mmul", &[nn.clone(), ha.into(), hb.into(), he.into()])
        .unwrap();
    tx.call("mmul", &[nn.clone(), hc.into(), hd.into(), hf.into()])
        .unwrap();
    tx.call("mmul", &[nn, he.into(), hf.into(), hg.into()])
        .unwrap();
    let graph = tx.graph();
    assert_eq!(graph.tasks, vec!["mmul#0", "mmul#1", "mmul#2"]);
    let bytes = (8 * n * n) as u64;
    assert_eq!(
        graph.edges,
        vec![
            (0, "C".to_string(), 2, "A".to_string(), bytes),
            (1, "C".to_string(), 2, "B".to_string(), bytes),
        ]
    );
    let plan = tx.end().unwrap();
    assert_eq!(plan.edges, vec![(0, 2), (1, 2)]);
    assert_eq!(plan.tasks.len(), 3);
    assert!(plan.tasks.iter().all(|t| !t.server.is_empty()));
    let expected_e = local_mmul(n, &a, &b);
    let expected_f = local_mmul(n, &c, &d);
    assert_eq!(
        e, expected_e,
        "E comes back: the client passed it as a buffer"
    );
    assert_eq!(f, expected_f);
    assert_eq!(g, local_mmul(n, &expected_e, &expected_f));
    grid.assert_no_leftovers();
    // The metaserver recorded the graph, its placements and their actual times.
    let status = grid.status();
    let record = &status.graphs[0];
    assert_eq!(
        (record.tasks, record.edges, record.state.as_str()),
        (3, 2, "done")
    );
    let placements = grid
        .runtime
        .block_on(grid.grid().metaserver.db().placements(plan.graph_id))
        .unwrap();
    assert_eq!(placements.len(), 3);
    for (p, t) in placements.iter().zip(&plan.tasks) {
        assert_eq!(p.server_address, t.server);
        assert!(p.actual_finish.unwrap() >= p.actual_start.unwrap());
    }
}

#[test]
fn flow_keeps_every_pair_on_one_server_and_every_scheduler_gives_the_same_numbers() {
    let grid = TestGrid::start(vec![1, 1, 1], |_| {});
    let n = 60;
    let flow = workloads::pairs(&grid.client("flow"), n, 5, 7).unwrap();
    assert_eq!(flow.plan.inter_server_ratio, 0.0);
    for pair in flow.plan.tasks.chunks(2) {
        assert_eq!(
            pair[0].server, pair[1].server,
            "{} and {} split",
            pair[0].label, pair[1].label
        );
    }
    assert_eq!(
        flow.max_abs_error, 0.0,
        "FLOW differs from the local computation"
    );
    // Round-robin deals dgefa and dgesl of a pair to different servers.
    let round_robin = workloads::pairs(&grid.client("round-robin"), n, 5, 7).unwrap();
    assert!(round_robin.plan.inter_server_ratio > 0.0);
    for scheduler in ["simple", "round-robin", "random"] {
        let run = workloads::pairs(&grid.client(scheduler), n, 5, 7).unwrap();
        assert_eq!(
            run.max_abs_error, 0.0,
            "{scheduler} differs from the local computation"
        );
    }
    let cascade_flow = workloads::cascade(&grid.client("flow"), 30, 3).unwrap();
    let cascade_simple = workloads::cascade(&grid.client("simple"), 30, 3).unwrap();
    assert_eq!(cascade_flow.max_abs_error, 0.0);
    assert_eq!(cascade_simple.max_abs_error, 0.0);
    assert_eq!(cascade_flow.plan.edges.len(), 6);
    grid.assert_no_leftovers();
}

#[test]
fn staged_uploads_feed_their_calls_with_the_same_results_and_leave_nothing_behind() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    // At n = 100 each matrix is 80 kB, above the staging threshold: the eight inputs of the
    // cascade's first stage are uploaded ahead of their calls.
    let staged = workloads::cascade(&grid.client("staged-flow"), 100, 5).unwrap();
    assert_eq!(staged.max_abs_error, 0.0, "staged cascade differs");
    assert_eq!(staged.plan.scheduler, "staged-flow");
    assert_eq!(staged.plan.staged_uploads, 8);
    // Their time is reported, since it is in no call's timing.
    assert!(staged.plan.staged_upload_seconds > 0.0);
    let plain = workloads::cascade(&grid.client("flow"), 100, 5).unwrap();
    assert_eq!(plain.plan.staged_uploads, 0);
    assert_eq!(plain.plan.staged_upload_seconds, 0.0);
    assert_eq!(plain.max_abs_error, 0.0);
    // Pairs: each dgefa's 80 kB matrix (INOUT) is staged; dgesl's 800-byte vector is not.
    let pairs = workloads::pairs(&grid.client("staged-flow"), 100, 5, 3).unwrap();
    assert_eq!(pairs.max_abs_error, 0.0, "staged pairs differ");
    assert_eq!(pairs.plan.staged_uploads, 5);
    // Below the threshold nothing is staged.
    let small = workloads::cascade(&grid.client("staged-flow"), 30, 5).unwrap();
    assert_eq!(small.plan.staged_uploads, 0);
    assert_eq!(small.max_abs_error, 0.0);
    grid.assert_no_leftovers();
}

#[test]
fn staged_arrays_count_in_the_storage_quota_and_go_with_their_calls_when_it_is_full() {
    // The cascade at n = 100 keeps 6 intermediates of 80 kB (480 kB) and would stage its 8
    // inputs (640 kB more).
    let tight = TestGrid::start(vec![1, 1], |o| o.max_stored_bytes_per_client = 700_000);
    let run = workloads::cascade(&tight.client("staged-flow"), 100, 5).unwrap();
    assert_eq!(run.plan.staged_uploads, 0, "no room to stage");
    assert_eq!(run.max_abs_error, 0.0);
    tight.assert_no_leftovers();
    let roomy = TestGrid::start(vec![1, 1], |o| o.max_stored_bytes_per_client = 1_200_000);
    let run = workloads::cascade(&roomy.client("staged-flow"), 100, 5).unwrap();
    assert_eq!(run.plan.staged_uploads, 8);
    assert_eq!(run.max_abs_error, 0.0);
    roomy.assert_no_leftovers();
}

#[test]
fn a_transaction_gives_the_same_results_as_the_calls_one_by_one() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let client = grid.client("simple");
    let n = 40usize;
    let a0: Vec<f64> = (0..n * n)
        .map(|i| {
            if i % (n + 1) == 0 {
                n as f64
            } else {
                ((i * 7) % 11) as f64 / 11.0
            }
        })
        .collect();
    let b0: Vec<f64> = (0..n).map(|i| i as f64).collect();
    // One by one: each call is a graph of one task, data back at the client in between.
    let (mut a1, mut ipvt1, mut x1) = (a0.clone(), vec![0i32; n], b0.clone());
    let order = n as i32;
    client
        .call(
            "dgefa",
            &mut [(&mut a1).into(), order.into(), (&mut ipvt1).into()],
        )
        .unwrap();
    client
        .call(
            "dgesl",
            &mut [
                (&a1).into(),
                order.into(),
                (&ipvt1).into(),
                (&mut x1).into(),
            ],
        )
        .unwrap();
    // In one transaction: the factors flow server to server.
    let (mut a2, mut ipvt2, mut x2) = (a0.clone(), vec![0i32; n], b0.clone());
    client
        .transaction(|tx| {
            let (a, ipvt, x) = (
                tx.buffer(&mut a2),
                tx.buffer(&mut ipvt2),
                tx.buffer(&mut x2),
            );
            tx.call("dgefa", &[a.into(), order.into(), ipvt.into()])?;
            tx.call("dgesl", &[a.into(), order.into(), ipvt.into(), x.into()])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(x1, x2);
    assert_eq!(a1, a2, "the factors dgefa left in `a` come back too");
    assert_eq!(ipvt1, ipvt2);
    grid.assert_no_leftovers();
}

#[test]
fn bad_calls_are_refused_where_they_are_made_and_nothing_runs() {
    let grid = TestGrid::start(vec![1], |_| {});
    let client = grid.client("flow");
    let n = 10usize;
    let a = matrix(n, 1);
    let short = vec![0.0; n];
    let mut c = vec![0.0; n * n];
    let mut tx = client.transaction_begin();
    let (ha, hs, hc) = (tx.input(&a), tx.input(&short), tx.buffer(&mut c));
    let error = tx
        .call(
            "mmul",
            &[TxArg::from(n as i64), ha.into(), hs.into(), hc.into()],
        )
        .unwrap_err();
    assert_eq!(error.kind, ninf::ErrorKind::BadArgument);
    assert!(
        error
            .message
            .contains("argument `B` of `mmul` has 10 elements, expected 100"),
        "{}",
        error.message
    );
    // An input registered read-only cannot receive a result.
    let error = tx
        .call(
            "mmul",
            &[TxArg::from(n as i64), ha.into(), ha.into(), ha.into()],
        )
        .unwrap_err();
    assert!(
        error
            .message
            .contains("argument `C` of `mmul` must be a mutable array"),
        "{}",
        error.message
    );
    let error = tx.call("no_such_routine", &[]).unwrap_err();
    assert_eq!(error.kind, ninf::ErrorKind::FunctionNotFound, "{error}");
    drop(tx);
    // A routine that fails inside a transaction fails the transaction, names the task, and
    // leaves nothing behind; the grid keeps serving.
    let mut out = vec![0.0; n * n];
    let error = client
        .transaction(|tx| {
            let (ha, hc) = (tx.input(&a), tx.buffer(&mut out));
            tx.call(
                "mmul",
                &[TxArg::from(n as i64), ha.into(), ha.into(), hc.into()],
            )?;
            tx.call("fail", &[TxArg::from(3)])?;
            Ok(())
        })
        .unwrap_err();
    assert!(error.message.contains("`fail#1`"), "{}", error.message);
    // The routine's own error: not retried elsewhere, reported as the routine's failure.
    assert_eq!(error.kind, ninf::ErrorKind::SessionFailed, "{error}");
    assert!(
        error.message.contains("selftest failure with code 3"),
        "{}",
        error.message
    );
    grid.assert_no_leftovers();
    let mut ok = vec![0.0; n * n];
    client
        .call(
            "mmul",
            &mut [
                (n as i32).into(),
                (&a).into(),
                (&a).into(),
                (&mut ok).into(),
            ],
        )
        .unwrap();
    assert_eq!(ok, local_mmul(n, &a, &a));
    assert_eq!(
        grid.status()
            .graphs
            .iter()
            .filter(|g| g.state == "failed")
            .count(),
        1
    );
}

#[test]
fn the_metaserver_refuses_graphs_that_disagree_with_the_idl() {
    let grid = TestGrid::start(vec![1], |_| {});
    let task = |n: i64| v1::GraphTask {
        label: format!("mmul n={n}"),
        function: "mmul".into(),
        scalars: [("n".to_string(), n)].into_iter().collect(),
        ..Default::default()
    };
    let schedule = |tasks: Vec<v1::GraphTask>, edges: Vec<v1::GraphEdge>| {
        let request = v1::ScheduleRequest {
            graph: Some(v1::TaskGraph { tasks, edges }),
            ..Default::default()
        };
        grid.runtime
            .block_on(grid.grid().metaserver.schedule(request))
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    let edge = |from: u32, to: u32, bytes: u64| v1::GraphEdge {
        from_task: from,
        from_parameter: 3,
        to_task: to,
        to_parameter: 1,
        bytes,
    };
    assert_eq!(
        schedule(vec![task(4), task(4)], vec![edge(0, 1, 128)]),
        Ok(())
    );
    let sizes = schedule(vec![task(4), task(5)], vec![edge(0, 1, 128)]).unwrap_err();
    assert!(
        sizes.contains("the producer's `C` has 128 bytes but the consumer's `A` needs 200 bytes"),
        "{sizes}"
    );
    let cycle = schedule(
        vec![task(4), task(4)],
        vec![edge(0, 1, 128), edge(1, 0, 128)],
    )
    .unwrap_err();
    assert!(cycle.contains("cycle"), "{cycle}");
    let stated = schedule(vec![task(4), task(4)], vec![edge(0, 1, 100)]).unwrap_err();
    assert!(
        stated.contains("the edge says 100 bytes but the interface gives 128"),
        "{stated}"
    );
    let unknown = schedule(
        vec![v1::GraphTask {
            label: "x".into(),
            function: "nope".into(),
            ..Default::default()
        }],
        vec![],
    )
    .unwrap_err();
    assert!(
        unknown.contains("no server has registered `nope`"),
        "{unknown}"
    );
    let wrong_direction = schedule(
        vec![task(4), task(4)],
        vec![v1::GraphEdge {
            from_parameter: 1,
            ..edge(0, 1, 128)
        }],
    )
    .unwrap_err();
    assert!(
        wrong_direction.contains("`A` is not an OUT or INOUT array of mmul"),
        "{wrong_direction}"
    );
    let missing_scalar = schedule(
        vec![v1::GraphTask {
            scalars: Default::default(),
            ..task(4)
        }],
        vec![],
    )
    .unwrap_err();
    assert!(missing_scalar.contains("`n`"), "{missing_scalar}");
}

#[test]
fn a_restarted_metaserver_keeps_registrations_and_a_silent_server_gets_no_tasks() {
    let mut grid = TestGrid::start(vec![1, 1], |o| {
        o.heartbeat_seconds = 0.1;
        o.heartbeat_timeout_seconds = 0.5;
    });
    let addresses = grid.grid().endpoints.servers.clone();
    let same_host_sockets = |status: &v1::GridStatus| -> BTreeMap<String, String> {
        status
            .servers
            .iter()
            .map(|s| (s.address.clone(), s.bulk_local.clone()))
            .collect()
    };
    let sockets = same_host_sockets(&grid.status());
    assert!(
        sockets.values().all(|name| name.starts_with("ninf-bulk-")),
        "{sockets:?}"
    );
    let grid_mut = grid.grid.as_mut().unwrap();
    grid.runtime
        .block_on(grid_mut.restart_metaserver())
        .unwrap();
    // Straight from the DB, before any heartbeat reaches the new process.
    let status = grid.status();
    // Servers register concurrently, so the DB's order is the order they reached it.
    let known: std::collections::BTreeSet<&str> =
        status.servers.iter().map(|s| s.address.as_str()).collect();
    assert_eq!(known, addresses.iter().map(String::as_str).collect());
    // The servers' same-host sockets too: the servers do not register again, and without
    // them a proxy on their host would send every call through the TCP bulk port.
    assert_eq!(same_host_sockets(&status), sockets);
    assert!(
        status
            .servers
            .iter()
            .all(|s| s.functions.contains(&"mmul".to_string()))
    );
    // Calls still work through the new metaserver.
    let n = 8usize;
    let a = matrix(n, 5);
    let mut c = vec![0.0; n * n];
    grid.client("flow")
        .call(
            "mmul",
            &mut [(n as i32).into(), (&a).into(), (&a).into(), (&mut c).into()],
        )
        .unwrap();
    assert_eq!(c, local_mmul(n, &a, &a));

    // Server 1 stops its heartbeats: it is marked down and gets nothing, even from a
    // scheduler that would otherwise alternate.
    grid.grid().servers[1].silence();
    let mut down = false;
    for _ in 0..200 {
        let status = grid.status();
        if status
            .servers
            .iter()
            .any(|s| s.address == addresses[1] && !s.up)
        {
            down = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(down, "the silent server was never marked down");
    let mut outputs = vec![vec![0.0; n * n]; 4];
    let plan = grid
        .client("round-robin")
        .transaction(|tx| {
            let ha = tx.input(&a);
            for out in outputs.iter_mut() {
                let hc = tx.buffer(out);
                tx.call(
                    "mmul",
                    &[TxArg::from(n as i64), ha.into(), ha.into(), hc.into()],
                )?;
            }
            Ok(())
        })
        .unwrap();
    assert!(
        plan.tasks.iter().all(|t| t.server == addresses[0]),
        "{plan}"
    );
    grid.assert_no_leftovers();
}

/// A peer that takes connections and never answers (as one cut off by a partition does, its
/// probes hanging until they time out) holds up only the measurement of the path to it:
/// the servers' heartbeats go on, and the metaserver never marks them down.
#[test]
fn a_peer_that_never_answers_its_probe_does_not_hold_up_the_heartbeats() {
    let grid = TestGrid::start(vec![1, 1], |o| {
        o.heartbeat_seconds = 0.1;
        // Roomy, for a loaded machine: a probe that held the heartbeats held them for good.
        o.heartbeat_timeout_seconds = 1.5;
        o.network_seconds = 0.2;
    });
    // Never accepted: the kernel completes the handshakes, and nothing ever answers.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hole_address = hole.local_addr().unwrap().to_string();
    let metaserver = grid.grid().metaserver.clone();
    let registration = v1::RegisterRequest {
        address: hole_address.clone(),
        info: Some(v1::ServerInfo {
            mflops: 1000.0,
            processors: 1,
            cpus: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    grid.runtime
        .block_on(metaserver.register(registration))
        .unwrap();
    // It beats, so the metaserver lists it up and hands it out as a peer to measure.
    let beats = grid.runtime.spawn(async move {
        loop {
            let beat = v1::HeartbeatRequest {
                address: hole_address.clone(),
                load: None,
            };
            let _ = metaserver.heartbeat(beat).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let servers = grid.grid().endpoints.servers.clone();
    // Three heartbeat timeouts, in which every server is asked to measure the path to it
    // again and again.
    for _ in 0..45 {
        std::thread::sleep(Duration::from_millis(100));
        let status = grid.status();
        let down: Vec<&str> = status
            .servers
            .iter()
            .filter(|s| servers.contains(&s.address) && !s.up)
            .map(|s| s.address.as_str())
            .collect();
        assert!(down.is_empty(), "marked down: {down:?}");
    }
    beats.abort();
    drop(hole);
}

/// A server that names its site in its configuration (`site = "..."`, as
/// docs/compute-server.md writes it) is listed in that site; one that names none, in its
/// address's /24.
#[test]
fn a_server_is_listed_in_the_site_its_configuration_names() {
    let grid = TestGrid::start(vec![1], |_| {});
    let sited = ExternalServer::start_with(&grid, &["linpack"], "sited", "site = \"tokyo-a\"");
    grid.runtime.block_on(grid.grid().wait_until_up(2)).unwrap();
    let status = grid
        .runtime
        .block_on(grid.grid().metaserver.status(0))
        .unwrap();
    let site_of = |address: &str| {
        let server = status.servers.iter().find(|s| s.address == address);
        server.map(|s| s.site.clone())
    };
    assert_eq!(site_of(&sited.address).as_deref(), Some("tokyo-a"));
    let local = &grid.grid().endpoints.servers[0];
    assert_eq!(site_of(local).as_deref(), Some("127.0.0.0/24"), "{local}");
}

/// `NINF_BLAS` in a compute server's environment reaches the executables it starts
/// (docs/compute-server.md, "The standard routines' kernels"): a server started with a
/// value the routines do not know fails the call naming it, and keeps serving; one started
/// with `faer` computes the product. Only the external servers offer `linpack` here.
#[test]
fn ninf_blas_in_a_servers_environment_chooses_its_routines_kernels() {
    let grid = TestGrid::start(vec![1], |o| {
        o.modules = vec![crate::common::module("selftest")]
    });
    let bogus = ExternalServer::start_with_env(
        &grid,
        &["linpack"],
        "bogus-blas",
        "",
        &[("NINF_BLAS", "bogus")],
    );
    grid.runtime.block_on(grid.grid().wait_until_up(2)).unwrap();
    let client = grid.client("simple");
    let n = 8usize;
    let (a, b) = (matrix(n, 3), matrix(n, 4));
    let product = |client: &GridClient| {
        let mut c = vec![0.0; n * n];
        client
            .transaction(|tx| {
                let (ha, hb) = (tx.input(&a), tx.input(&b));
                let hc = tx.buffer(&mut c);
                tx.call(
                    "mmul",
                    &[TxArg::from(n as i32), ha.into(), hb.into(), hc.into()],
                )?;
                Ok(())
            })
            .map(|_| c)
    };
    let error = product(&client).unwrap_err();
    assert!(
        error
            .message
            .contains("NINF_BLAS=\"bogus\": expected `auto`, `faer` or `openblas`"),
        "{error}"
    );
    drop(bogus);
    let faer = ExternalServer::start_with_env(
        &grid,
        &["linpack"],
        "faer-blas",
        "",
        &[("NINF_BLAS", "faer")],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !grid
        .status()
        .servers
        .iter()
        .any(|s| s.address == faer.address && s.up)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "faer never registered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Placed on the dead server (not yet marked down), the call runs again on `faer`.
    let c = product(&client).unwrap();
    assert_eq!(c, local_mmul(n, &a, &b));
}

/// A grid of one in-process server and one external server that has registered (and whose
/// path the proxy has measured), with heartbeats slow to time out, so the metaserver still
/// places tasks on the external one after it is killed.
fn grid_with_external_server(modules: &[&str]) -> (TestGrid, ExternalServer) {
    let grid = TestGrid::start(vec![1], |o| {
        o.heartbeat_seconds = 0.2;
        o.heartbeat_timeout_seconds = 60.0;
    });
    let external = ExternalServer::start(&grid, modules);
    grid.runtime.block_on(grid.grid().wait_until_up(2)).unwrap();
    grid.runtime
        .block_on(grid.grid().proxy.probe_servers(Duration::ZERO))
        .unwrap();
    (grid, external)
}

#[test]
fn tasks_of_a_killed_server_run_again_on_a_live_one_with_the_same_results() {
    let (grid, mut external) = grid_with_external_server(&["linpack", "selftest"]);
    let local = grid.grid().endpoints.servers[0].clone();
    external.kill();
    let n = 24usize;
    let a = matrix(n, 3);
    let b = matrix(n, 4);
    // A chain and two independent products, spread over both servers by round-robin.
    let mut outputs = vec![vec![0.0; n * n]; 3];
    let plan = {
        let [first, second, third] = &mut outputs[..] else {
            unreachable!()
        };
        grid.client("round-robin")
            .transaction(|tx| {
                let (ha, hb) = (tx.input(&a), tx.input(&b));
                let ab = tx.buffer(first);
                let ab_b = tx.buffer(second);
                let ba = tx.buffer(third);
                let n = TxArg::from(n as i32);
                tx.call("mmul", &[n.clone(), ha.into(), hb.into(), ab.into()])?;
                tx.call("mmul", &[n.clone(), ab.into(), hb.into(), ab_b.into()])?;
                tx.call("mmul", &[n, hb.into(), ha.into(), ba.into()])?;
                Ok(())
            })
            .unwrap()
    };
    let ab = local_mmul(n, &a, &b);
    assert_eq!(outputs[0], ab);
    assert_eq!(outputs[1], local_mmul(n, &ab, &b));
    assert_eq!(outputs[2], local_mmul(n, &b, &a));
    assert!(
        plan.tasks_retried >= 1,
        "round-robin placed nothing on the dead server: {plan}"
    );
    assert!(
        plan.tasks
            .iter()
            .all(|t| t.server == local && t.server != external.address),
        "every call ends on the live server: {plan}"
    );
    // The proxy told the metaserver what went wrong: the dashboard's events name the dead
    // server as suspect and the retries of this graph.
    let events = grid.grid().metaserver.events_since(0, 100);
    let of_graph = |kind: &str| {
        events
            .iter()
            .filter(|e| e.kind == kind && e.graph == Some(plan.graph_id))
            .collect::<Vec<_>>()
    };
    let suspects = of_graph("suspect");
    assert_eq!(suspects.len(), 1, "{events:?}");
    assert_eq!(suspects[0].server, external.address);
    let retries = of_graph("retry");
    assert_eq!(retries.len() as u32, plan.tasks_retried, "{events:?}");
    assert!(retries.iter().all(|e| e.server == external.address));
    grid.assert_no_leftovers();
}

/// Two independent products of the same matrices in one round-robin transaction (one call
/// per server of a two-server grid), checked against the local product.
fn two_products(grid: &TestGrid) -> ninf::grid::Plan {
    two_products_of(grid, 16)
}

/// [`two_products`] of n x n matrices.
fn two_products_of(grid: &TestGrid, n: usize) -> ninf::grid::Plan {
    let a = matrix(n, 5);
    let b = matrix(n, 6);
    let expected = local_mmul(n, &a, &b);
    let mut outputs = vec![vec![0.0; n * n]; 2];
    let plan = {
        let [first, second] = &mut outputs[..] else {
            unreachable!()
        };
        grid.client("round-robin")
            .transaction(|tx| {
                let (ha, hb) = (tx.input(&a), tx.input(&b));
                let (c, d) = (tx.buffer(first), tx.buffer(second));
                let n = TxArg::from(n as i32);
                tx.call("mmul", &[n.clone(), ha.into(), hb.into(), c.into()])?;
                tx.call("mmul", &[n, ha.into(), hb.into(), d.into()])?;
                Ok(())
            })
            .unwrap()
    };
    assert_eq!(outputs, vec![expected.clone(), expected]);
    plan
}

#[test]
fn a_server_one_transaction_saw_fail_is_placed_around_by_the_next() {
    let (grid, mut external) = grid_with_external_server(&["linpack", "selftest"]);
    let local = grid.grid().endpoints.servers[0].clone();
    external.kill();
    let first = two_products(&grid);
    assert!(
        first.tasks_retried >= 1,
        "the first transaction met the dead server: {first}"
    );
    // The metaserver still lists the dead server as up (heartbeats time out after 60 s),
    // but the proxy tells it to place around it, so the next transaction loses nothing.
    let second = two_products(&grid);
    assert_eq!(second.tasks_retried, 0, "{second}");
    assert!(
        second.tasks.iter().all(|t| t.server == local),
        "every call placed on the live server: {second}"
    );
    grid.assert_no_leftovers();
}

/// Stops the external server (SIGSTOP) and runs two products of n x n matrices: the call
/// round-robin places on the stopped server must run again on the live one. A stopped
/// process keeps its sockets: the kernel still accepts connections and acknowledges data,
/// but nothing answers, as with a hung host or a path that silently drops.
fn calls_of_a_stopped_server_run_elsewhere(n: usize) {
    let (grid, external) = grid_with_external_server(&["linpack", "selftest"]);
    let local = grid.grid().endpoints.servers[0].clone();
    let pid = i32::try_from(external.child.id()).unwrap();
    // SAFETY: kill(2) with a valid signal on our own child has no memory effects.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let plan = two_products_of(&grid, n);
    assert!(
        plan.tasks_retried >= 1,
        "round-robin placed a call on the hung server: {plan}"
    );
    assert!(
        plan.tasks.iter().all(|t| t.server == local),
        "every call ends on the live server: {plan}"
    );
    grid.assert_no_leftovers();
    // SAFETY: as above; the drop then kills it.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
}

#[test]
fn a_hung_server_is_noticed_by_its_silence_and_its_calls_run_elsewhere() {
    // Small calls go by gRPC: only the proxy's HTTP/2 pings can tell.
    calls_of_a_stopped_server_run_elsewhere(16);
}

#[test]
fn a_server_hung_under_a_call_on_its_bulk_port_is_noticed_and_the_call_runs_elsewhere() {
    // 400 x 400 doubles: each call carries 2.56 MB, so it goes to the bulk port. Only the
    // proxy's health checks during the call can tell.
    calls_of_a_stopped_server_run_elsewhere(400);
}

#[test]
fn a_routine_no_live_server_offers_fails_the_transaction_by_name_and_nothing_is_left() {
    // Only the external server offers `ddot` (module vector).
    let (grid, mut external) = grid_with_external_server(&["linpack", "vector"]);
    external.kill();
    let n = 6usize;
    let a = matrix(n, 7);
    let mut product = vec![0.0; n * n];
    let mut dot = vec![0.0; 1];
    let error = grid
        .client("round-robin")
        .transaction(|tx| {
            let ha = tx.input(&a);
            let c = tx.buffer(&mut product);
            let r = tx.buffer(&mut dot);
            tx.call(
                "mmul",
                &[TxArg::from(n as i32), ha.into(), ha.into(), c.into()],
            )?;
            tx.call(
                "ddot",
                &[TxArg::from((n * n) as i32), c.into(), c.into(), r.into()],
            )?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        error
            .message
            .contains("cannot run: no healthy server offers `ddot` any more"),
        "{}",
        error.message
    );
    assert!(error.message.contains("task 1"), "{}", error.message);
    // The product kept for `ddot` was deleted, and the live server still serves.
    grid.assert_no_leftovers();
    let mut c = vec![0.0; n * n];
    grid.client("flow")
        .call(
            "mmul",
            &mut [(n as i32).into(), (&a).into(), (&a).into(), (&mut c).into()],
        )
        .unwrap();
    assert_eq!(c, local_mmul(n, &a, &a));
}

/// `c = a a` as a one-call transaction.
fn square(
    client: &GridClient,
    n: usize,
    a: &[f64],
    c: &mut Vec<f64>,
) -> Result<ninf::grid::Plan, ninf::CallError> {
    client.transaction(|tx| {
        let ha = tx.input(a);
        let hc = tx.buffer(c);
        tx.call(
            "mmul",
            &[TxArg::from(n as i32), ha.into(), ha.into(), hc.into()],
        )?;
        Ok(())
    })
}

/// `a·a·a` as a chain of two calls: the second reads the first's output from storage.
fn cube(
    client: &GridClient,
    n: usize,
    a: &[f64],
    c: &mut Vec<f64>,
) -> Result<ninf::grid::Plan, ninf::CallError> {
    let mut square = vec![0.0; n * n];
    client.transaction(|tx| {
        let ha = tx.input(a);
        let hs = tx.buffer(&mut square);
        let hc = tx.buffer(c);
        let size = TxArg::from(n as i32);
        tx.call("mmul", &[size.clone(), ha.into(), ha.into(), hs.into()])?;
        tx.call("mmul", &[size, hs.into(), ha.into(), hc.into()])?;
        Ok(())
    })
}

#[test]
fn a_client_over_its_storage_quota_is_refused_before_anything_runs() {
    // A 16 x 16 intermediate is 2048 bytes.
    let grid = TestGrid::start(vec![1], |o| o.max_stored_bytes_per_client = 2000);
    let n = 16usize;
    let a = matrix(n, 3);
    let mut c = vec![0.0; n * n];
    let e = cube(&grid.client("flow"), n, &a, &mut c).unwrap_err();
    assert_eq!(e.kind, ninf::ErrorKind::RpcRefused, "{e}");
    assert!(
        e.message.contains(
            "transaction would keep 2048 bytes of intermediate data on the servers, over the \
             proxy's quota of 2000 bytes per client (max_stored_bytes_per_client)"
        ),
        "{}",
        e.message
    );
    assert_eq!(c, vec![0.0; n * n]);
    assert!(grid.status().graphs.is_empty(), "nothing was placed");
    // A transaction that keeps nothing on the servers still runs, and so does the chain
    // once it fits.
    square(&grid.client("flow"), n, &a, &mut c).unwrap();
    assert_eq!(c, local_mmul(n, &a, &a));
    drop(grid);
    let grid = TestGrid::start(vec![1], |o| o.max_stored_bytes_per_client = 2048);
    cube(&grid.client("flow"), n, &a, &mut c).unwrap();
    assert_eq!(c, local_mmul(n, &local_mmul(n, &a, &a), &a));
    grid.assert_no_leftovers();
}

#[test]
fn limits_count_per_client_program_and_a_full_queue_refuses() {
    let grid = TestGrid::start(vec![2], |o| {
        o.max_transactions_per_client = 1;
        o.max_queued_transactions = 0;
    });
    let busy = grid.client("flow");
    let running = {
        let busy = busy.clone();
        std::thread::spawn(move || busy.call("sleep_ms", &mut [3000i32.into()]))
    };
    while !grid.status().graphs.iter().any(|g| g.state == "running") {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The same client at its limit, with no room to wait: refused, not a bad argument.
    let refused = busy.call("noop", &mut [0i32.into()]).unwrap_err();
    assert_eq!(refused.kind, ninf::ErrorKind::RpcRefused, "{refused}");
    assert!(
        refused.message.contains(
            "already runs 1 transactions, the proxy's limit (max_transactions_per_client); \
             the proxy's queue already holds 0 waiting transactions, its limit \
             (max_queued_transactions)"
        ),
        "{}",
        refused.message
    );
    // Another client program on the same host has limits of its own.
    grid.client("flow")
        .call("noop", &mut [0i32.into()])
        .unwrap();
    running.join().unwrap().unwrap();
}

#[test]
fn transactions_over_the_limit_wait_their_turn_and_all_complete() {
    let grid = TestGrid::start(vec![2], |o| {
        o.max_transactions_per_client = 1;
        o.max_queued_transactions = 8;
    });
    let client = grid.client("flow");
    let n = 12usize;
    let runs: Vec<_> = (0..6u64)
        .map(|seed| {
            let client = client.clone();
            std::thread::spawn(move || {
                let a = matrix(n, seed);
                let mut c = vec![0.0; n * n];
                square(&client, n, &a, &mut c).map(|_| (a, c))
            })
        })
        .collect();
    for run in runs {
        let (a, c) = run.join().unwrap().unwrap();
        assert_eq!(c, local_mmul(n, &a, &a));
    }
    grid.assert_no_leftovers();
}

#[test]
fn past_max_running_transactions_a_graph_waits_at_the_proxy_unplaced_then_runs() {
    let grid = TestGrid::start(vec![2], |o| o.max_running_transactions = 1);
    let metrics = grid.grid().endpoints.metrics.clone();
    let waiting = || {
        sample_sum(
            &scrape(&metrics["proxy"]),
            "ninf_transactions_waiting_to_run",
            &[],
        )
    };
    let busy = grid.client("flow");
    let running = std::thread::spawn(move || busy.call("sleep_ms", &mut [4000i32.into()]));
    while !grid.status().graphs.iter().any(|g| g.state == "running") {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Another client program, well within its own limits: admitted, and held unplaced
    // while the one slot is taken, although the grid has a free processor.
    let n = 8usize;
    let a = matrix(n, 4);
    let waiter = {
        let (client, a) = (grid.client("flow"), a.clone());
        std::thread::spawn(move || {
            let mut c = vec![0.0; n * n];
            square(&client, n, &a, &mut c).map(|_| c)
        })
    };
    let asked = std::time::Instant::now();
    while waiting() < 1.0 {
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(60),
            "the second transaction never waited for a slot: {:?}",
            grid.status().graphs
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(grid.status().graphs.len(), 1, "{:?}", grid.status().graphs);
    running.join().unwrap().unwrap();
    assert_eq!(waiter.join().unwrap().unwrap(), local_mmul(n, &a, &a));
    assert_eq!(waiting(), 0.0);
    grid.assert_no_leftovers();
}

#[test]
fn over_tls_the_grid_computes_and_refuses_plain_or_uncertified_peers() {
    let grid = TestGrid::start(vec![1, 1], |o| {
        o.auth = true;
        o.tls = true;
    });
    let endpoints = grid.grid().endpoints.clone();
    let token = endpoints.token().unwrap().unwrap();
    let tls_dir = endpoints.tls_dir.clone().unwrap();
    let ca_only = GridTls::trusting(&tls_dir.join("ca.pem")).unwrap();
    let n = 8usize;
    let a = matrix(n, 5);
    let mut c = vec![0.0; n * n];
    // A client holding the authority and the token: a chain across both servers, the
    // second fetching from the first's storage over TLS with its certificate.
    let client = GridClient::connect_with_tls(&endpoints.proxy, Some(&ca_only))
        .unwrap()
        .with_token(&token)
        .with_scheduler("round-robin");
    let plan = cube(&client, n, &a, &mut c).unwrap();
    assert_eq!(plan.inter_server_ratio, 1.0);
    assert_eq!(c, local_mmul(n, &local_mmul(n, &a, &a), &a));
    grid.assert_no_leftovers();
    // Plain HTTP/2 to the TLS proxy gets nowhere.
    let plain = GridClient::connect(&endpoints.proxy)
        .and_then(|g| square(&g.with_token(&token), n, &a, &mut c));
    assert!(plain.is_err(), "a plain client was served over TLS");
    // A client trusting another authority refuses the proxy's certificate.
    let other = tempfile::tempdir().unwrap();
    ninf_proto::net::tls::generate(other.path(), &["client"], &["127.0.0.1".into()]).unwrap();
    let stranger = GridTls::trusting(&other.path().join("ca.pem")).unwrap();
    let e = GridClient::connect_with_tls(&endpoints.proxy, Some(&stranger))
        .and_then(|g| square(&g.with_token(&token), n, &a, &mut c))
        .unwrap_err();
    assert_eq!(e.kind, ninf::ErrorKind::ServerNotFound, "{e}");
    // Compute servers require a client certificate from the grid's authority, and offer no
    // plain bulk-data port.
    let server = endpoints.servers[0].clone();
    let info = &grid.grid().servers[0].state.info;
    assert_eq!(
        info.bulk_address, "",
        "a TLS server must not offer plain bulk"
    );
    assert_eq!(
        info.bulk_local, "",
        "nor a same-host socket, which checks no certificate"
    );
    grid.runtime.block_on(async {
        let uncertified = ninf::NinfClient::connect_with_tls(&server, Some(&ca_only))
            .await
            .map(|c| c.with_token(&token));
        // TLS 1.3 may finish the client's side of the handshake before the server checks
        // the (missing) certificate: the refusal comes at connect or at the first call.
        let refused = match uncertified {
            Ok(client) => client.describe("mmul").await.err(),
            Err(e) => Some(e),
        };
        assert!(
            refused.is_some(),
            "a client without a certificate was served"
        );
        let certified =
            ninf::NinfClient::connect_with_tls(&server, endpoints.tls().unwrap().as_ref())
                .await
                .unwrap()
                .with_token(&token);
        assert!(certified.describe("mmul").await.is_ok());
    });
    // A server process with the token and TLS registers and serves (its node agents attach
    // over TLS too); one with the token but without TLS cannot register.
    let files = ninf_grid::embedded::tls_files(&tls_dir, "server");
    let token_file = endpoints.token_file.clone().unwrap();
    let with_tls = format!(
        "auth_token_file = \"{}\"\n[tls]\nca = \"{}\"\ncertificate = \"{}\"\nkey = \"{}\"\n",
        token_file.display(),
        files.ca.display(),
        files.certificate.display(),
        files.key.display()
    );
    let external = ExternalServer::start_with(&grid, &["linpack"], "tls", &with_tls);
    let plain_settings = format!("auth_token_file = \"{}\"\n", token_file.display());
    let _plain = ExternalServer::start_with(&grid, &["linpack"], "no-tls", &plain_settings);
    let addresses = || -> Vec<String> {
        grid.status()
            .servers
            .into_iter()
            .map(|s| s.address)
            .collect()
    };
    for _ in 0..100 {
        if addresses().contains(&external.address) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The plain one had as long to try.
    std::thread::sleep(Duration::from_millis(500));
    let registered = addresses();
    assert_eq!(registered.len(), 3, "{registered:?}");
    assert!(registered.contains(&external.address), "{registered:?}");
    grid.runtime.block_on(async {
        let client = ninf::NinfClient::connect_with_tls(
            &external.address,
            endpoints.tls().unwrap().as_ref(),
        )
        .await
        .unwrap()
        .with_token(&token);
        let mut out = vec![0.0; n * n];
        client
            .call(
                "mmul",
                &mut [
                    ninf::Arg::Integer(n as i64),
                    ninf::Arg::from(&a),
                    ninf::Arg::from(&a),
                    ninf::Arg::from(&mut out),
                ],
            )
            .await
            .unwrap();
        assert_eq!(out, local_mmul(n, &a, &a));
    });
}

#[test]
fn with_a_grid_token_only_those_holding_it_get_in() {
    let grid = TestGrid::start(vec![1, 1], |o| o.auth = true);
    let endpoints = &grid.grid().endpoints;
    let token_file = endpoints.token_file.clone().unwrap();
    let token = ninf_proto::net::auth::load_token(&token_file).unwrap();
    let n = 4usize;
    let a = matrix(n, 1);
    let mut c = vec![0.0; n * n];
    // No token: refused, nothing runs.
    let e = square(
        &GridClient::connect(&endpoints.proxy).unwrap(),
        n,
        &a,
        &mut c,
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("the proxy refuses requests with no grid token"),
        "{}",
        e.message
    );
    assert_eq!(c, vec![0.0; n * n]);
    // A wrong token: refused too.
    let e = GridClient::connect(&endpoints.proxy)
        .unwrap()
        .with_token("not-the-grid-token-at-all")
        .describe("mmul")
        .unwrap_err();
    assert!(e.message.contains("a wrong grid token"), "{}", e.message);
    // The token: served (the proxy presents it to the metaserver in turn).
    let client = GridClient::connect(&endpoints.proxy)
        .unwrap()
        .with_token(&token);
    square(&client, n, &a, &mut c).unwrap();
    assert_eq!(c, local_mmul(n, &a, &a));
    // Across servers: the second server fetches the intermediate from the first's storage,
    // presenting the token.
    let spread = client.clone().with_scheduler("round-robin");
    let plan = cube(&spread, n, &a, &mut c).unwrap();
    assert_eq!(plan.inter_server_ratio, 1.0);
    assert_eq!(c, local_mmul(n, &local_mmul(n, &a, &a), &a));
    grid.assert_no_leftovers();
    // The servers themselves refuse calls without the token.
    let server = endpoints.servers[0].clone();
    grid.runtime.block_on(async {
        let open = ninf::NinfClient::connect(&server).await.unwrap();
        let e = open.describe("mmul").await.unwrap_err();
        assert!(
            e.message
                .contains("the compute server refuses requests with no grid token"),
            "{}",
            e.message
        );
        let holder = ninf::NinfClient::connect(&server)
            .await
            .unwrap()
            .with_token(&token);
        assert!(holder.describe("mmul").await.is_ok());
    });
    // A server without the token cannot register: the metaserver still knows two servers.
    let _intruder = ExternalServer::start(&grid, &["linpack"]);
    std::thread::sleep(Duration::from_millis(500));
    let status = grid.status();
    assert_eq!(status.servers.len(), 2, "{:?}", status.servers);
}

/// Four independent products `a * b` of n x n matrices in one transaction, checked against
/// the local product.
fn four_products(client: &GridClient, n: usize) -> ninf::grid::Plan {
    let (a, b) = (matrix(n, 1), matrix(n, 2));
    let mut products = vec![vec![0.0; n * n]; 4];
    let plan = client
        .transaction(|tx| {
            let [ha, hb] = [&a, &b].map(|m| tx.input(m));
            for product in products.iter_mut() {
                let hc = tx.buffer(product);
                tx.call(
                    "mmul",
                    &[TxArg::from(n as i64), ha.into(), hb.into(), hc.into()],
                )?;
            }
            Ok(())
        })
        .unwrap();
    for product in &products {
        assert_eq!(product, &local_mmul(n, &a, &b));
    }
    plan
}

#[test]
fn calls_with_large_arrays_go_to_the_servers_same_host_sockets_or_bulk_ports_as_the_proxy_is_told()
{
    // (bulk_calls, same_host_calls, the path the arrays must take)
    for (bulk_calls, same_host_calls, path) in [
        (true, true, "local"),
        (true, false, "bulk"),
        (false, true, "grpc"),
    ] {
        let grid = TestGrid::start(vec![1, 1], |o| {
            o.bulk_calls = bulk_calls;
            o.same_host_calls = same_host_calls;
        });
        let metrics = grid.grid().endpoints.metrics.clone();
        // 400 x 400 doubles: each call carries 2.56 MB, over the 1 MiB threshold.
        four_products(&grid.client("round-robin"), 400);
        let received = |path: &str| -> f64 {
            (0..2)
                .map(|i| {
                    let text = scrape(&metrics[&format!("server-{i}")]);
                    let labels = ["direction=\"in\"", &format!("path=\"{path}\"")];
                    sample_sum(&text, "ninf_bytes_total", &labels)
                })
                .sum()
        };
        let arrays = 4.0 * 2.0 * (8 * 400 * 400) as f64;
        let by_path: Vec<(&str, f64)> = ["local", "bulk", "grpc"]
            .into_iter()
            .map(|p| (p, received(p)))
            .collect();
        for (p, bytes) in &by_path {
            if *p == path {
                assert!(*bytes >= arrays, "{path} expected: {by_path:?}");
            } else {
                assert!(*bytes < arrays, "{path} expected: {by_path:?}");
            }
        }
        grid.assert_no_leftovers();
    }
}

/// `threads` threads each run `runs` transactions of one `mmul` of n x n matrices with
/// inputs of their own, through `client`, every product checked.
fn products_in_threads(client: &GridClient, n: usize, threads: u64, runs: u64) {
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let client = client.clone();
            scope.spawn(move || {
                for run in 0..runs {
                    let (a, b) = (matrix(n, 10 * thread + run), matrix(n, 100 + run));
                    let mut c = vec![0.0; n * n];
                    client
                        .transaction(|tx| {
                            let [ha, hb] = [&a, &b].map(|m| tx.input(m));
                            let hc = tx.buffer(&mut c);
                            let n = TxArg::from(n as i64);
                            tx.call("mmul", &[n, ha.into(), hb.into(), hc.into()])
                        })
                        .unwrap();
                    assert_eq!(c, local_mmul(n, &a, &b), "thread {thread}, run {run}");
                }
            });
        }
    });
}

#[test]
fn large_arrays_between_a_client_and_the_proxy_on_its_host_go_in_shared_memory_unless_turned_off() {
    for same_host_uploads in [true, false] {
        let grid = TestGrid::start(vec![1, 1], |o| o.same_host_uploads = same_host_uploads);
        let metrics = grid.grid().endpoints.metrics.clone();
        let client = grid.client("round-robin");
        // 200 x 200 doubles: 320,000 bytes per array, over the 256 KiB the client shares.
        // Three threads run three transactions each, every one with inputs of its own: a
        // region written again before the proxy released it would give some run another's
        // inputs.
        let n = 200usize;
        products_in_threads(&client, n, 3, 3);
        let counted = |direction: &str, path: &str| {
            let text = scrape(&metrics["proxy"]);
            let labels = [
                format!("direction=\"{direction}\""),
                format!("path=\"{path}\""),
            ];
            let labels = [labels[0].as_str(), labels[1].as_str()];
            sample_sum(&text, "ninf_bytes_total", &labels)
        };
        // Two inputs and one output per transaction.
        let inputs = 9.0 * 2.0 * (8 * n * n) as f64;
        let outputs = 9.0 * (8 * n * n) as f64;
        let (shared_in, sent) = (counted("in", "shared"), counted("in", "client"));
        let (shared_out, replied) = (counted("out", "shared"), counted("out", "client"));
        if same_host_uploads {
            assert_eq!((shared_in, shared_out), (inputs, outputs));
            assert!(sent < inputs / 10.0, "{sent} bytes sent by gRPC");
            assert!(replied < outputs / 10.0, "{replied} bytes answered by gRPC");
        } else {
            assert_eq!((shared_in, shared_out), (0.0, 0.0));
            assert!(sent >= inputs, "{sent} bytes sent by gRPC");
            assert!(replied >= outputs, "{replied} bytes answered by gRPC");
        }
        // Arrays under the threshold go in the request and the reply either way.
        four_products(&client, 16);
        assert_eq!(counted("in", "shared"), shared_in);
        assert_eq!(counted("out", "shared"), shared_out);
        grid.assert_no_leftovers();
    }
}

#[test]
fn inputs_a_client_shares_with_the_proxy_are_read_by_the_routine_where_the_client_put_them() {
    for same_host_uploads in [true, false] {
        let grid = TestGrid::start(vec![1, 1], |o| o.same_host_uploads = same_host_uploads);
        let metrics = grid.grid().endpoints.metrics.clone();
        let client = grid.client("round-robin");
        // 300 x 300 doubles: two inputs of 720,000 bytes, over the 1 MiB that sends a call
        // to a server's bulk path, so the proxy lends them on. Two threads with inputs of
        // their own, three runs each, every product checked: a region the executable still
        // read from an earlier call would give a wrong product.
        let n = 300usize;
        products_in_threads(&client, n, 2, 3);
        let counted = |name: &str| -> f64 {
            (0..2)
                .map(|i| sample_sum(&scrape(&metrics[&format!("server-{i}")]), name, &[]))
                .sum()
        };
        let lent = counted("ninf_lent_input_bytes_total");
        let inputs = 6.0 * 2.0 * (8 * n * n) as f64;
        if same_host_uploads {
            assert_eq!(lent, inputs, "every input read where the client put it");
        } else {
            assert_eq!(lent, 0.0, "inputs sent in the request are not lent");
        }
        // Either way the proxy calls the servers on their same-host sockets, and each
        // product is written where it is read back: in the client's own output region
        // when it shares one (the servers send no output bytes back), in the connection's
        // region otherwise.
        let outputs = 6.0 * (8 * n * n) as f64;
        assert_eq!(counted("ninf_lent_output_bytes_total"), outputs);
        let sent_back = || -> f64 {
            (0..2)
                .map(|i| {
                    let text = scrape(&metrics[&format!("server-{i}")]);
                    let labels = ["direction=\"out\"", "path=\"local\""];
                    sample_sum(&text, "ninf_bytes_total", &labels)
                })
                .sum()
        };
        // A server counts a call just after its reply: the last one may come a moment late.
        let mut waited = 0;
        while !same_host_uploads && sent_back() < outputs && waited < 50 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            waited += 1;
        }
        let sent_back = sent_back();
        if same_host_uploads {
            assert!(sent_back < outputs / 10.0, "{sent_back} bytes sent back");
        } else {
            assert!(sent_back >= outputs, "{sent_back} bytes sent back");
        }
        grid.assert_no_leftovers();
    }
}

#[test]
fn a_lent_matrix_whose_factors_stay_on_the_server_is_copied_where_they_are_kept() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let metrics = grid.grid().endpoints.metrics.clone();
    let client = grid.client("flow");
    // 500 x 500 doubles (2 MB): `dgefa` goes to the bulk path with its matrix in the
    // client's region, and the factors it writes over it stay on its server for `dgesl`, so
    // the server copies the lent matrix into the room kept for them instead of lending it.
    let n = 500usize;
    let order = n as i32;
    let a0: Vec<f64> = (0..n * n)
        .map(|k| {
            if k % (n + 1) == 0 {
                n as f64
            } else {
                ((k * 7) % 11) as f64 / 11.0
            }
        })
        .collect();
    let b: Vec<f64> = (0..n).map(|i| i as f64 / 3.0).collect();
    let (mut x, pivots) = (b.clone(), vec![0i32; n]);
    client
        .transaction(|tx| {
            let a = tx.scratch(&a0);
            let ipvt = tx.scratch(&pivots);
            let xb = tx.buffer(&mut x);
            tx.call("dgefa", &[a.into(), order.into(), ipvt.into()])?;
            tx.call("dgesl", &[a.into(), order.into(), ipvt.into(), xb.into()])
        })
        .unwrap();
    let counted = |name: &str, labels: &[&str]| -> f64 {
        (0..2)
            .map(|i| sample_sum(&scrape(&metrics[&format!("server-{i}")]), name, labels))
            .sum()
    };
    let local_in = counted("ninf_bytes_total", &["direction=\"in\"", "path=\"local\""]);
    assert!(
        local_in >= (8 * n * n) as f64,
        "{local_in} bytes on the same-host path"
    );
    assert_eq!(
        counted("ninf_lent_input_bytes_total", &[]),
        0.0,
        "copied, not lent"
    );
    // The same routines with every array sent (their matrices lent then): bit for bit the
    // same solution.
    let (_, _, reference) = solved_by_sending(&client, &a0, &b);
    assert_eq!(x, reference);
    grid.assert_no_leftovers();
}

#[test]
fn an_intermediate_kept_on_the_other_server_is_read_where_it_lies() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let metrics = grid.grid().endpoints.metrics.clone();
    // Round robin puts the two first products on the two servers, so the third, wherever
    // it runs, takes one of its inputs from the other server's storage: borrowed there, not
    // fetched through gRPC. 200 x 200 doubles (320,000 bytes) lie in the store regions.
    let client = grid.client("round-robin");
    let n = 200usize;
    let order = n as i32;
    let m: Vec<Vec<f64>> = (0..4)
        .map(|s| {
            (0..n * n)
                .map(|k| ((k * (s + 3)) % 17) as f64 / 17.0)
                .collect()
        })
        .collect();
    let mut result = vec![0.0; n * n];
    let zeros = vec![0.0; n * n];
    client
        .transaction(|tx| {
            let (left, right) = (tx.scratch(&zeros), tx.scratch(&zeros));
            let (m0, m1, m2, m3) = (
                tx.scratch(&m[0]),
                tx.scratch(&m[1]),
                tx.scratch(&m[2]),
                tx.scratch(&m[3]),
            );
            let out = tx.buffer(&mut result);
            tx.call("mmul", &[order.into(), m0.into(), m1.into(), left.into()])?;
            tx.call("mmul", &[order.into(), m2.into(), m3.into(), right.into()])?;
            tx.call(
                "mmul",
                &[order.into(), left.into(), right.into(), out.into()],
            )
        })
        .unwrap();
    let product = |a: &[f64], b: &[f64]| -> Vec<f64> {
        let mut c = vec![0.0; n * n];
        ninf_routines::blas::mmul(order, a, b, &mut c).unwrap();
        c
    };
    let expected = product(&product(&m[0], &m[1]), &product(&m[2], &m[3]));
    assert_eq!(result, expected, "the same product, bit for bit");
    let counted = |array: &str| -> f64 {
        let labels = [format!("array=\"{array}\"")];
        (0..2)
            .map(|i| {
                let text = scrape(&metrics[&format!("server-{i}")]);
                sample_sum(
                    &text,
                    "ninf_store_region_bytes_total",
                    &[labels[0].as_str()],
                )
            })
            .sum()
    };
    let intermediate = (8 * n * n) as f64;
    assert_eq!(counted("lent_to_peer"), intermediate);
    assert_eq!(counted("read_from_peer"), intermediate);
    grid.assert_no_leftovers();
}

#[test]
fn every_service_serves_metrics_that_count_what_the_grid_did() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let metrics = grid.grid().endpoints.metrics.clone();
    assert_eq!(
        metrics.keys().cloned().collect::<Vec<_>>(),
        ["metaserver", "proxy", "server-0", "server-1"]
    );
    let client = grid.client("round-robin");
    let n = 10usize;
    four_products(&client, n);
    let bad = client.call("mmul", &mut [ninf::Arg::Integer(-1)]);
    assert!(
        bad.is_err(),
        "a call with too few arguments is refused by the client"
    );

    // Four products ran, two on each server (round robin), each with two n x n inputs in
    // and one out.
    let mut calls = 0.0;
    for i in 0..2 {
        let text = scrape(&metrics[&format!("server-{i}")]);
        let server = &grid.grid().endpoints.servers[i];
        let ok = sample_sum(
            &text,
            "ninf_calls_total",
            &[
                "routine=\"mmul\"",
                &format!("server=\"{server}\""),
                "outcome=\"ok\"",
            ],
        );
        assert_eq!(ok, 2.0, "{text}");
        calls += ok;
        let bytes_in = sample_sum(&text, "ninf_bytes_total", &["direction=\"in\""]);
        assert!(bytes_in >= 2.0 * 2.0 * (8 * n * n) as f64, "{text}");
        let bytes_out = sample_sum(&text, "ninf_bytes_total", &["direction=\"out\""]);
        assert!(bytes_out >= 2.0 * (8 * n * n) as f64, "{text}");
        assert_eq!(
            sample_sum(&text, "ninf_call_seconds_count", &["routine=\"mmul\""]),
            2.0
        );
        assert!(text.contains("ninf_queue_length"), "{text}");
        assert!(text.contains("ninf_storage_bytes"), "{text}");
    }
    assert_eq!(calls, 4.0);

    let text = scrape(&metrics["metaserver"]);
    assert_eq!(
        sample_sum(
            &text,
            "ninf_graphs_total",
            &["scheduler=\"round-robin\"", "outcome=\"ok\""]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample_sum(&text, "ninf_prediction_error_ratio_count", &[]),
        1.0
    );

    let text = scrape(&metrics["proxy"]);
    let from_clients = sample_sum(
        &text,
        "ninf_bytes_total",
        &["direction=\"in\"", "path=\"client\""],
    );
    assert!(from_clients >= 2.0 * (8 * n * n) as f64, "{text}");
    assert_eq!(sample_sum(&text, "ninf_retries_total", &[]), 0.0);
}

#[test]
fn a_followed_transaction_reports_its_progress_to_the_end() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let client = {
        let reports = reports.clone();
        grid.client("round-robin")
            .with_progress(move |p| reports.lock().unwrap().push(*p))
    };
    let n = 16usize;
    let plan = four_products(&client, n);
    let reports = reports.lock().unwrap().clone();
    let last = *reports.last().expect("at least one report");
    assert_eq!(last.graph_id, plan.graph_id);
    assert_eq!((last.tasks_done, last.tasks_total), (4, 4), "{reports:?}");
    assert_eq!(last.retries, 0);
    // Each call carries its two n x n inputs and returns one.
    assert!(last.bytes_moved >= 4 * 3 * (8 * n * n) as u64, "{last:?}");
    assert!(
        reports
            .windows(2)
            .all(|w| w[0].tasks_done <= w[1].tasks_done && w[0].bytes_moved <= w[1].bytes_moved),
        "progress never goes back without a fault: {reports:?}"
    );
    grid.assert_no_leftovers();
}

/// The job processes a server's gang table lists now.
async fn job_processes(server: &str) -> Vec<u32> {
    let mut gang = v1::gang_control_client::GangControlClient::connect(format!("http://{server}"))
        .await
        .unwrap();
    let status = gang
        .status(v1::GangStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    status.jobs.into_iter().flat_map(|j| j.processes).collect()
}

#[test]
fn the_servers_of_one_grid_run_their_calls_on_different_cores() {
    use ninf_compute_server::gang::cores;
    // Before each server was given its own cores, both pinned their one processor to the
    // host's first core, and a two-server grid computed on one core.
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let servers: Vec<String> = grid
        .grid()
        .servers
        .iter()
        .map(|s| s.address.clone())
        .collect();
    grid.runtime.block_on(async {
        // Two calls on each server: a job alone is never stopped, so its agent is not sent
        // the table that pins it.
        let mut calls = Vec::new();
        for server in servers.iter().chain(&servers) {
            let client = ninf::NinfClient::connect(server).await.unwrap();
            calls.push(tokio::spawn(async move {
                client
                    .call("sleep_ms", &mut [ninf::Arg::Integer(2000)])
                    .await
            }));
        }
        for (offset, server) in servers.iter().enumerate() {
            let expected = vec![cores::spread(offset)[0]];
            let mut seen = Vec::new();
            for _ in 0..300 {
                let pids = job_processes(server).await;
                if !pids.is_empty() {
                    seen = pids.iter().map(|&pid| cores::of_process(pid)).collect();
                }
                if seen.len() == 2 && seen.iter().all(|s| s.as_ref() == Some(&expected)) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(seen, vec![Some(expected.clone()); 2], "server {offset}");
        }
        for call in calls {
            call.await.unwrap().unwrap();
        }
    });
}

/// Two servers of one core each that lend each other idle cores, small calls included
/// (faer is slow unoptimised).
fn lending_grid() -> TestGrid {
    TestGrid::start(vec![1, 1], |o| o.lend_min_flops = 1e5)
}

/// Threads the grid's calls computed with on lent cores so far.
fn lent_threads(grid: &TestGrid) -> u64 {
    let servers = &grid.grid().servers;
    servers.iter().map(|s| s.state.metrics.lent_threads()).sum()
}

/// What a lone call borrows: on a host of two cores or more each server has one of its
/// own, and an idle server's core and any core no server owns are lent, so all but the
/// borrower's own.
fn lendable_cores() -> u64 {
    (ninf_compute_server::gang::cores::allowed().len() as u64).saturating_sub(1)
}

/// A product alone in its transaction computes on the other server's idle core too: the
/// proxy marks it alone, its arrays come through the same-host socket, and its server
/// borrows the core. Two products issued together are not alone, and borrow nothing.
#[test]
fn a_lone_product_borrows_the_idle_servers_core_and_two_together_do_not() {
    let grid = lending_grid();
    let lent = || lent_threads(&grid);
    let lendable = lendable_cores();
    // Arrays of 256 KiB or more come through the same-host socket.
    let n = 192;
    let (a, b) = (matrix(n, 1), matrix(n, 2));
    let expected = local_mmul(n, &a, &b);
    let mut c = vec![0.0; n * n];
    grid.client("flow")
        .transaction(|tx| {
            let (ha, hb, hc) = (tx.input(&a), tx.input(&b), tx.buffer(&mut c));
            tx.call(
                "mmul",
                &[TxArg::from(n as i32), ha.into(), hb.into(), hc.into()],
            )?;
            Ok(())
        })
        .unwrap();
    let worst = max_difference(&c, &expected);
    assert!(worst < 1e-9, "the lone product is off by {worst}");
    assert_eq!(lent(), lendable);

    two_products_of(&grid, n);
    assert_eq!(
        lent(),
        lendable,
        "two products issued together borrowed a core"
    );
    grid.assert_no_leftovers();
}

/// A lone `dgefa` whose matrix stays on the grid borrows the idle core too. All its arrays
/// then lie in the server's store region, so its request region holds the message alone:
/// the lent threads and cores were once added to the message after its region was sized,
/// and the server panicked on every such call.
#[test]
fn a_lone_factorisation_of_a_stored_matrix_borrows_the_idle_core_and_solves() {
    let grid = lending_grid();
    let n = 400;
    let mut a0 = matrix(n, 3);
    for i in 0..n {
        a0[i * n + i] += n as f64;
    }
    let b0: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
    let (pivots, mut x) = (vec![0i32; n], b0.clone());
    let order = TxArg::from(n as i32);
    grid.client("flow")
        .transaction(|tx| {
            let (a, ipvt, x) = (tx.scratch(&a0), tx.scratch(&pivots), tx.buffer(&mut x));
            tx.call("dgefa", &[a.into(), order.clone(), ipvt.into()])?;
            tx.call("dgesl", &[a.into(), order.clone(), ipvt.into(), x.into()])?;
            Ok(())
        })
        .unwrap();
    let ax: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| a0[j * n + i] * x[j]).sum())
        .collect();
    let worst = max_difference(&ax, &b0);
    assert!(worst < 1e-9, "A x is off b by {worst}");
    assert_eq!(
        lent_threads(&grid),
        lendable_cores(),
        "the lone dgefa borrowed the idle cores"
    );
    grid.assert_no_leftovers();
}

/// Hundreds of tiny independent calls in one transaction, more than the proxy's slots on
/// the one server: they leave in batches (`CallBatch`), each batch one gang job, and every
/// call's result comes back as its own. A call that fails in a batch fails only the
/// transaction it belongs to, naming its task.
#[test]
fn tiny_calls_go_in_batches_and_each_answers_on_its_own() {
    let grid = TestGrid::start(vec![1], |_| {});
    let client = grid.client("flow");
    let calls = 400usize;
    let mut outputs: Vec<Vec<f64>> = vec![vec![0.0; 2]; calls];
    let inputs: Vec<Vec<f64>> = (0..calls).map(|i| vec![i as f64, -(i as f64)]).collect();
    let gang = &grid.grid().servers[0].state.gang;
    let before = gang.status().admitted;
    client
        .transaction(|tx| {
            for (x, y) in inputs.iter().zip(outputs.iter_mut()) {
                let (x, y) = (tx.input(x), tx.buffer(y));
                tx.call("echo", &[2i64.into(), x.into(), y.into()])?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(outputs, inputs);
    let jobs = gang.status().admitted - before;
    assert!(
        jobs < calls as u64 / 4,
        "{calls} calls ran as {jobs} gang jobs: not batched"
    );

    let failed = client
        .transaction(|tx| {
            for i in 0..100i32 {
                tx.call("noop", &[i.into()])?;
            }
            tx.call("fail", &[7i32.into()])?;
            Ok(())
        })
        .unwrap_err();
    assert!(
        failed.message.contains("task 100 (`fail#100`, fail)")
            && failed.message.contains("selftest failure with code 7"),
        "{failed}"
    );
    client.call("noop", &mut [0i32.into()]).unwrap();
    grid.assert_no_leftovers();
}
