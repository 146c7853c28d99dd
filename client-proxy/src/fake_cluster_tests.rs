//! The proxy's graph execution and recovery against the in-memory cluster ([`crate::fake`]):
//! a server dying before a call, an intermediate lost with its server and regenerated from
//! its producer, a suspect server placed around, a staged upload that fails, and a task
//! that no server can run; an idle proxy closing its connections. Values, placements and
//! error messages are checked; no process runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use ninf_proto::v1;

use crate::cluster::Cluster;
use crate::fake::{FakeCluster, FakeServer, doubles, values};
use crate::fake_metaserver::fake_parts;
use crate::progress::ProgressSink;
use crate::{Executed, Proxy, ProxyConfig};

fn server(mflops: f64) -> FakeServer {
    FakeServer {
        mflops,
        ..FakeServer::default()
    }
}

fn proxy(cluster: Arc<FakeCluster>) -> Arc<Proxy> {
    proxy_with(cluster, |_| {})
}

/// A proxy with fast retries, two per task, then as `tune` sets it.
fn proxy_with(cluster: Arc<FakeCluster>, tune: impl FnOnce(&mut ProxyConfig)) -> Arc<Proxy> {
    let mut config = ProxyConfig {
        retry_backoff_seconds: 0.001,
        retry_backoff_max_seconds: 0.01,
        task_retries: 2,
        ..ProxyConfig::new("127.0.0.1:1")
    };
    tune(&mut config);
    let (parts, _) = fake_parts(&cluster);
    Proxy::with_parts(config, "test".into(), parts, None, None).unwrap()
}

/// A task of the fake routine: inputs are arrays by value, or fed by an edge (no source);
/// the last argument is the output.
pub(crate) fn task(label: &str, inputs: &[Option<&[f64]>]) -> (v1::GraphTask, v1::TaskArguments) {
    let mut arguments: Vec<v1::CallArgument> = inputs
        .iter()
        .map(|input| v1::CallArgument {
            source: input.map(|values| {
                v1::call_argument::Source::Value(v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::Array(doubles(values))),
                })
            }),
        })
        .collect();
    arguments.push(v1::CallArgument { source: None });
    let graph_task = v1::GraphTask {
        label: label.into(),
        function: "inc".into(),
        ..Default::default()
    };
    (
        graph_task,
        v1::TaskArguments {
            arguments,
            returns: Vec::new(),
        },
    )
}

pub(crate) struct Run {
    pub(crate) graph: v1::TaskGraph,
    pub(crate) arguments: Vec<v1::TaskArguments>,
    servers: Vec<String>,
    staging: Vec<v1::StagedInput>,
    progress: ProgressSink,
    data: crate::data::DataUses,
    /// The client's region for the run's large outputs (`RunRequest.output_region`).
    output_region: Option<String>,
    /// Each task's turns and predicted start (`TaskPlacement`); empty: none takes turns.
    turns: Vec<(u32, f64)>,
}

impl Run {
    /// The same run with task 0's first array staged on `server` ahead of its call.
    fn staged_on(mut self, server: &str) -> Run {
        self.staging = vec![v1::StagedInput {
            task: 0,
            parameter: 0,
            server: server.into(),
            bytes: 16,
        }];
        self
    }

    /// The same run, followed as `RunWithProgress` follows it.
    fn followed(mut self) -> (Run, tokio::sync::watch::Receiver<v1::RunProgress>) {
        let (sink, receiver) = ProgressSink::channel();
        self.progress = sink;
        (self, receiver)
    }

    /// `x = inc(a)` on `first`, then `y = inc(x)` on `second`; the client wants `y`.
    pub(crate) fn chain(first: &str, second: &str) -> Run {
        let (t0, a0) = task("inc#0", &[Some(&[1.0, 2.0])]);
        let (t1, mut a1) = task("inc#1", &[None]);
        a1.returns = vec![1];
        Run {
            graph: v1::TaskGraph {
                tasks: vec![t0, t1],
                edges: vec![v1::GraphEdge {
                    from_task: 0,
                    from_parameter: 1,
                    to_task: 1,
                    to_parameter: 0,
                    bytes: 16,
                }],
            },
            arguments: vec![a0, a1],
            servers: vec![first.into(), second.into()],
            staging: Vec::new(),
            progress: ProgressSink::none(),
            data: crate::data::DataUses::default(),
            output_region: None,
            turns: Vec::new(),
        }
    }

    /// One task `inc(a)` on `on`; the client wants its output.
    fn single(on: &str) -> Run {
        let (t0, mut a0) = task("inc#0", &[Some(&[1.0, 2.0])]);
        a0.returns = vec![1];
        Run {
            graph: v1::TaskGraph {
                tasks: vec![t0],
                edges: Vec::new(),
            },
            arguments: vec![a0],
            servers: vec![on.into()],
            staging: Vec::new(),
            progress: ProgressSink::none(),
            data: crate::data::DataUses::default(),
            output_region: None,
            turns: Vec::new(),
        }
    }

    async fn execute(&mut self, proxy: &Proxy) -> Result<Executed, crate::Failed> {
        self.run(proxy, None).await
    }

    /// Runs it as a transaction resumed after a restart, with what `restored` says was done.
    async fn execute_restored(
        &mut self,
        proxy: &Proxy,
        restored: crate::execution::Restored,
    ) -> Result<Executed, crate::Failed> {
        self.run(proxy, Some(restored)).await
    }

    async fn run(
        &mut self,
        proxy: &Proxy,
        restored: Option<crate::execution::Restored>,
    ) -> Result<Executed, crate::Failed> {
        let used = Arc::new(Mutex::new(
            self.servers.iter().cloned().collect::<BTreeSet<_>>(),
        ));
        let turns = self
            .turns
            .iter()
            .map(|&(turns, start)| crate::turns::TaskTurn {
                turns,
                start,
                alone: 1.0,
            })
            .collect();
        let turns = crate::turns::Turns::new(turns, false);
        let placement = (&mut self.servers[..], &self.staging[..], turns);
        proxy
            .execute(
                (&self.graph, &self.arguments, self.output_region.as_deref()),
                placement,
                ("test/graph-1", &used),
                &self.progress,
                crate::execution::Journaling {
                    key: None,
                    restored,
                },
                &self.data,
            )
            .await
    }
}

/// The array the client gets back for `task`'s output.
fn returned(executed: &Executed, task: u32) -> Vec<f64> {
    let report = executed.reports.iter().find(|r| r.task == task).unwrap();
    match &report.outputs[0].result {
        Some(v1::call_output::Result::Array(array)) => values(&array.data),
        other => panic!("task {task} returned {other:?}"),
    }
}

fn server_of(executed: &Executed, task: u32) -> String {
    let report = executed.reports.iter().find(|r| r.task == task).unwrap();
    report.server.clone()
}

#[tokio::test]
async fn a_call_to_a_dead_server_runs_again_on_a_live_one() {
    let dead = FakeServer {
        dead: true,
        ..server(2000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[("s1", dead), ("s2", server(1000.0))]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::single("s1");
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 0), [2.0, 3.0]);
    assert_eq!(server_of(&executed, 0), "s2");
    assert_eq!(executed.counts.retried, 1);
    assert_eq!(run.servers, ["s2"], "the task moved off the suspect server");
    let servers: Vec<String> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.server)
        .collect();
    assert_eq!(servers, ["s1", "s2"]);
    let metrics = ninf_telemetry::render(&proxy.metrics_registry);
    assert!(
        metrics.contains("ninf_retries_total{reason=\"server\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn each_task_returning_large_outputs_is_given_its_part_of_the_clients_output_region() {
    // inc#0 feeds inc#1 and returns nothing; the client wants inc#1's 1 MiB output back.
    let cluster = Arc::new(FakeCluster::new(&[("s1", server(1000.0))]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::chain("s1", "s1");
    run.graph.tasks[1].client_out_bytes = 1 << 20;
    run.output_region = Some("out".into());
    run.execute(&proxy).await.unwrap();
    let places: Vec<Option<v1::OutputPlace>> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.output_place)
        .collect();
    let wanted = v1::OutputPlace {
        region: "out".into(),
        offset: 0,
        bytes: (1 << 20) + 64,
        parameters: vec![1],
    };
    assert_eq!(places, [None, Some(wanted)]);

    // Without an output region, no call is given a place.
    let mut run = Run::chain("s1", "s1");
    run.graph.tasks[1].client_out_bytes = 1 << 20;
    run.execute(&proxy).await.unwrap();
    let places = cluster.invocations().into_iter().skip(2);
    assert!(places.into_iter().all(|i| i.output_place.is_none()));
}

#[tokio::test]
async fn an_intermediate_lost_with_its_server_is_made_again_by_its_producer() {
    // s1 keeps nothing it stores (it restarted after inc#0): inc#1 on s2 cannot read x.
    let forgetful = FakeServer {
        loses_objects: true,
        ..server(2000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", forgetful),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let (mut run, progress) = Run::chain("s1", "s2").followed();
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 1), [3.0, 4.0], "y = (a + 1) + 1");
    let followed = *progress.borrow();
    assert_eq!(followed.tasks_done, 2, "{followed:?}");
    assert_eq!(followed.retries, 1, "{followed:?}");
    assert!(
        followed.bytes_moved > 2 * 16,
        "four calls' requests and replies, and the edge read twice: {followed:?}"
    );
    assert_eq!(executed.counts.regenerated, 1, "inc#0 ran again");
    assert_eq!(executed.counts.retried, 1, "inc#1 was retried once");
    let metrics = ninf_telemetry::render(&proxy.metrics_registry);
    assert!(
        metrics.contains("ninf_retries_total{reason=\"lost_input\"} 1"),
        "{metrics}"
    );
    assert_eq!(server_of(&executed, 0), "s2", "the producer moved off s1");
    let calls: Vec<(String, Vec<&str>)> = cluster
        .invocations()
        .into_iter()
        .map(|i| (i.server, i.sources))
        .collect();
    assert_eq!(
        calls,
        [
            ("s1".to_string(), vec!["value", "none"]),
            ("s2".to_string(), vec!["object", "none"]),
            ("s2".to_string(), vec!["value", "none"]),
            ("s2".to_string(), vec!["object", "none"]),
        ]
    );
}

#[tokio::test]
async fn a_server_on_the_suspect_board_gets_no_call() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", server(2000.0)),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    proxy.suspect("s1");
    let mut run = Run::chain("s1", "s1");
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 1), [3.0, 4.0]);
    assert_eq!(executed.counts.retried, 0);
    assert!(cluster.invocations().iter().all(|i| i.server == "s2"));
    assert_eq!(run.servers, ["s2", "s2"]);
}

#[tokio::test]
async fn a_server_the_graph_saw_fail_takes_its_tasks_again_once_it_answers() {
    // s1 crashes under the call and is back at once; s2 is dead, though the metaserver
    // still lists it. The health check of s1 (after 0.05 s) comes well before the retry
    // (after 1 s): the retry stays on s1 rather than going to s2 and failing there until the
    // retries run out, as when a graph suspected a server for the rest of its run.
    let restarting = FakeServer {
        fails_calls: 1,
        ..server(2000.0)
    };
    let dead = FakeServer {
        dead: true,
        ..server(1000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[("s1", restarting), ("s2", dead)]));
    let proxy = proxy_with(cluster.clone(), |config| {
        config.suspect_recheck_seconds = 0.05;
        config.retry_backoff_seconds = 1.0;
        config.retry_backoff_max_seconds = 1.0;
    });
    let mut run = Run::single("s1");
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 0), [2.0, 3.0]);
    assert_eq!(server_of(&executed, 0), "s1");
    assert_eq!(executed.counts.retried, 1);
    let servers: Vec<String> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.server)
        .collect();
    assert_eq!(servers, ["s1", "s1"], "nothing went to the dead s2");
}

#[tokio::test]
async fn a_failed_staged_upload_sends_its_array_with_the_call() {
    let full = FakeServer {
        refuses_uploads: true,
        ..server(1000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[("s1", full), ("s2", server(1000.0))]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::single("s2").staged_on("s1");
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 0), [2.0, 3.0]);
    assert_eq!(executed.counts.staged_uploads, 0);
    let calls = cluster.invocations();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        calls[0].sources,
        ["value", "none"],
        "the array went by value"
    );
    assert_eq!(cluster.stored_on("s1"), 0);
}

#[tokio::test]
async fn a_staged_upload_feeds_its_call_from_storage() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", server(1000.0)),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::single("s2").staged_on("s1");
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 0), [2.0, 3.0]);
    assert_eq!(executed.counts.staged_uploads, 1);
    assert_eq!(cluster.invocations()[0].sources, ["object", "none"]);
}

#[tokio::test]
async fn a_task_no_live_server_can_run_fails_the_graph_by_name() {
    let dead = || FakeServer {
        dead: true,
        ..server(1000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[("s1", dead()), ("s2", dead())]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::single("s1");
    let failed = run.execute(&proxy).await.err().unwrap();
    let message = failed.status.message().to_string();
    assert!(
        message.starts_with("task 0 (`inc#0`, inc) cannot run: no healthy server offers `inc`"),
        "{message}"
    );
    assert!(message.ends_with("connection to s2 refused"), "{message}");
    assert_eq!(failed.status.code(), tonic::Code::Unavailable);
    // One try and two retries, each on a server not yet seen failing while one was left.
    assert_eq!(cluster.invocations().len(), 3);
}

/// A routine whose process crashed is run once more, on another server: it may have been
/// the server's fault.
#[tokio::test]
async fn a_routine_that_crashed_once_runs_again_on_another_server() {
    let crashing = FakeServer {
        crashes_calls: 1,
        ..server(2000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", crashing),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy_with(cluster.clone(), |c| c.task_retries = 4);
    let mut run = Run::single("s1");
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(returned(&executed, 0), [2.0, 3.0]);
    assert_eq!(server_of(&executed, 0), "s2");
    let metrics = ninf_telemetry::render(&proxy.metrics_registry);
    assert!(
        metrics.contains("ninf_retries_total{reason=\"crash\"} 1"),
        "{metrics}"
    );
}

/// A routine that crashed twice fails its graph as the routine's failure (`ABORTED`, which
/// clients report as a failed session), naming both servers and how the process ended,
/// though retries for server failures remain.
#[tokio::test]
async fn a_routine_that_crashed_twice_fails_the_graph_as_its_own_failure() {
    let crashing = || FakeServer {
        crashes_calls: 10,
        ..server(1000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[("s1", crashing()), ("s2", crashing())]));
    let proxy = proxy_with(cluster.clone(), |c| c.task_retries = 4);
    let mut run = Run::single("s1");
    let failed = run.execute(&proxy).await.err().unwrap();
    assert_eq!(failed.status.code(), tonic::Code::Aborted);
    assert_eq!(
        failed.status.message(),
        "task 0 (`inc#0`, inc) crashed on s1, then on s2: `inc` crashed during the call: \
         executable of module `fake`: early eof; the process exited with status 10"
    );
    assert_eq!(cluster.invocations().len(), 2);
}

/// What a proxy's earlier life finished of `Run::chain`: inc#0, its output `x` kept on `s1`
/// (stored there now, or `missing`).
async fn restored_chain(cluster: &FakeCluster, missing: bool) -> crate::execution::Restored {
    use crate::Cluster;
    let object = cluster
        .put("s1", "test/graph-1", doubles(&[2.0, 3.0]))
        .await
        .unwrap();
    let report = v1::TaskReport {
        task: 0,
        server: "s1".into(),
        outputs: vec![v1::CallOutput {
            parameter: 1,
            result: Some(v1::call_output::Result::Object(object)),
        }],
        ..Default::default()
    };
    crate::execution::Restored {
        done: vec![report],
        missing: if missing { [0].into() } else { [].into() },
    }
}

#[tokio::test]
async fn a_resumed_transaction_runs_only_what_did_not_survive() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", server(1000.0)),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::chain("s1", "s2");
    let restored = restored_chain(&cluster, false).await;
    let executed = run.execute_restored(&proxy, restored).await.unwrap();
    assert_eq!(returned(&executed, 1), [3.0, 4.0], "y = x + 1, x as kept");
    assert_eq!(executed.counts.resumed, 1);
    let calls: Vec<(String, Vec<&str>)> = cluster
        .invocations()
        .into_iter()
        .map(|i| (i.server, i.sources))
        .collect();
    assert_eq!(calls, [("s2".to_string(), vec!["object", "none"])]);
    assert_eq!(
        server_of(&executed, 0),
        "s1",
        "inc#0's report is the journal's"
    );
}

#[tokio::test]
async fn a_resumed_task_whose_output_is_gone_runs_again() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", server(1000.0)),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::chain("s1", "s2");
    let restored = restored_chain(&cluster, true).await;
    let executed = run.execute_restored(&proxy, restored).await.unwrap();
    assert_eq!(returned(&executed, 1), [3.0, 4.0]);
    assert_eq!(executed.counts.resumed, 0);
    let labels: Vec<String> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.server)
        .collect();
    assert_eq!(labels, ["s1", "s2"], "inc#0 then inc#1");
}

/// Waits up to 30 s for `condition`.
async fn eventually(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..300 {
        if condition() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{what} did not happen within 30 s");
}

#[tokio::test]
async fn an_idle_proxy_closes_its_connections_after_idle_connection_seconds_of_quiet() {
    use std::time::Duration;
    let cluster = Arc::new(FakeCluster::default());
    let config = ProxyConfig {
        idle_connection_seconds: 1,
        ..ProxyConfig::new("127.0.0.1:1")
    };
    let (parts, _) = fake_parts(&cluster);
    let proxy = Proxy::with_parts(config, "test".into(), parts, None, None).unwrap();
    // The first transaction starts the proxy's looks; the second runs through several.
    drop(proxy.admission.admit("client", 0).unwrap());
    let running = proxy.admission.admit("client", 0).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(cluster.releases(), 0, "not while a transaction runs");
    drop(running);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cluster.releases(), 0, "not before a second of quiet");
    eventually("closing the idle connections", || cluster.releases() == 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cluster.releases(), 1, "an idle proxy closes them once");
    drop(proxy.admission.admit("client", 0).unwrap());
    eventually("closing them after the next quiet", || {
        cluster.releases() == 2
    })
    .await;

    let config = ProxyConfig {
        idle_connection_seconds: 0,
        ..ProxyConfig::new("127.0.0.1:1")
    };
    let cluster = Arc::new(FakeCluster::default());
    let (parts, _) = fake_parts(&cluster);
    let proxy = Proxy::with_parts(config, "test".into(), parts, None, None).unwrap();
    drop(proxy.admission.admit("client", 0).unwrap());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(cluster.releases(), 0, "0 keeps them open");
}

/// `inc(h)` on `on`, reading data handle `h` (copies on the servers `copies` names, bound to
/// the first, as when the run was placed); the client wants its output.
fn reading_handle(on: &str, copies: &[&str]) -> Run {
    let mut run = Run::single(on);
    let info = v1::DataInfo {
        id: "h".into(),
        copies: copies
            .iter()
            .map(|s| v1::DataCopy {
                server: s.to_string(),
                object_id: format!("h@{s}"),
            })
            .collect(),
        ..Default::default()
    };
    run.arguments[0].arguments[0].source = Some(v1::call_argument::Source::Object(v1::ObjectRef {
        server: copies[0].into(),
        object_id: format!("h@{}", copies[0]),
    }));
    run.data = crate::data::DataUses::reading(0, 0, info);
    run
}

fn holding(object_id: &str, data: &[f64]) -> FakeServer {
    let mut s = server(100.0);
    s.objects.insert(object_id.into(), doubles(data).data);
    s
}

#[tokio::test]
async fn a_handle_copy_lost_with_its_server_is_read_from_another_copy_on_the_retry() {
    // a restarted and lost its copy of h; b holds the other.
    let cluster = Arc::new(FakeCluster::new(&[
        ("a", server(100.0)),
        ("b", holding("h@b", &[1.0, 2.0])),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = reading_handle("b", &["a", "b"]);
    let executed = run.execute(&proxy).await.unwrap();
    // Only b's copy holds the values: the retry read it.
    assert_eq!(returned(&executed, 0), vec![2.0, 3.0]);
    let servers: Vec<String> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.server)
        .collect();
    assert_eq!(
        servers,
        ["b", "b"],
        "the first call failed to fetch a's copy"
    );
}

#[tokio::test]
async fn a_handle_whose_only_copy_was_lost_fails_naming_it_and_its_server() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("a", server(100.0)),
        ("b", server(100.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = reading_handle("b", &["a"]);
    let failed = run.execute(&proxy).await.unwrap_err();
    assert_eq!(
        failed.status.message(),
        "data handle `h` has no copy left: the one on a was lost with its server"
    );
    assert_eq!(cluster.invocations().len(), 1, "no retry reads it again");
}

#[tokio::test]
async fn the_proxy_measures_a_few_servers_of_each_site_the_longest_unmeasured_first() {
    let names = ["a0", "a1", "a2", "a3", "a4", "a5", "b0", "b1"];
    let servers: Vec<(&str, FakeServer)> = names
        .iter()
        .map(|name| {
            let site = name[..1].to_string();
            (
                *name,
                FakeServer {
                    site,
                    ..server(100.0)
                },
            )
        })
        .collect();
    let cluster = Arc::new(FakeCluster::new(&servers));
    let proxy = proxy_with(cluster, |c| c.probe_per_site = 2);
    let measured = || -> Vec<&str> {
        let links = Proxy::lock(&proxy.links);
        names
            .into_iter()
            .filter(|name| links.latest(name).is_some())
            .collect()
    };
    let probe = |max_age| proxy.probe_servers(max_age);
    // Never measured counts as due: two of a's six, both of b's.
    assert_eq!(probe(std::time::Duration::MAX).await.unwrap(), 4);
    assert_eq!(measured(), ["a0", "a1", "b0", "b1"]);
    // Measured once is enough with no limit on age: each site has its two.
    assert_eq!(probe(std::time::Duration::MAX).await.unwrap(), 0);
    // Every path old: of a's, two never measured; b's two again.
    assert_eq!(probe(std::time::Duration::ZERO).await.unwrap(), 4);
    assert_eq!(measured(), ["a0", "a1", "a2", "a3", "b0", "b1"]);
}

/// A replicated handle `h` (two copies, on s1 and s2) that task 0's output writes.
fn replicated_handle() -> v1::DataInfo {
    v1::DataInfo {
        id: "h".into(),
        spec: Some(v1::DataSpec {
            mode: v1::DataMode::Persistent as i32,
            replicas: 2,
            bytes: 16,
            ..Default::default()
        }),
        copies: ["s1", "s2"]
            .map(|s| v1::DataCopy {
                server: s.into(),
                object_id: format!("old@{s}"),
            })
            .into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_replicated_handles_new_value_is_copied_to_its_old_copys_server_before_the_run_ends() {
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", server(1000.0)),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::single("s1");
    run.arguments[0].returns.clear();
    run.data = crate::data::DataUses::writing(0, 1, replicated_handle());
    let executed = run.execute(&proxy).await.unwrap();
    let written = &executed.data_objects[0].2;
    assert_eq!(written.server, "s1");
    let copies: Vec<&v1::ObjectRef> = executed.written_copies.iter().map(|(_, _, c)| c).collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(copies[0].server, "s2");
    let copied = cluster.get(copies[0]).await.unwrap();
    assert_eq!(values(&copied.data), [2.0, 3.0], "a + 1, on s2 too");
    assert_eq!(
        cluster.owners_on("s2"),
        ["test/graph-1"],
        "the graph's until the commit"
    );
}

#[tokio::test]
async fn a_new_value_lost_before_it_was_copied_sends_its_writer_back_to_run_again() {
    // s1 keeps nothing it stores: the value written there is gone before it is copied.
    let forgetful = FakeServer {
        loses_objects: true,
        ..server(2000.0)
    };
    let cluster = Arc::new(FakeCluster::new(&[
        ("s1", forgetful),
        ("s2", server(1000.0)),
    ]));
    let proxy = proxy(cluster.clone());
    let mut run = Run::single("s1");
    run.arguments[0].returns.clear();
    run.data = crate::data::DataUses::writing(0, 1, replicated_handle());
    let executed = run.execute(&proxy).await.unwrap();
    assert_eq!(executed.counts.retried, 1, "the writer ran again");
    let written = &executed.data_objects[0].2;
    assert_eq!(written.server, "s2", "off the server that lost it");
    let value = cluster.get(written).await.unwrap();
    assert_eq!(values(&value.data), [2.0, 3.0]);
    // Copied to s1, the other old copy's server, where the commit will find it gone.
    let copies: Vec<&str> = executed
        .written_copies
        .iter()
        .map(|(_, _, c)| c.server.as_str())
        .collect();
    assert_eq!(copies, ["s1"]);
    let servers: Vec<String> = cluster
        .invocations()
        .into_iter()
        .map(|i| i.server)
        .collect();
    assert_eq!(servers, ["s1", "s2"]);
}
