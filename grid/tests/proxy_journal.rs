//! A proxy SIGKILLed in the middle of a transaction and restarted on its journal: the client
//! sends the transaction again and it completes, its finished tasks not run again, with
//! nothing left on the servers; and a transaction whose client does not come back is deleted
//! from the servers and reported failed; a call in flight when its proxy dies goes on on its
//! server, and the restarted proxy picks up its result instead of running it again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{TestGrid, binaries, sample_sum, scrape};
use ninf::CallError;
use ninf::grid::{GridClient, Plan};
use ninf_client_proxy::journal::{JournalStore, JournaledRun};
use ninf_grid::processes::{Started, free_address, start, write};
use ninf_proto::v1;

/// Milliseconds each call of the chain sleeps: long enough to kill the proxy during one.
const CALL_MS: i32 = 1500;

/// `ninf-proxy` as a child process, journaling beside its configuration.
struct ProxyProcess {
    address: String,
    config: PathBuf,
    journal: PathBuf,
    process: Option<Started>,
}

impl ProxyProcess {
    fn start(dir: &Path, metaserver: &str) -> ProxyProcess {
        let mut proxy = ProxyProcess {
            address: free_address().unwrap(),
            config: dir.join("proxy.toml"),
            journal: dir.join("journal.sqlite"),
            process: None,
        };
        proxy.configure(metaserver, 30.0);
        proxy.restart();
        proxy
    }

    fn configure(&self, metaserver: &str, wait_seconds: f64) {
        let text = format!(
            "listen = \"{}\"\nmetaserver = \"{metaserver}\"\njournal = \"{}\"\n\
             journal_wait_seconds = {wait_seconds:?}\n",
            self.address,
            self.journal.display()
        );
        write(&self.config, &text).unwrap();
    }

    fn kill(&mut self) {
        let mut process = self.process.take().expect("the proxy runs");
        process.0.kill().unwrap();
        process.0.wait().unwrap();
    }

    fn restart(&mut self) {
        let mut command = Command::new(binaries().join("ninf-proxy"));
        command.arg("--config").arg(&self.config);
        self.process = Some(start(command, "proxy").unwrap());
    }

    /// What its journal holds now.
    fn journaled(&self, grid: &TestGrid) -> Vec<JournaledRun> {
        let url = format!("sqlite://{}", self.journal.display());
        grid.runtime.block_on(async {
            let store = JournalStore::open(&url, &self.address).await.unwrap();
            let runs = store.load().await.unwrap();
            store.close().await;
            runs
        })
    }
}

/// Waits up to 30 s for `condition`.
fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..600 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not happen within 30 s");
}

/// Three slow echoes in a chain, x → y1 → y2 → out; returns `out` and the plan.
fn chain(client: &GridClient, x: &[f64]) -> Result<(Vec<f64>, Plan), CallError> {
    let n = x.len() as i64;
    let zeros = vec![0.0; x.len()];
    let mut out = vec![0.0; x.len()];
    let plan = client.transaction(|tx| {
        let input = tx.input(x);
        let (y1, y2) = (tx.scratch(&zeros), tx.scratch(&zeros));
        let last = tx.buffer(&mut out);
        for (from, to) in [(input, y1), (y1, y2), (y2, last)] {
            tx.call(
                "slow_echo",
                &[CALL_MS.into(), n.into(), from.into(), to.into()],
            )?;
        }
        Ok(())
    })?;
    Ok((out, plan))
}

/// Starts the chain on a thread and kills the proxy once its journal shows the first task
/// done (the second is then running).
fn kill_during_chain(
    grid: &TestGrid,
    proxy: &mut ProxyProcess,
    client: GridClient,
    x: &[f64],
) -> std::thread::JoinHandle<Result<(Vec<f64>, Plan), CallError>> {
    let input = x.to_vec();
    let worker = std::thread::spawn(move || chain(&client, &input));
    eventually("the first task in the journal", || {
        proxy
            .journaled(grid)
            .iter()
            .any(|run| !run.tasks.is_empty())
    });
    proxy.kill();
    worker
}

fn no_bytes_left(grid: &TestGrid) -> bool {
    grid.grid().stored_bytes().iter().all(|&b| b == 0)
}

#[test]
fn a_killed_proxy_restarted_on_its_journal_finishes_the_transaction() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = ProxyProcess::start(dir.path(), &grid.grid().endpoints.metaserver);
    let client = GridClient::connect(&proxy.address).unwrap();
    let x: Vec<f64> = (0..64).map(|i| f64::from(i) * 0.5).collect();
    let worker = kill_during_chain(&grid, &mut proxy, client, &x);
    proxy.restart();

    let (out, plan) = worker.join().unwrap().expect("the transaction completes");
    assert_eq!(out, x, "three echoes give x back, bit for bit");
    assert!(
        plan.resumed_tasks >= 1,
        "the first echo survived in storage and was not run again: {plan:?}"
    );
    assert!(no_bytes_left(&grid), "{:?}", grid.grid().stored_bytes());
    eventually("the journal forgetting the transaction", || {
        proxy.journaled(&grid).is_empty()
    });
    let status = grid.status();
    let graph = status
        .graphs
        .iter()
        .find(|g| g.graph_id == plan.graph_id)
        .unwrap();
    assert_eq!(graph.state, "done", "{graph:?}");
}

#[test]
fn a_transaction_its_client_abandons_is_deleted_and_reported_failed() {
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let metaserver = grid.grid().endpoints.metaserver.clone();
    let mut proxy = ProxyProcess::start(dir.path(), &metaserver);
    // This client gives up at once when its proxy goes away.
    let client = GridClient::connect(&proxy.address)
        .unwrap()
        .with_reconnect(Duration::ZERO);
    let x: Vec<f64> = (0..64).map(f64::from).collect();
    let worker = kill_during_chain(&grid, &mut proxy, client, &x);
    let error = worker.join().unwrap().expect_err("the client gave up");
    assert_eq!(error.kind, ninf::ErrorKind::CommunicationFailed, "{error}");
    let orphan = proxy.journaled(&grid).remove(0);

    proxy.configure(&metaserver, 1.0);
    proxy.restart();
    eventually("the orphan given up", || proxy.journaled(&grid).is_empty());
    eventually("the orphan's intermediates deleted", || {
        no_bytes_left(&grid)
    });
    let status = grid.status();
    let graph = status
        .graphs
        .iter()
        .find(|g| g.graph_id == orphan.placement.graph_id)
        .unwrap();
    assert_eq!(graph.state, "failed", "{graph:?}");
    assert_eq!(
        graph.error,
        "the proxy restarted and its client did not send it again in time"
    );
}

#[test]
fn the_journal_keeps_to_postgresql_as_well() {
    use ninf_client_proxy::journal::Entry;
    let postgres = ninf_grid::postgres::LocalPostgres::start().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let run = JournaledRun {
        transaction_id: "client#t1".into(),
        client: "client".into(),
        graph_hash: u64::MAX - 3,
        owner: "proxy/graph-9".into(),
        placement: v1::ScheduleReply {
            graph_id: 9,
            ..Default::default()
        },
        accepted_ms: 17,
        tasks: vec![v1::TaskReport {
            task: 2,
            server: "s:1".into(),
            ..Default::default()
        }],
        commit: Some(v1::JournaledCommit {
            tasks: vec![v1::TaskReport {
                task: 2,
                ..Default::default()
            }],
            writes: vec![v1::HandleObject {
                handle: "h".into(),
                object: Some(v1::ObjectRef {
                    server: "s:1".into(),
                    object_id: "o".into(),
                }),
            }],
            replicas: Vec::new(),
            makespan: 1.5,
            written_copies: vec![v1::HandleObject {
                handle: "h".into(),
                object: Some(v1::ObjectRef {
                    server: "s:2".into(),
                    object_id: "p".into(),
                }),
            }],
            old_copies: vec![v1::HandleObject {
                handle: "h".into(),
                object: Some(v1::ObjectRef {
                    server: "s:3".into(),
                    object_id: "q".into(),
                }),
            }],
        }),
        answered_ms: None,
    };
    // Answered: kept with its commit, its tasks forgotten.
    let answered = JournaledRun {
        transaction_id: "client#t3".into(),
        accepted_ms: 18,
        tasks: Vec::new(),
        answered_ms: Some(40),
        ..run.clone()
    };
    let committed = |id: &str| Entry::Committed {
        transaction_id: id.into(),
        commit: run.commit.clone().unwrap(),
    };
    let loaded = runtime.block_on(async {
        let store = JournalStore::open(&postgres.url, "proxy").await.unwrap();
        let other = run.clone();
        store
            .apply(&[
                Entry::Accepted(Box::new(JournaledRun {
                    tasks: Vec::new(),
                    commit: None,
                    ..run.clone()
                })),
                Entry::TaskKept {
                    transaction_id: run.transaction_id.clone(),
                    report: run.tasks[0].clone(),
                },
                committed("client#t1"),
                Entry::Accepted(Box::new(JournaledRun {
                    transaction_id: "client#t2".into(),
                    ..other
                })),
                committed("client#t2"),
                Entry::Finished("client#t2".into()),
                Entry::Accepted(Box::new(JournaledRun {
                    transaction_id: "client#t3".into(),
                    accepted_ms: 18,
                    ..answered.clone()
                })),
                committed("client#t3"),
                Entry::Answered {
                    transaction_id: "client#t3".into(),
                    at_ms: 40,
                },
            ])
            .await
            .unwrap();
        let loaded = store.load().await.unwrap();
        let answer = store.answer("client#t3").await.unwrap();
        store.forget_answered_before(41).await.unwrap();
        let forgotten = store.answer("client#t3").await.unwrap();
        let left = store.load().await.unwrap().len();
        store.close().await;
        assert_eq!(
            (answer.map(|(p, _)| p.graph_id), forgotten, left),
            (Some(9), None, 1)
        );
        loaded
    });
    // A restarted proxy that abandons the run cleans up where its commit's copies are too.
    assert!(
        loaded[0].servers().contains(&"s:2".to_string()),
        "{:?}",
        loaded[0].servers()
    );
    assert_eq!(loaded, vec![run, answered]);
}

/// Data kept on the grid is the metaserver's record and the servers' bytes, not the proxy's:
/// a handle put through a proxy that is then killed is read and used through the restarted
/// one.
#[test]
fn data_handles_outlive_the_proxy_they_were_put_through() {
    let grid = TestGrid::start(vec![1], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = ProxyProcess::start(dir.path(), &grid.grid().endpoints.metaserver);
    let client = GridClient::connect(&proxy.address).unwrap();
    let x: Vec<f64> = (0..500).map(|i| f64::from(i) * 0.25).collect();
    let kept = client.put(&x, &[], ninf::grid::DataMode::Sticky).unwrap();
    proxy.kill();
    proxy.restart();
    let mut back = vec![0.0; x.len()];
    client.get(&kept, &mut back).unwrap();
    assert_eq!(back, x);
    // And a call reads it on the grid through the new proxy.
    let mut out = vec![0.0; x.len()];
    client
        .transaction(|tx| {
            let y = tx.buffer(&mut out);
            tx.call(
                "slow_echo",
                &[1.into(), (x.len() as i64).into(), (&kept).into(), y.into()],
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!(out, x);
    assert_eq!(client.data().unwrap().len(), 1);
    client.free(&kept).unwrap();
    assert!(no_bytes_left(&grid));
}

/// Requests about data made while the proxy is down (a put, a read, a listing, a free) are
/// asked again until it is back, as transactions are: none fails for the restart, and the
/// put made while it was down makes one handle, not one per attempt.
#[test]
fn data_requests_made_while_the_proxy_restarts_wait_for_it() {
    let grid = TestGrid::start(vec![1], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = ProxyProcess::start(dir.path(), &grid.grid().endpoints.metaserver);
    let client = GridClient::connect(&proxy.address).unwrap();
    let x: Vec<f64> = (0..300).map(f64::from).collect();
    let kept = client.put(&x, &[], ninf::grid::DataMode::Sticky).unwrap();
    proxy.kill();
    let asking = std::thread::spawn(move || {
        let mut back = vec![0.0; x.len()];
        client.get(&kept, &mut back).unwrap();
        assert_eq!(back, x);
        let second = client
            .put(&back, &[], ninf::grid::DataMode::Sticky)
            .unwrap();
        let listed: Vec<String> = client
            .data()
            .unwrap()
            .iter()
            .map(|d| d.data.id().to_string())
            .collect();
        assert_eq!(listed, [kept.id(), second.id()]);
        client.free(&kept).unwrap();
        client.free(&second).unwrap();
        client.data().unwrap().len()
    });
    std::thread::sleep(std::time::Duration::from_secs(1));
    proxy.restart();
    assert_eq!(asking.join().unwrap(), 0, "every handle freed");
    assert!(no_bytes_left(&grid));
}

/// The case: a 20 s call whose proxy is killed at 5 s and restarted goes on on its
/// server meanwhile, and the restarted proxy is answered by that run (the server counts the
/// rejoin) instead of running it again.
#[test]
fn a_call_in_flight_outlives_its_proxy_and_is_not_run_again() {
    const LONG_MS: i32 = 20_000;
    let grid = TestGrid::start(vec![1, 1], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = ProxyProcess::start(dir.path(), &grid.grid().endpoints.metaserver);
    let client = GridClient::connect(&proxy.address).unwrap();
    let x: Vec<f64> = (0..16).map(f64::from).collect();
    let input = x.clone();
    let started = Instant::now();
    let worker = std::thread::spawn(move || {
        let mut out = vec![0.0; input.len()];
        let n = input.len() as i64;
        let plan = client.transaction(|tx| {
            let (from, to) = (tx.input(&input), tx.buffer(&mut out));
            tx.call(
                "slow_echo",
                &[LONG_MS.into(), n.into(), from.into(), to.into()],
            )?;
            Ok(())
        })?;
        Ok::<_, CallError>((out, plan))
    });
    eventually("the transaction in the journal", || {
        !proxy.journaled(&grid).is_empty()
    });
    std::thread::sleep(Duration::from_secs(5).saturating_sub(started.elapsed()));
    proxy.kill();
    let killed_at = started.elapsed();
    proxy.restart();

    let (out, plan) = worker.join().unwrap().expect("the transaction completes");
    let elapsed = started.elapsed();
    assert_eq!(out, x, "the echo gives x back");
    let rejoined: f64 = grid
        .grid()
        .endpoints
        .metrics
        .iter()
        .filter(|(name, _)| name.starts_with("server-"))
        .map(|(_, address)| sample_sum(&scrape(address), "ninf_calls_rejoined_total", &[]))
        .sum();
    assert_eq!(
        rejoined, 1.0,
        "the restarted proxy rejoined the run: {plan:?}"
    );
    eprintln!(
        "a {LONG_MS} ms call, its proxy killed at {:.1} s and restarted: done after {:.1} s",
        killed_at.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    eventually("the journal forgetting the transaction", || {
        proxy.journaled(&grid).is_empty()
    });
    assert!(no_bytes_left(&grid), "{:?}", grid.grid().stored_bytes());
}

/// A diagonally dominant matrix of order `n`, column-major.
fn dominant(n: usize) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for j in 0..n {
        for i in 0..n {
            a[i + j * n] = 1.0 / (1.0 + (i + 2 * j) as f64) + if i == j { n as f64 } else { 0.0 };
        }
    }
    a
}

/// A transaction that writes a handle in place (dgefa's INOUT) is not run again by the
/// restarted proxy once it has run to its end: it would factor the factors. Its proxy is
/// killed after the commit is journaled and before the handle's new value is recorded (the
/// metaserver is stopped, so the record waits); the restarted proxy records it from the
/// journal and answers the resent transaction from there, nothing run twice.
#[test]
fn a_transaction_that_wrote_a_handle_is_finished_from_the_journal_not_run_again() {
    let n = 40usize;
    let mut grid = TestGrid::start(vec![2], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = ProxyProcess::start(dir.path(), &grid.grid().endpoints.metaserver);
    let client = GridClient::connect(&proxy.address).unwrap();
    let a = dominant(n);
    let b: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
    let shape = [n as u64, n as u64];
    let handle = client
        .put(&a, &shape, ninf::grid::DataMode::Sticky)
        .unwrap();
    let (tx_handle, rhs) = (handle.clone(), b.clone());
    let worker = std::thread::spawn(move || {
        let order = n as i32;
        let pivots = vec![0i32; n];
        let mut x = rhs;
        let echoed = vec![0.0; 4];
        let mut back = vec![0.0; 4];
        let plan = client.transaction(|tx| {
            let ipvt = tx.scratch(&pivots);
            let x = tx.buffer(&mut x);
            tx.call("dgefa", &[(&tx_handle).into(), order.into(), ipvt.into()])?;
            tx.call(
                "dgesl",
                &[(&tx_handle).into(), order.into(), ipvt.into(), x.into()],
            )?;
            let (from, to) = (tx.input(&echoed), tx.buffer(&mut back));
            tx.call(
                "slow_echo",
                &[3000i32.into(), 4i64.into(), from.into(), to.into()],
            )?;
            Ok(())
        })?;
        let mut factors = vec![0.0; n * n];
        client.get(&tx_handle, &mut factors)?;
        client.free(&tx_handle)?;
        Ok::<_, CallError>((x, factors, plan))
    });
    eventually("the transaction in the journal", || {
        !proxy.journaled(&grid).is_empty()
    });
    let embedded = grid.grid.as_mut().unwrap();
    grid.runtime.block_on(embedded.stop_metaserver()).unwrap();
    eventually("the commit in the journal", || {
        proxy
            .journaled(&grid)
            .iter()
            .any(|run| run.commit.is_some())
    });
    proxy.kill();
    let embedded = grid.grid.as_mut().unwrap();
    grid.runtime.block_on(embedded.start_metaserver()).unwrap();
    proxy.restart();

    let (x, factors, plan) = worker.join().unwrap().expect("the transaction completes");
    let mut lu = a;
    let mut ipvt = vec![0i32; n];
    let mut local = b;
    ninf_routines::linpack::dgefa(&mut lu, n as i32, &mut ipvt).unwrap();
    ninf_routines::linpack::dgesl(&lu, n as i32, &ipvt, &mut local).unwrap();
    assert_eq!(
        factors, lu,
        "the handle holds the factors of a, not of its factors"
    );
    assert_eq!(x, local, "the reply is the first run's");
    assert_eq!(plan.resumed_tasks, 3, "{plan:?}");
    let calls = |routine: &str| routine_calls(&grid, routine);
    assert_eq!((calls("dgefa"), calls("slow_echo")), (1.0, 1.0));
    eventually("the journal keeping only the transaction's answer", || {
        proxy
            .journaled(&grid)
            .iter()
            .all(|run| run.answered_ms.is_some() && run.tasks.is_empty())
    });
    assert!(no_bytes_left(&grid), "{:?}", grid.grid().stored_bytes());
}

/// Calls of `routine` the grid's servers have run.
fn routine_calls(grid: &TestGrid, routine: &str) -> f64 {
    let routine = format!("routine=\"{routine}\"");
    grid.grid()
        .endpoints
        .metrics
        .iter()
        .filter(|(name, _)| name.starts_with("server-"))
        .map(|(_, address)| sample_sum(&scrape(address), "ninf_calls_total", &[&routine]))
        .sum()
}

/// `dgefa` over handle `id` (order `n`) in place, its pivots returned, sent as the
/// transaction `transaction_id`: what a client sends again when its reply was lost.
fn dgefa_request(id: &str, n: usize, transaction_id: &str) -> v1::RunRequest {
    use v1::call_argument::Source;
    let argument = |source| v1::CallArgument {
        source: Some(source),
    };
    let order = v1::ArgumentValue {
        value: Some(v1::argument_value::Value::IntValue(n as i64)),
    };
    let handle = v1::DataArgument {
        id: id.to_string(),
        reads: true,
        writes: true,
    };
    v1::RunRequest {
        graph: Some(v1::TaskGraph {
            tasks: vec![v1::GraphTask {
                label: "dgefa#0".into(),
                function: "dgefa".into(),
                scalars: [("n".to_string(), n as i64)].into_iter().collect(),
                client_out_bytes: 4 * n as u64,
                data: Vec::new(),
            }],
            edges: Vec::new(),
        }),
        arguments: vec![v1::TaskArguments {
            arguments: vec![
                argument(Source::Data(handle)),
                argument(Source::Value(order)),
                v1::CallArgument { source: None },
            ],
            returns: vec![2],
        }],
        transaction_id: transaction_id.to_string(),
        ..Default::default()
    }
}

/// A client whose reply was lost sends its transaction again: one that wrote a handle is
/// answered from the journal, the same answer, and not run over the value it wrote; so
/// after a proxy restart too. Another graph under the same id is a new transaction.
#[test]
fn a_transaction_that_wrote_a_handle_is_answered_again_when_its_reply_was_lost() {
    let n = 30usize;
    let grid = TestGrid::start(vec![1], |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut proxy = ProxyProcess::start(dir.path(), &grid.grid().endpoints.metaserver);
    let client = GridClient::connect(&proxy.address).unwrap();
    let a = dominant(n);
    let handle = client
        .put(&a, &[n as u64, n as u64], ninf::grid::DataMode::Persistent)
        .unwrap();
    let request = dgefa_request(handle.id(), n, "reply-lost");
    let run = |request: &v1::RunRequest| grid.runtime.block_on(client.inner().run(request.clone()));
    let first = run(&request).unwrap();
    let again = run(&request).unwrap();
    proxy.kill();
    proxy.restart();
    let after_restart = run(&request).unwrap();
    let pivots = |reply: &v1::RunReply| reply.tasks[0].outputs.clone();
    assert_eq!(pivots(&again), pivots(&first), "the first answer, again");
    assert_eq!(pivots(&after_restart), pivots(&first));
    assert_eq!(routine_calls(&grid, "dgefa"), 1.0, "run once");
    let mut lu = a.clone();
    let mut ipvt = vec![0i32; n];
    ninf_routines::linpack::dgefa(&mut lu, n as i32, &mut ipvt).unwrap();
    let mut factors = vec![0.0; n * n];
    client.get(&handle, &mut factors).unwrap();
    assert_eq!(
        factors, lu,
        "the handle holds the factors of a, not of its factors"
    );

    // The id used again for another graph (another label) runs afresh.
    let mut other = dgefa_request(handle.id(), n, "reply-lost");
    if let Some(graph) = other.graph.as_mut() {
        graph.tasks[0].label = "refactor".into();
    }
    run(&other).unwrap();
    assert_eq!(routine_calls(&grid, "dgefa"), 2.0);
    client.free(&handle).unwrap();
    eventually("nothing left on the servers", || no_bytes_left(&grid));
}
