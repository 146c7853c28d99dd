//! Data kept on the grid (docs/data.md) through the Rust client: a put array read back,
//! handles in calls and transactions beside ordinary arrays, an INOUT handle updated on the
//! grid, calls placed next to their data, freed and other clients' handles refused with
//! nothing run, and a dead client's handles gone with their bytes once the lease runs out.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::common::{TestGrid, sample_sum, scrape, solved_by_sending};
use ninf::ElementType;
use ninf::ErrorKind;
use ninf::grid::{DataMode, TxArg};

/// A well-conditioned n × n matrix (diagonally dominant).
fn system(n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|i| {
            if i % (n + 1) == 0 {
                n as f64
            } else {
                ((i * 7) % 11) as f64 / 11.0
            }
        })
        .collect()
}

#[test]
fn a_matrix_factored_once_on_the_grid_solves_many_right_hand_sides_next_to_it() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let client = grid.client("flow");
    // Large enough that reading the factors from the other server (2.9 MB) outweighs any
    // difference in the two servers' load samples while the file's other tests run.
    let n = 600usize;
    let order = n as i32;
    let a0 = system(n);
    // Put, read back, listed with the server that holds it.
    let a = client
        .put(&a0, &[n as u64, n as u64], DataMode::Sticky)
        .unwrap();
    assert_eq!(a.nbytes(), (n * n * 8) as u64);
    assert_eq!(a.shape(), &[n as u64, n as u64]);
    let mut back = vec![0.0; n * n];
    client.get(&a, &mut back).unwrap();
    assert_eq!(back, a0);
    let listed = client.data().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].data, a);
    assert_eq!(listed[0].servers.len(), 1, "{listed:?}");
    let holder = listed[0].servers[0].clone();
    // Factored in place on the grid: INOUT `a`, OUT `ipvt` into an empty handle.
    let ipvt = client
        .empty(ElementType::Int, &[n as u64], DataMode::Sticky)
        .unwrap();
    let plan = client
        .transaction(|tx| {
            tx.call("dgefa", &[(&a).into(), order.into(), (&ipvt).into()])?;
            Ok(())
        })
        .unwrap();
    // `a` is sticky: the call that writes it runs where it is, whatever the loads.
    assert_eq!(plan.tasks[0].server, holder, "dgefa runs where `a` is");
    let b0: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let (a_factored, ipvt_sent, x_sent) = solved_by_sending(&client, &a0, &b0);
    client.get(&a, &mut back).unwrap();
    assert_eq!(back, a_factored, "the factors replaced `a` on the grid");
    let mut pivots = vec![0i32; n];
    client.get(&ipvt, &mut pivots).unwrap();
    assert_eq!(pivots, ipvt_sent);
    // Many solves: each reads the factors where they are, only `b` travels.
    for k in 0..3 {
        let b: Vec<f64> = b0.iter().map(|v| v + k as f64).collect();
        let (_, _, expected) = solved_by_sending(&client, &a0, &b);
        let mut x = b.clone();
        let plan = client
            .transaction(|tx| {
                let xb = tx.buffer(&mut x);
                tx.call(
                    "dgesl",
                    &[(&a).into(), order.into(), (&ipvt).into(), xb.into()],
                )?;
                Ok(())
            })
            .unwrap();
        assert_eq!(x, expected, "solve {k}");
        assert_eq!(
            plan.tasks[0].server, holder,
            "solve {k} runs next to its data"
        );
        if k == 0 {
            assert_eq!(x, x_sent);
        }
    }
    // The handles' bytes are all that stays on the servers; freed, nothing does.
    let stored: u64 = grid.grid().stored_bytes().iter().sum();
    assert_eq!(stored, (n * n * 8 + n * 4) as u64);
    client.free(&a).unwrap();
    client.free(&ipvt).unwrap();
    assert!(client.data().unwrap().is_empty());
    grid.assert_no_leftovers();
}

#[test]
fn a_handle_written_and_read_in_one_transaction_flows_by_an_edge_beside_ordinary_arrays() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let client = grid.client("simple");
    let n = 30usize;
    let order = n as i32;
    let a0 = system(n);
    let b0: Vec<f64> = (0..n).map(|i| (i * i) as f64).collect();
    let (_, _, expected) = solved_by_sending(&client, &a0, &b0);
    let a = client.put(&a0, &[], DataMode::Persistent).unwrap();
    let ipvt = client
        .empty(ElementType::Int, &[n as u64], DataMode::Sticky)
        .unwrap();
    let mut x = b0.clone();
    let mut tx = client.transaction_begin();
    let xb = tx.buffer(&mut x);
    tx.call("dgefa", &[TxArg::from(&a), order.into(), (&ipvt).into()])
        .unwrap();
    tx.call(
        "dgesl",
        &[(&a).into(), order.into(), (&ipvt).into(), xb.into()],
    )
    .unwrap();
    let graph = tx.graph();
    assert_eq!(graph.edges.len(), 2, "a and ipvt flow by edges: {graph:?}");
    tx.end().unwrap();
    assert_eq!(x, expected);
    let mut pivots = vec![0i32; n];
    client.get(&ipvt, &mut pivots).unwrap();
    assert!(
        pivots.iter().all(|&p| p >= 1 && p <= n as i32),
        "{pivots:?}"
    );
    client.free(&a).unwrap();
    client.free(&ipvt).unwrap();
    grid.assert_no_leftovers();
}

#[test]
fn freed_unknown_foreign_and_ill_fitting_handles_are_refused_and_nothing_runs() {
    let grid = TestGrid::start(vec![1], |_| {});
    let client = grid.client("simple");
    let n = 20usize;
    let order = n as i32;
    let a = client.put(&system(n), &[], DataMode::Sticky).unwrap();
    let ipvt = client
        .empty(ElementType::Int, &[n as u64], DataMode::Sticky)
        .unwrap();
    // Another client (another identity) neither sees nor uses them.
    let other = grid.client("simple");
    assert!(other.data().unwrap().is_empty());
    let mut back = vec![0.0; n * n];
    let stolen = other.get(&a, &mut back).unwrap_err();
    assert_eq!(stolen.kind, ErrorKind::DataNotFound, "{stolen}");
    assert!(stolen.message.contains(a.id()), "{stolen}");
    // An empty handle has no value to read.
    let mut pivots = vec![0i32; n];
    let unwritten = client.get(&ipvt, &mut pivots).unwrap_err();
    assert!(unwritten.message.contains("no value yet"), "{unwritten}");
    // Too small for the call: the size is named.
    let small = client.put(&system(n - 1), &[], DataMode::Sticky).unwrap();
    let refused = client
        .transaction(|tx| {
            tx.call("dgefa", &[(&small).into(), order.into(), (&ipvt).into()])?;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::BadArgument, "{refused}");
    assert!(
        refused
            .message
            .contains(&format!("{} elements", (n - 1) * (n - 1))),
        "{refused}"
    );
    // Freed: the call sends nothing and names the handle.
    client.free(&a).unwrap();
    let graphs_before = grid.status().graphs.len();
    let gone = client
        .transaction(|tx| {
            tx.call("dgefa", &[(&a).into(), order.into(), (&ipvt).into()])?;
            Ok(())
        })
        .unwrap_err();
    assert_eq!(gone.kind, ErrorKind::DataNotFound, "{gone}");
    assert!(gone.message.contains(a.id()), "{gone}");
    assert_eq!(client.free(&a).unwrap_err().kind, ErrorKind::DataNotFound);
    assert_eq!(
        grid.status().graphs.len(),
        graphs_before,
        "nothing was placed"
    );
    client.free(&small).unwrap();
    client.free(&ipvt).unwrap();
    grid.assert_no_leftovers();
}

#[test]
fn a_dead_clients_handles_expire_with_their_bytes() {
    let grid = TestGrid::start(vec![1], |o| o.data_lease_seconds = Some(1.0));
    let n = 50usize;
    {
        let client = grid.client("simple");
        let a = client.put(&system(n), &[], DataMode::Sticky).unwrap();
        // While the client lives it renews: past several leases the data is still there.
        std::thread::sleep(std::time::Duration::from_secs(3));
        let mut back = vec![0.0; n * n];
        client.get(&a, &mut back).unwrap();
        assert_eq!(back, system(n));
    }
    // The client is gone: nothing renews its handle, which goes with its bytes.
    let records = || {
        grid.runtime
            .block_on(grid.grid().metaserver.all_data())
            .unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while grid.grid().stored_bytes().iter().sum::<u64>() > 0 || !records().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the dead client's data stayed: {:?} bytes, {:?}",
            grid.grid().stored_bytes(),
            records()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// A grid of one server in the test's process and one in its own, both registered, whose
/// heartbeats time out within a second once it is killed.
fn grid_with_a_server_to_kill() -> (TestGrid, common::ExternalServer) {
    let grid = TestGrid::start(vec![1], |o| {
        o.heartbeat_seconds = 0.2;
        o.heartbeat_timeout_seconds = 1.0;
    });
    let external = common::ExternalServer::start(&grid, &["linpack"]);
    grid.runtime.block_on(grid.grid().wait_until_up(2)).unwrap();
    (grid, external)
}

#[test]
fn a_sticky_handle_whose_only_server_died_is_named_with_that_server_and_nothing_hangs() {
    let (grid, mut external) = grid_with_a_server_to_kill();
    let client = grid.client("simple");
    let n = 40usize;
    // Put until one lands on the external server (the emptiest takes each new handle).
    let mut handles = Vec::new();
    let on_external = loop {
        let d = client.put(&system(n), &[], DataMode::Sticky).unwrap();
        let servers = client
            .data()
            .unwrap()
            .into_iter()
            .find(|i| i.data == d)
            .unwrap()
            .servers;
        if servers == [external.address.clone()] {
            break d;
        }
        handles.push(d);
        assert!(handles.len() < 10, "no handle went to the external server");
        // The next put sees this one's bytes in the servers' next load samples.
        std::thread::sleep(std::time::Duration::from_millis(1500));
    };
    external.kill();
    let ipvt = client
        .empty(ElementType::Int, &[n as u64], DataMode::Sticky)
        .unwrap();
    // Once the metaserver has marked it down, the call is refused naming handle and server;
    // until then, it fails when its input cannot be fetched. Neither waits forever.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let refused = loop {
        let error = client
            .transaction(|tx| {
                tx.call(
                    "dgefa",
                    &[(&on_external).into(), (n as i32).into(), (&ipvt).into()],
                )?;
                Ok(())
            })
            .unwrap_err();
        if error.message.contains("no copy on a server that is up") {
            break error;
        }
        assert!(std::time::Instant::now() < deadline, "{error}");
        std::thread::sleep(std::time::Duration::from_millis(300));
    };
    assert!(refused.message.contains(on_external.id()), "{refused}");
    assert!(refused.message.contains(&external.address), "{refused}");
    // The handles on the live server still work.
    let mut back = vec![0.0; n * n];
    for d in &handles {
        client.get(d, &mut back).unwrap();
        assert_eq!(back, system(n));
    }
}

#[test]
fn persistent_data_in_two_copies_loses_nothing_with_a_server_even_after_a_write() {
    let (grid, mut external) = grid_with_a_server_to_kill();
    let client = grid.client("simple");
    let n = 40usize;
    let a0 = system(n);
    let bytes = bytes::Bytes::copy_from_slice(bytemuck::cast_slice(&a0));
    let shape = ninf::grid::Shape {
        dims: &[n as u64, n as u64],
        fortran_order: true,
    };
    let runtime = ninf::runtime::runtime().unwrap();
    let sticky = runtime.block_on(client.inner().put_bytes_replicated(
        ElementType::Double,
        shape,
        bytes.clone(),
        DataMode::Sticky,
        2,
    ));
    assert!(
        sticky
            .unwrap_err()
            .message
            .contains("needs mode \"persistent\""),
        "only persistent data is replicated"
    );
    let put_two = || {
        runtime.block_on(client.inner().put_bytes_replicated(
            ElementType::Double,
            shape,
            bytes.clone(),
            DataMode::Persistent,
            2,
        ))
    };
    let a = put_two().unwrap();
    let mut copies = client.data().unwrap()[0].servers.clone();
    copies.sort();
    let mut both = grid.grid().endpoints.servers.clone();
    both.push(external.address.clone());
    both.sort();
    assert_eq!(copies, both, "a copy on each server");
    // A call writes a new value (factored in place): it is copied to the other server, so
    // that the handle is in two copies again.
    let b0: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let (a1, _, _) = solved_by_sending(&client, &a0, &b0);
    let pivots = client
        .empty(ElementType::Int, &[n as u64], DataMode::Sticky)
        .unwrap();
    client
        .transaction(|tx| {
            tx.call("dgefa", &[(&a).into(), (n as i32).into(), (&pivots).into()])?;
            Ok(())
        })
        .unwrap();
    let mut copies = copies_of(&client, &a);
    copies.sort();
    assert_eq!(copies, both, "the new value is kept in two copies too");
    external.kill();
    // Two copies cannot be kept with one server left: refused (a client may wait for
    // servers), whether the metaserver knows yet that the server died or the put finds out,
    // and nothing of the refused put is left.
    let refused = put_two().unwrap_err();
    assert_eq!(refused.kind, ninf::ErrorKind::RpcRefused, "{refused}");
    assert!(
        refused
            .message
            .contains("2 copies need as many up servers with room; 1 have it"),
        "{refused}"
    );
    assert_eq!(
        client.data().unwrap().len(),
        2,
        "the handle and the pivots only"
    );
    // Read back from the copy that answers, at once: the new value, wherever it was written.
    let mut back = vec![0.0; n * n];
    client.get(&a, &mut back).unwrap();
    assert_eq!(back, a1);
    // Once the metaserver has marked the dead server down, calls read the live copy.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while grid.status().servers.iter().filter(|s| s.up).count() > 1 {
        assert!(std::time::Instant::now() < deadline, "never marked down");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (_, _, expected) = solved_by_sending(&client, &a1, &b0);
    let ipvt = client
        .empty(ElementType::Int, &[n as u64], DataMode::Sticky)
        .unwrap();
    let mut x = b0.clone();
    client
        .transaction(|tx| {
            let xb = tx.buffer(&mut x);
            tx.call("dgefa", &[(&a).into(), (n as i32).into(), (&ipvt).into()])?;
            tx.call(
                "dgesl",
                &[(&a).into(), (n as i32).into(), (&ipvt).into(), xb.into()],
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!(x, expected);
}

/// Where `d`'s copies are, as the client's listing says.
fn copies_of(client: &ninf::grid::GridClient, d: &ninf::grid::DataRef) -> Vec<String> {
    let listed = client.data().unwrap();
    let entry = listed.iter().find(|e| &e.data == d).expect("listed");
    let mut servers = entry.servers.clone();
    servers.sort();
    servers
}

#[test]
fn under_a_small_data_cap_replicas_go_least_recently_used_first_and_last_copies_never() {
    // Two servers that keep at most 20,000 bytes of data each: two arrays of 8,000 bytes
    // and half of a third.
    let grid = TestGrid::start(vec![1, 1], |o| o.data_cap_bytes = 20_000);
    let client = grid.client("simple");
    let runtime = ninf::runtime::runtime().unwrap();
    let values = |k: usize| -> Vec<f64> { (0..1000).map(|i| (i * k) as f64).collect() };
    let put = |k: usize, mode: DataMode, replicas: u32| {
        let bytes = bytes::Bytes::copy_from_slice(bytemuck::cast_slice(&values(k)));
        let shape = ninf::grid::Shape {
            dims: &[1000],
            fortran_order: true,
        };
        runtime.block_on(client.inner().put_bytes_replicated(
            ElementType::Double,
            shape,
            bytes,
            mode,
            replicas,
        ))
    };
    let mut both = grid.grid().endpoints.servers.clone();
    both.sort();
    let status = grid.runtime.block_on(async {
        let channel =
            ninf_proto::net::connect(&grid.grid().endpoints.metaserver, None, Default::default())
                .await
                .unwrap();
        ninf_proto::v1::scheduling_client::SchedulingClient::new(channel)
            .status(ninf_proto::v1::StatusRequest {
                recent_graphs: 0,
                data: false,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    });
    let caps: Vec<u64> = status.servers.iter().map(|s| s.data_cap_bytes).collect();
    assert_eq!(
        caps,
        vec![20_000, 20_000],
        "the status shows each server's cap"
    );
    let h1 = put(1, DataMode::Persistent, 2).unwrap();
    let h2 = put(2, DataMode::Persistent, 2).unwrap();
    assert_eq!(copies_of(&client, &h1), both);
    assert_eq!(copies_of(&client, &h2), both);
    // h1 is read, so h2 is the least recently used.
    let mut back = vec![0.0; 1000];
    client.get(&h1, &mut back).unwrap();
    // h3 fits on neither server as it stands: one of them drops its replica of h2.
    let h3 = put(3, DataMode::Sticky, 1).unwrap();
    let at = copies_of(&client, &h3);
    assert_eq!(at.len(), 1);
    let other: Vec<String> = both.iter().filter(|s| **s != at[0]).cloned().collect();
    assert_eq!(
        copies_of(&client, &h2),
        other,
        "h2's replica beside h3 went"
    );
    assert_eq!(copies_of(&client, &h1), both, "h1 was used since");
    // h4: the only replica left is h1's, on both servers; one of them drops it, and h1
    // keeps its other copy.
    let h4 = put(4, DataMode::Sticky, 1).unwrap();
    assert_eq!(copies_of(&client, &h1).len(), 1);
    assert_eq!(copies_of(&client, &h4).len(), 1);
    // Every server now keeps 16,000 bytes of last copies: h5 fits nowhere.
    let refused = put(5, DataMode::Sticky, 1).unwrap_err();
    assert!(
        refused
            .message
            .contains("no server has room for 8000 bytes")
            && refused
                .message
                .contains("the most any up server can take is 4000 bytes"),
        "{}",
        refused.message
    );
    // Nothing was lost, and the evicted replicas' bytes are gone from the servers.
    for (k, d) in [(1, &h1), (2, &h2), (3, &h3), (4, &h4)] {
        client.get(d, &mut back).unwrap();
        assert_eq!(back, values(k), "h{k}");
    }
    assert_eq!(
        client.data().unwrap().len(),
        4,
        "the refused put left no handle"
    );
    let evictions = grid
        .grid()
        .metaserver
        .events_since(0, 1000)
        .into_iter()
        .filter(|e| e.kind == "evicted")
        .count();
    assert_eq!(evictions, 2, "each eviction is an event");
    let stored: Vec<u64> = grid.grid().stored_bytes();
    assert_eq!(stored, vec![16_000, 16_000]);
    for d in [&h1, &h2, &h3, &h4] {
        client.free(d).unwrap();
    }
    // A call's output written into a handle makes room too: `echo` writes 16,000 bytes
    // beside g's replica (8,000), and that replica goes.
    let g = put(6, DataMode::Persistent, 2).unwrap();
    let e = client
        .empty(ElementType::Double, &[2000], DataMode::Sticky)
        .unwrap();
    let mut x: Vec<f64> = (0..2000).map(|i| i as f64).collect();
    client
        .transaction(|tx| {
            let xb = tx.buffer(&mut x);
            tx.call("echo", &[2000i64.into(), xb.into(), (&e).into()])?;
            Ok(())
        })
        .unwrap();
    let written = copies_of(&client, &e);
    assert_eq!(written.len(), 1);
    let left: Vec<String> = both.iter().filter(|s| **s != written[0]).cloned().collect();
    assert_eq!(
        copies_of(&client, &g),
        left,
        "g's replica beside the output went"
    );
    let mut out = vec![0.0; 2000];
    client.get(&e, &mut out).unwrap();
    assert_eq!(out, x);
    let mut stored = grid.grid().stored_bytes();
    stored.sort();
    assert_eq!(stored, vec![8_000, 16_000]);
    client.free(&g).unwrap();
    client.free(&e).unwrap();
    grid.assert_no_leftovers();
}

/// Two `echo` calls of `d` in one transaction under round robin: one on each server. Returns
/// the servers they ran on and what each returned.
fn echo_twice(
    client: &ninf::grid::GridClient,
    d: &ninf::grid::DataRef,
) -> (Vec<String>, [Vec<f64>; 2]) {
    let n = d.len();
    let (mut y0, mut y1) = (vec![0.0; n], vec![0.0; n]);
    let plan = client
        .transaction(|tx| {
            let (b0, b1) = (tx.buffer(&mut y0), tx.buffer(&mut y1));
            tx.call("echo", &[(n as i64).into(), d.into(), b0.into()])?;
            tx.call("echo", &[(n as i64).into(), d.into(), b1.into()])?;
            Ok(())
        })
        .unwrap();
    let mut on: Vec<String> = plan.tasks.iter().map(|t| t.server.clone()).collect();
    on.sort();
    (on, [y0, y1])
}

#[test]
fn persistent_data_read_on_another_server_is_kept_there_where_it_fits_and_sticky_data_is_read_in_place_on_its_host()
 {
    // Each server keeps at most 12,000 bytes: one array of 8,000 bytes, not two.
    let grid = TestGrid::start(vec![1, 1], |o| o.data_cap_bytes = 12_000);
    let client = grid.client("round-robin");
    let mut both = grid.grid().endpoints.servers.clone();
    both.sort();
    let values: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5).collect();

    // Sticky data never moves, but the servers of its host read it where it lies: round
    // robin runs one read on each server, and the reader keeps no copy.
    let s = client.put(&values[..], &[1000], DataMode::Sticky).unwrap();
    let holder = copies_of(&client, &s);
    let (on, [y0, y1]) = echo_twice(&client, &s);
    assert_eq!(on, both, "one read on each server of the host");
    assert_eq!((&y0, &y1), (&values, &values));
    assert_eq!(
        copies_of(&client, &s),
        holder,
        "sticky data stays in one copy"
    );
    assert_eq!(
        grid.grid().stored_bytes().iter().sum::<u64>(),
        8_000,
        "the reader stored nothing"
    );
    client.free(&s).unwrap();

    // Persistent data read on a server that has no room for it (a sticky array fills it)
    // is not kept there, and leaves no bytes behind.
    let p = client
        .put(&values[..], &[1000], DataMode::Persistent)
        .unwrap();
    let p_on = copies_of(&client, &p);
    let q = client.put(&values[..], &[1000], DataMode::Sticky).unwrap();
    let q_on = copies_of(&client, &q);
    assert_ne!(p_on, q_on, "q fits only beside nothing");
    let (on, [y0, y1]) = echo_twice(&client, &p);
    assert_eq!(on, both);
    assert_eq!((&y0, &y1), (&values, &values));
    assert_eq!(
        copies_of(&client, &p),
        p_on,
        "no room for a replica beside q"
    );
    assert_eq!(grid.grid().stored_bytes(), vec![8_000, 8_000]);

    // Once q is gone there is room: the server that read p keeps it as a replica, listed
    // and counted, and a later read there finds it.
    client.free(&q).unwrap();
    let (_, [y0, y1]) = echo_twice(&client, &p);
    assert_eq!((&y0, &y1), (&values, &values));
    assert_eq!(
        copies_of(&client, &p),
        both,
        "the reading server kept a replica"
    );
    assert_eq!(grid.grid().stored_bytes(), vec![8_000, 8_000]);
    let (_, [y0, y1]) = echo_twice(&client, &p);
    assert_eq!((&y0, &y1), (&values, &values));
    assert_eq!(
        copies_of(&client, &p),
        both,
        "one replica per server, not one per read"
    );
    assert_eq!(grid.grid().stored_bytes(), vec![8_000, 8_000]);
    let mut back = vec![0.0; 1000];
    client.get(&p, &mut back).unwrap();
    assert_eq!(back, values);
    client.free(&p).unwrap();
    grid.assert_no_leftovers();
}

/// Puts the n × n matrix `a` as a persistent handle in two copies.
fn put_persistent_in_two(
    client: &ninf::grid::GridClient,
    a: &[f64],
    n: usize,
) -> ninf::grid::DataRef {
    let bytes = bytes::Bytes::copy_from_slice(bytemuck::cast_slice(a));
    let shape = ninf::grid::Shape {
        dims: &[n as u64, n as u64],
        fortran_order: true,
    };
    let runtime = ninf::runtime::runtime().unwrap();
    runtime
        .block_on(client.inner().put_bytes_replicated(
            ElementType::Double,
            shape,
            bytes,
            DataMode::Persistent,
            2,
        ))
        .unwrap()
}

/// Waits up to 30 s for `condition`.
fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A persistent handle in two copies whose holders are lost one after another is copied
/// again each time from the copy left, so it loses nothing; a holder that restarts comes
/// back with empty storage, and its copy is dropped from the records (then made again
/// there). The in-process server's data cap keeps every copy on the external servers,
/// which are killed and restarted.
#[test]
fn lost_replicas_are_made_again_from_the_copy_left_and_a_restarted_servers_copies_are_dropped() {
    let grid = TestGrid::start(vec![1], |o| {
        o.heartbeat_seconds = 0.2;
        o.heartbeat_timeout_seconds = 1.0;
        o.data_cap_bytes = 1000;
    });
    let mut e = common::ExternalServer::start_with(&grid, &["linpack"], "e", "");
    let mut f = common::ExternalServer::start_with(&grid, &["linpack"], "f", "");
    grid.runtime.block_on(grid.grid().wait_until_up(3)).unwrap();
    let client = grid.client("simple");
    let n = 40usize;
    let a = system(n);
    let d = put_persistent_in_two(&client, &a, n);
    let mut both = vec![e.address.clone(), f.address.clone()];
    both.sort();
    assert_eq!(copies_of(&client, &d), both);

    // e dies: once it is marked down, its copy no longer counts and g gets one from f.
    let g = common::ExternalServer::start_with(&grid, &["linpack"], "g", "");
    grid.runtime.block_on(grid.grid().wait_until_up(4)).unwrap();
    e.kill();
    eventually("a copy on g", || {
        copies_of(&client, &d).contains(&g.address)
    });
    // f dies too: the copy made on g is the one left, and it holds the data.
    f.kill();
    let mut back = vec![0.0; n * n];
    client.get(&d, &mut back).unwrap();
    assert_eq!(back, a, "read from g's copy");

    // e restarts on its address, a new process with empty storage: its copy is dropped from
    // the records, and, f being down, e gets the second copy again, from g.
    let listed = copies_of(&client, &d);
    assert!(listed.contains(&e.address), "{listed:?}");
    let events = || grid.grid().metaserver.events_since(0, 1000);
    e.restart();
    // The repair records a copy before it logs it, so the wait is for the log too.
    eventually("e's old copy dropped and a new one made there", || {
        let servers = client.data().unwrap()[0].servers.clone();
        let seen = events();
        let on_e = |kind: &str| {
            seen.iter()
                .any(|ev| ev.kind == kind && ev.server == e.address)
        };
        on_e("restarted") && on_e("replicated") && servers.contains(&e.address)
    });
    let replicated: Vec<String> = events()
        .into_iter()
        .filter(|ev| ev.kind == "replicated")
        .map(|ev| ev.server)
        .collect();
    // g's copy came first, then e's (a busy machine may show a round again, never a copy
    // anywhere else).
    assert_eq!(replicated.first(), Some(&g.address), "{replicated:?}");
    assert!(replicated.contains(&e.address), "{replicated:?}");
    assert!(
        replicated
            .iter()
            .all(|s| *s == g.address || *s == e.address),
        "{replicated:?}"
    );
    drop(g);
    let mut back = vec![0.0; n * n];
    client.get(&d, &mut back).unwrap();
    assert_eq!(back, a, "read from e's new copy");
    client.free(&d).unwrap();
}

/// A new value whose replica could not be copied (its server died, and the metaserver does
/// not know yet) is handed to the metaserver's repair, which copies it to another server:
/// the value outlives the server it was written on. Here the repair is asked directly, as
/// the proxy asks it after a failed copy; the long heartbeat timeout keeps the dead server
/// listed as up, as in the moments after it died.
#[test]
fn a_repair_asked_for_avoids_the_dead_server_and_copies_the_value_elsewhere() {
    use ninf_proto::v1;
    let grid = TestGrid::start(vec![1], |o| {
        o.heartbeat_seconds = 0.2;
        o.heartbeat_timeout_seconds = 60.0;
        o.data_cap_bytes = 1000;
    });
    let e = common::ExternalServer::start_with(&grid, &["linpack"], "e", "");
    let mut f = common::ExternalServer::start_with(&grid, &["linpack"], "f", "");
    grid.runtime.block_on(grid.grid().wait_until_up(3)).unwrap();
    let client = grid.client("simple");
    let n = 40usize;
    let a = system(n);
    let d = put_persistent_in_two(&client, &a, n);
    let g = common::ExternalServer::start_with(&grid, &["linpack"], "g", "");
    grid.runtime.block_on(grid.grid().wait_until_up(4)).unwrap();
    f.kill();
    let metaserver = &grid.grid().metaserver;
    let owner = grid
        .runtime
        .block_on(metaserver.all_data())
        .unwrap()
        .into_iter()
        .find(|info| info.id == d.id())
        .expect("recorded")
        .owner;
    let repair = |owner: &str| {
        grid.runtime
            .block_on(metaserver.repair_data_handle(v1::RepairDataRequest {
                id: d.id().to_string(),
                owner: owner.to_string(),
                avoid: vec![f.address.clone()],
            }))
    };
    // Another owner's handle is unknown to it, and nothing is copied.
    let refused = repair("someone-else").unwrap_err();
    assert!(refused.to_string().contains(d.id()), "{refused}");
    let reply = repair(&owner).unwrap();
    assert_eq!(reply.copies_made, 1);
    let mut servers: Vec<String> = reply
        .info
        .unwrap()
        .copies
        .into_iter()
        .map(|c| c.server)
        .collect();
    servers.sort();
    let mut expected = vec![e.address.clone(), f.address.clone(), g.address.clone()];
    expected.sort();
    assert_eq!(
        servers, expected,
        "e's and g's copies, and f's until it is marked down"
    );
    // Asked again, nothing is short: no copy.
    assert_eq!(repair(&owner).unwrap().copies_made, 0);
    // e goes too: g's copy holds the value.
    drop(e);
    let mut back = vec![0.0; n * n];
    client.get(&d, &mut back).unwrap();
    assert_eq!(back, a, "read from g's copy");
    drop(g);
}

/// A put sent again under its name (its first try's reply was lost, say to a proxy that
/// died) makes one handle: the second try replaces the first, whose bytes are deleted; a put
/// under another name is another handle. The client library names every put and sends it
/// again while the proxy is unreachable; here two tries are sent by hand.
#[test]
fn a_put_sent_again_under_its_name_replaces_its_first_try() {
    use ninf_proto::v1;
    let grid = TestGrid::start(vec![1], |_| {});
    let n = 64usize;
    let values: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let data = bytes::Bytes::copy_from_slice(bytemuck::cast_slice(&values));
    let named = |put_id: &str| {
        let spec = v1::DataSpec {
            element_type: v1::ElementType::Double as i32,
            bytes: data.len() as u64,
            shape: vec![n as u64],
            mode: v1::DataMode::Sticky as i32,
            put_id: put_id.to_string(),
            ..Default::default()
        };
        let chunks = vec![
            v1::DataUpload {
                spec: Some(spec),
                data: bytes::Bytes::new(),
                shared: None,
            },
            v1::DataUpload {
                spec: None,
                data: data.clone(),
                shared: None,
            },
        ];
        identified(tokio_stream::iter(chunks))
    };
    let proxy = grid.grid().endpoints.proxy.clone();
    let (first, second, other, listed, gone) = grid.runtime.block_on(async {
        let channel = ninf_proto::net::connect(&proxy, None, Default::default())
            .await
            .unwrap();
        let mut client = v1::proxy_client::ProxyClient::new(channel);
        let mut put = async |name: &str| client.put_data(named(name)).await.unwrap().into_inner();
        let (first, second, other) = (put("p1").await, put("p1").await, put("p2").await);
        let listed = client
            .list_data(identified(v1::ListDataRequest { ids: Vec::new() }))
            .await
            .unwrap()
            .into_inner();
        let gone = client
            .get_data(identified(v1::DataHandle {
                id: first.id.clone(),
            }))
            .await
            .err()
            .unwrap();
        (first, second, other, listed, gone)
    });
    let mut ids: Vec<String> = listed.data.iter().map(|d| d.id.clone()).collect();
    ids.sort();
    let mut expected = vec![second.id.clone(), other.id.clone()];
    expected.sort();
    assert_eq!(
        ids, expected,
        "the first try is replaced, the other name kept"
    );
    assert_ne!(first.id, second.id);
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone}");
    assert_eq!(
        grid.grid().stored_bytes(),
        vec![2 * data.len() as u64],
        "the first try's bytes are deleted"
    );
}

/// A client on the proxy's host puts a large array by writing it once into a region it
/// shares with the proxy, which reads it there: ten puts in a row, more than the eight
/// regions a client keeps, so each must have been released for the next; every value read
/// back whole. Turned off (`same_host_uploads = false`), the bytes go through gRPC.
#[test]
fn a_large_put_from_the_proxys_host_goes_in_shared_memory_unless_turned_off() {
    for same_host_uploads in [true, false] {
        let grid = TestGrid::start(vec![1], |o| o.same_host_uploads = same_host_uploads);
        let metrics = grid.grid().endpoints.metrics.clone();
        let client = grid.client("simple");
        // 200,000 doubles: 1.6 MB, over the 256 KiB the client shares and the 1 MiB that
        // takes the server's bulk path.
        let n = 200_000usize;
        for round in 0..10 {
            let values: Vec<f64> = (0..n).map(|i| (i * (round + 1)) as f64).collect();
            let d = client.put(&values, &[n as u64], DataMode::Sticky).unwrap();
            let mut back = vec![0.0; n];
            client.get(&d, &mut back).unwrap();
            assert_eq!(back, values, "round {round}");
            client.free(&d).unwrap();
        }
        let shared = sample_sum(
            &scrape(&metrics["proxy"]),
            "ninf_bytes_total",
            &["direction=\"in\"", "path=\"shared\""],
        );
        let expected = if same_host_uploads { 10 * 8 * n } else { 0 };
        assert_eq!(
            shared, expected as f64,
            "same_host_uploads = {same_host_uploads}"
        );
        // The proxy lends the client's region on, and the server copies the array from it
        // into its store; bytes that came through gRPC go on through gRPC.
        let server = scrape(&metrics["server-0"]);
        let put_by = |path: &str| {
            let label = format!("path=\"{path}\"");
            sample_sum(&server, "ninf_put_bytes_total", &[label.as_str()])
        };
        let (lent, grpc) = if same_host_uploads {
            (10 * 8 * n, 0)
        } else {
            (0, 10 * 8 * n)
        };
        assert_eq!(
            put_by("lent"),
            lent as f64,
            "lent, same_host_uploads = {same_host_uploads}"
        );
        assert_eq!(
            put_by("grpc"),
            grpc as f64,
            "gRPC, same_host_uploads = {same_host_uploads}"
        );
        grid.assert_no_leftovers();
    }
}

/// The proxy passes a put's bytes on to the server while they still arrive. A client whose
/// stream says one size and sends another (fewer bytes, or more) gets an error naming both,
/// and leaves neither a handle nor any bytes on the server; a put sent in many chunks after
/// them is stored whole.
#[test]
fn a_put_that_sends_fewer_or_more_bytes_than_it_says_leaves_nothing() {
    use ninf_proto::v1;
    let grid = TestGrid::start(vec![1], |_| {});
    let values: Vec<f64> = (0..300_000).map(|i| i as f64).collect();
    let data = bytes::Bytes::copy_from_slice(bytemuck::cast_slice(&values));
    let upload = |says: u64, sent: &bytes::Bytes| {
        let spec = v1::DataSpec {
            element_type: v1::ElementType::Double as i32,
            bytes: says,
            shape: vec![says / 8],
            mode: v1::DataMode::Sticky as i32,
            ..Default::default()
        };
        let first = v1::DataUpload {
            spec: Some(spec),
            data: bytes::Bytes::new(),
            shared: None,
        };
        let rest = sent.chunks(256 << 10).map(|chunk| v1::DataUpload {
            spec: None,
            data: bytes::Bytes::copy_from_slice(chunk),
            shared: None,
        });
        identified(tokio_stream::iter(
            std::iter::once(first).chain(rest).collect::<Vec<_>>(),
        ))
    };
    let whole = data.len() as u64;
    let proxy = grid.grid().endpoints.proxy.clone();
    let (short, long, kept, listed) = grid.runtime.block_on(async {
        let channel = ninf_proto::net::connect(&proxy, None, Default::default())
            .await
            .unwrap();
        let mut client = v1::proxy_client::ProxyClient::new(channel);
        let short = client.put_data(upload(whole + 8, &data)).await.unwrap_err();
        let long = client.put_data(upload(whole - 8, &data)).await.unwrap_err();
        let kept = client
            .put_data(upload(whole, &data))
            .await
            .unwrap()
            .into_inner();
        let listed = client
            .list_data(identified(v1::ListDataRequest { ids: Vec::new() }))
            .await
            .unwrap()
            .into_inner();
        let mut chunks = client
            .get_data(identified(v1::DataHandle {
                id: kept.id.clone(),
            }))
            .await
            .unwrap()
            .into_inner();
        let mut back = Vec::new();
        while let Some(chunk) = chunks.message().await.unwrap() {
            back.extend_from_slice(&chunk.data);
        }
        (short, long, (kept, back), listed)
    });
    let (kept, back) = kept;
    assert_eq!(short.code(), tonic::Code::InvalidArgument, "{short}");
    assert_eq!(
        short.message(),
        format!("the put says {} bytes but sent {whole}", whole + 8)
    );
    assert_eq!(long.code(), tonic::Code::InvalidArgument, "{long}");
    assert_eq!(
        long.message(),
        format!("a put of {} bytes sent more", whole - 8)
    );
    let ids: Vec<&str> = listed.data.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        vec![kept.id.as_str()],
        "only the honest put made a handle"
    );
    assert_eq!(
        grid.grid().stored_bytes(),
        vec![whole],
        "only its bytes are stored"
    );
    assert_eq!(back, data, "stored whole, in order");
}

/// `message` as the client named `put-tester` sends it.
fn identified<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        ninf_proto::net::CLIENT_ID_METADATA,
        tonic::metadata::MetadataValue::from_static("put-tester"),
    );
    request
}
