//! The proxy's whole run of a graph (`Proxy::run_graph`) on fakes of both sides: the
//! in-memory cluster ([`crate::fake`]) and metaserver ([`crate::fake_metaserver`]). A graph is
//! placed where the metaserver says, run, cleaned up and reported; a restarting metaserver
//! is waited for; one that refuses the graph is not asked again and nothing runs; a graph
//! that fails is reported with its error. Values, placements and messages are checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use ninf_proto::v1;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use crate::fake::{FakeCluster, FakeServer, values};
use crate::fake_cluster_tests::Run;
use crate::fake_metaserver::{FakeMetaserver, fake_parts};
use crate::progress::ProgressSink;
use crate::{Proxy, ProxyConfig};

fn server() -> FakeServer {
    FakeServer {
        mflops: 100.0,
        ..FakeServer::default()
    }
}

fn grid(servers: &[(&str, FakeServer)]) -> (Arc<Proxy>, Arc<FakeCluster>, Arc<FakeMetaserver>) {
    grid_with(servers, ProxyConfig::new("127.0.0.1:1"))
}

/// A grid whose proxy has `config`, but for quick retries.
fn grid_with(
    servers: &[(&str, FakeServer)],
    config: ProxyConfig,
) -> (Arc<Proxy>, Arc<FakeCluster>, Arc<FakeMetaserver>) {
    let cluster = Arc::new(FakeCluster::new(servers));
    let (parts, metaserver) = fake_parts(&cluster);
    let config = ProxyConfig {
        retry_backoff_seconds: 0.001,
        retry_backoff_max_seconds: 0.01,
        task_retries: 1,
        metaserver_retry_seconds: 30.0,
        ..config
    };
    let proxy = Proxy::with_parts(config, "test".into(), parts, None, None).unwrap();
    (proxy, cluster, metaserver)
}

/// `x = inc([1, 2])`, then `y = inc(x)`; the client wants `y`, which is `[3, 4]`. The
/// fake cluster's tests run the same graph on servers they choose; here the metaserver does.
fn chain() -> v1::RunRequest {
    let run = Run::chain("", "");
    v1::RunRequest {
        graph: Some(run.graph),
        arguments: run.arguments,
        ..Default::default()
    }
}

async fn run(proxy: &Proxy, request: v1::RunRequest) -> Result<v1::RunReply, Status> {
    let mut admitted = proxy.admission.admit("client", 0).unwrap();
    let cancel = CancellationToken::new();
    proxy
        .run_graph(request, &mut admitted, &ProgressSink::none(), &cancel)
        .await
}

/// The client's `y` in a reply.
fn returned(reply: &v1::RunReply) -> Vec<f64> {
    let output = &reply.tasks[1].outputs[0];
    match &output.result {
        Some(v1::call_output::Result::Array(array)) => values(&array.data),
        other => panic!("expected an array, got {other:?}"),
    }
}

#[tokio::test]
async fn a_graph_runs_where_the_metaserver_placed_it_and_is_reported_and_cleaned_up() {
    let (proxy, cluster, metaserver) = grid(&[("a:1", server()), ("b:1", server())]);
    metaserver.place_on(&["b:1", "a:1"]);
    let reply = run(&proxy, chain()).await.unwrap();
    assert_eq!(returned(&reply), vec![3.0, 4.0]);
    assert_eq!((reply.graph_id, reply.scheduler.as_str()), (1, "fake"));
    let called: Vec<String> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.server)
        .collect();
    assert_eq!(called, vec!["b:1".to_string(), "a:1".to_string()]);
    // The intermediate `x` went from b to a as an object, and is deleted afterwards.
    assert_eq!(cluster.invocations()[1].sources[0], "object");
    assert_eq!((cluster.stored_on("a:1"), cluster.stored_on("b:1")), (0, 0));
    let reports = metaserver.reports();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].graph_id, 1);
    assert_eq!(reports[0].tasks.len(), 2);
    assert_eq!(reports[0].error, "");
    // The reply carries the metaserver's predictions beside what happened.
    assert_eq!(reply.tasks[1].predicted_finish, 2.0);
}

#[tokio::test]
async fn a_restarting_metaserver_is_waited_for_and_then_places_the_graph() {
    let (proxy, _cluster, metaserver) = grid(&[("a:1", server())]);
    // The status the proxy asks for first (to probe new servers) fails twice, and so do
    // two placement requests: each is asked again, with back-off, until it is answered.
    metaserver.unreachable_for(2);
    metaserver.placements_unreachable_for(2);
    let reply = run(&proxy, chain()).await.unwrap();
    assert_eq!(returned(&reply), vec![3.0, 4.0]);
    assert_eq!(metaserver.schedules(), 3);
    assert_eq!(metaserver.reports().len(), 1);
}

#[tokio::test]
async fn a_refused_graph_is_not_asked_again_and_nothing_runs() {
    let (proxy, cluster, metaserver) = grid(&[("a:1", server())]);
    metaserver.refuse(Status::invalid_argument("task 0: no server offers `inc`"));
    let err = run(&proxy, chain()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert_eq!(err.message(), "task 0: no server offers `inc`");
    assert_eq!(metaserver.schedules(), 1);
    assert!(cluster.invocations().is_empty());
    assert!(metaserver.reports().is_empty());
}

#[tokio::test]
async fn a_graph_that_fails_is_reported_with_its_error_and_leaves_nothing() {
    let dead = FakeServer {
        dead: true,
        ..server()
    };
    let (proxy, cluster, metaserver) = grid(&[("a:1", dead)]);
    let err = run(&proxy, chain()).await.unwrap_err();
    let reports = metaserver.reports();
    assert_eq!(reports.len(), 1);
    assert!(!reports[0].error.is_empty());
    assert_eq!(reports[0].error, err.message());
    assert_eq!(cluster.stored_on("a:1"), 0);
}

/// `count` independent `inc([i])`, each returned to the client.
fn independent(count: usize) -> v1::RunRequest {
    let (tasks, arguments) = (0..count)
        .map(|i| {
            let value = [i as f64];
            let (task, mut arguments) =
                crate::fake_cluster_tests::task(&format!("inc#{i}"), &[Some(&value)]);
            arguments.returns = vec![1];
            (task, arguments)
        })
        .unzip();
    v1::RunRequest {
        graph: Some(v1::TaskGraph {
            tasks,
            edges: Vec::new(),
        }),
        arguments,
        ..Default::default()
    }
}

/// The most calls each server had out at once, and whether each call went alone.
fn out_and_alone(cluster: &FakeCluster) -> (Vec<(String, u32)>, Vec<bool>) {
    let invocations = cluster.invocations();
    let mut most: std::collections::BTreeMap<String, u32> = Default::default();
    for i in &invocations {
        let m = most.entry(i.server.clone()).or_default();
        *m = (*m).max(i.out_on_server);
    }
    (
        most.into_iter().collect(),
        invocations.iter().map(|i| i.alone).collect(),
    )
}

#[tokio::test]
async fn a_graphs_long_calls_take_turns_on_their_server_and_the_last_goes_alone() {
    let (proxy, cluster, metaserver) = grid(&[("a:1", server()), ("b:1", server())]);
    metaserver.place_on(&["a:1", "a:1", "a:1", "b:1"]);
    metaserver.give_turns(&[1, 1, 1, 1]);
    let reply = run(&proxy, independent(4)).await.unwrap();
    let results: Vec<Vec<f64>> = reply
        .tasks
        .iter()
        .map(|t| match &t.outputs[0].result {
            Some(v1::call_output::Result::Array(array)) => values(&array.data),
            other => panic!("expected an array, got {other:?}"),
        })
        .collect();
    assert_eq!(results, [[1.0], [2.0], [3.0], [4.0]]);
    let (most, alone) = out_and_alone(&cluster);
    // One call at a time on each server: "a" ran its three in turn.
    assert_eq!(most, [("a:1".to_string(), 1), ("b:1".to_string(), 1)]);
    assert_eq!(alone.len(), 4);
    // The last call on "a" had nothing of its graph out or waiting: it may borrow cores.
    assert_eq!(alone, [false, false, false, true]);
}

/// Three long calls, two on "a" (0.2 s each) and one on "b" (0.3 s), the last on "a"
/// modelled at 4 s alone; on a proxy whose servers lend cores or not.
async fn last_call_alone(wait_to_borrow_cores: bool) -> Vec<bool> {
    let (a, b) = (
        FakeServer {
            call_seconds: 0.2,
            ..server()
        },
        FakeServer {
            call_seconds: 0.3,
            ..server()
        },
    );
    let config = ProxyConfig {
        wait_to_borrow_cores,
        ..ProxyConfig::new("127.0.0.1:1")
    };
    let (proxy, cluster, metaserver) = grid_with(&[("a:1", a), ("b:1", b)], config);
    metaserver.place_on(&["a:1", "b:1", "a:1"]);
    metaserver.give_turns(&[1, 1, 1]);
    metaserver.give_alone_seconds(&[0.2, 0.3, 4.0]);
    run(&proxy, independent(3)).await.unwrap();
    let invocations = cluster.invocations();
    let servers: Vec<&str> = invocations.iter().map(|i| i.server.as_str()).collect();
    assert_eq!(servers, ["a:1", "b:1", "a:1"]);
    invocations.iter().map(|i| i.alone).collect()
}

#[tokio::test]
async fn where_servers_lend_cores_the_last_long_call_waits_for_the_others_and_goes_alone() {
    // When "a"'s first call ends (0.2 s), "b"'s has 0.1 s left, under a quarter of the last
    // call's 4 s: it waits for it, then leaves alone and may borrow "b"'s core.
    assert_eq!(last_call_alone(true).await, [false, false, true]);
    // Where servers lend nothing it leaves at its turn, beside "b"'s call.
    assert_eq!(last_call_alone(false).await, [false, false, false]);
}

#[tokio::test]
async fn without_turns_a_graphs_calls_go_to_their_server_at_once() {
    let (proxy, cluster, metaserver) = grid(&[("a:1", server()), ("b:1", server())]);
    metaserver.place_on(&["a:1", "a:1", "a:1", "b:1"]);
    // Short calls (turns 0) are not held, beside long ones that are.
    metaserver.give_turns(&[0, 0, 0, 1]);
    run(&proxy, independent(4)).await.unwrap();
    let (most, alone) = out_and_alone(&cluster);
    assert_eq!(most, [("a:1".to_string(), 3), ("b:1".to_string(), 1)]);
    assert_eq!(alone, [false; 4]);
}
