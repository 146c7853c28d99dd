//! A real server on loopback, called through the async client: results, every kind of bad
//! input and fault, the storage role and server-to-server fetching, monitoring and health.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::common::TestServer;
use ninf::{Arg, ErrorKind, NinfClient};
use ninf_proto::v1::{self, argument_value::Value, call_argument::Source};

fn int(v: i64) -> v1::CallArgument {
    v1::CallArgument {
        source: Some(Source::Value(v1::ArgumentValue {
            value: Some(Value::IntValue(v)),
        })),
    }
}

fn doubles(values: &[f64]) -> v1::CallArgument {
    v1::CallArgument {
        source: Some(Source::Value(v1::ArgumentValue {
            value: Some(Value::Array(v1::Array {
                element_type: v1::ElementType::Double as i32,
                data: ninf_proto::values::encode(values).into(),
            })),
        })),
    }
}

fn none() -> v1::CallArgument {
    v1::CallArgument { source: None }
}

fn object(server: &str, id: &str) -> v1::CallArgument {
    v1::CallArgument {
        source: Some(Source::Object(v1::ObjectRef {
            server: server.to_string(),
            object_id: id.to_string(),
        })),
    }
}

/// The objects a reply names for its kept outputs (every output must be kept).
fn kept_objects(reply: &v1::CallReply) -> Vec<v1::ObjectRef> {
    reply
        .outputs
        .iter()
        .map(|o| match &o.result {
            Some(v1::call_output::Result::Object(r)) => r.clone(),
            other => panic!("expected an object, got {other:?}"),
        })
        .collect()
}

fn request(function: &str, arguments: Vec<v1::CallArgument>) -> v1::CallRequest {
    v1::CallRequest {
        function: function.into(),
        arguments,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solves_a_system_and_serves_descriptors() {
    let server = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&format!("ninf://{}", server.address))
        .await
        .unwrap();

    let modules = client.list().await.unwrap();
    let names: Vec<&str> = modules.iter().map(|m| m.module.as_str()).collect();
    assert_eq!(names, ["linpack", "vector", "selftest"]);
    let dgefa = client.describe("dgefa").await.unwrap();
    assert_eq!(dgefa.cost(&[("n", 700)]).unwrap().bytes_out, 3_922_800);

    let n = 3;
    let mut a = vec![4.0, 2.0, 1.0, 1.0, 5.0, 2.0, 0.0, 1.0, 3.0]; // column-major
    let a0 = a.clone();
    let x = [1.0, -2.0, 0.5];
    let mut b: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| a0[i + j * n] * x[j]).sum())
        .collect();
    let mut ipvt = vec![0i32; n];
    let outcome = client
        .call(
            "dgefa",
            &mut [Arg::from(&mut a), Arg::from(n as i32), Arg::from(&mut ipvt)],
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, 0);
    client
        .call(
            "dgesl",
            &mut [
                Arg::from(&a),
                Arg::from(n as i32),
                Arg::from(&ipvt),
                Arg::from(&mut b),
            ],
        )
        .await
        .unwrap();
    for (got, want) in b.iter().zip(x) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_get_clear_errors_and_the_server_keeps_serving() {
    let server = TestServer::start(|config| config.max_request_bytes = 1 << 20).await;
    let client = NinfClient::connect(&server.address).await.unwrap();

    let e = client.call("dgetrf", &mut []).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::FunctionNotFound);
    assert_eq!(
        e.message,
        format!(
            "no routine `dgetrf` on this server (server {})",
            server.address
        )
    );

    // Caught by the client before sending: count, type, size.
    let e = client.call("noop", &mut []).await.unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (
            ErrorKind::BadArgument,
            "`noop` takes 1 arguments (n), got 0"
        )
    );
    let e = client
        .call("noop", &mut [Arg::Real(1.0)])
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "argument `n` of `noop` must be an int, got a real number"
    );
    let mut y = vec![0.0; 3];
    let e = client
        .call(
            "echo",
            &mut [
                Arg::Integer(4),
                Arg::from(&[1.0, 2.0, 3.0][..]),
                Arg::from(&mut y),
            ],
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "argument `x` of `echo` has 3 elements, expected 4 (n = 4)"
    );

    // Sent anyway (a client without checks): the server checks too.
    let e = client
        .call_request(request(
            "dgefa",
            vec![doubles(&[1.0, 2.0, 3.0]), int(2), none()],
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (
            ErrorKind::BadArgument,
            "argument `a` of `dgefa` has 3 elements, expected 4 (n x n = 2 x 2)"
        )
    );
    let e = client
        .call_request(request("dgefa", vec![none(), int(200_000), none()]))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "call of `dgefa` would move 320000000000 bytes in and 320000800000 bytes out, over this server's limit of 1048576 bytes per call"
    );
    let e = client
        .call_request(request("echo", vec![int(i64::MAX), none(), none()]))
        .await
        .unwrap_err();
    assert_eq!(e.message, "`echo`: size of `x` overflows 64 bits");
    let e = client
        .call_request(request("noop", vec![int(1 << 40)]))
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "argument `n` of `noop`: 1099511627776 does not fit in an int"
    );

    // Routine failures: an error, a panic, a segfault. Each fails only its own call.
    let e = client
        .call("fail", &mut [Arg::Integer(7)])
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::SessionFailed, "selftest failure with code 7")
    );
    let e = client
        .call("panic", &mut [Arg::Integer(3)])
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::SessionFailed);
    assert_eq!(
        e.message,
        "routine `panic` panicked: selftest panic with code 3"
    );
    let pool_spawned_before = server.state.function("segfault").unwrap().pool().spawned();
    let e = client
        .call("segfault", &mut [Arg::Integer(0)])
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::SessionFailed);
    assert!(
        e.message
            .starts_with("`segfault` crashed during the call: executable of module `selftest`:"),
        "{}",
        e.message
    );
    assert!(
        e.message.ends_with("killed by signal 11 (SIGSEGV)"),
        "{}",
        e.message
    );
    for _ in 0..3 {
        client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    }
    let pool = server.state.function("segfault").unwrap().pool().clone();
    assert_eq!(
        pool.spawned(),
        pool_spawned_before + 1,
        "exactly one replacement was started"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_and_killed_executables_fail_only_their_call() {
    let server = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let limited = client.clone().with_timeout(Duration::from_millis(300));
    let e = limited
        .call("sleep_ms", &mut [Arg::Integer(10_000)])
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (
            ErrorKind::Timeout,
            "`sleep_ms` ran longer than its limit of 0.300 s and was killed"
        )
    );

    // Kill the executable while it runs a call.
    let pool = server.state.function("sleep_ms").unwrap().pool().clone();
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call("sleep_ms", &mut [Arg::Integer(10_000)]).await }
    });
    let pid = loop {
        if let Some(&pid) = pool.busy_pids().first() {
            break pid;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    let e = call.await.unwrap().unwrap_err();
    assert_eq!(e.kind, ErrorKind::SessionFailed);
    assert!(
        e.message.ends_with("killed by signal 9 (SIGKILL)"),
        "{}",
        e.message
    );
    assert_eq!(
        pool.replaced(),
        2,
        "the timed-out and the killed executable"
    );
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_call_costs_nothing() {
    let server = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let n = 1 << 20;
    let x = vec![1.5; n];
    for _ in 0..3 {
        let mut y = vec![0.0; n];
        let mut args = [Arg::Integer(n as i64), Arg::from(&x), Arg::from(&mut y)];
        // Give up after 2 ms: the request or the reply is cut off in flight.
        let _ =
            tokio::time::timeout(Duration::from_millis(2), client.call("echo", &mut args)).await;
    }
    let pool = server.state.function("echo").unwrap().pool().clone();
    // The abandoned calls finish on their own; wait for them so that a late one is counted.
    let mut waited = 0;
    while pool.running() > 0 && waited < 600 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    let mut y = vec![0.0; n];
    client
        .call(
            "echo",
            &mut [Arg::Integer(n as i64), Arg::from(&x), Arg::from(&mut y)],
        )
        .await
        .unwrap();
    assert_eq!(y, x);
    assert_eq!(pool.replaced(), 0, "no executable was killed and replaced");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_kept_on_one_server_feed_a_call_on_another() {
    let a = TestServer::start(|_| {}).await;
    let b = TestServer::start(|c| c.storage.memory_limit_bytes = 8).await;
    let client_a = NinfClient::connect(&a.address).await.unwrap();
    let client_b = NinfClient::connect(&b.address).await.unwrap();

    // dgefa on A keeps the factors and pivots in A's storage, owned by transaction "t1".
    let matrix = [2.0, 0.0, 0.0, 4.0];
    let mut req = request("dgefa", vec![doubles(&matrix), int(2), none()]);
    req.keep = vec![0, 2];
    req.owner = "t1".into();
    let reply = client_a.call_request(req).await.unwrap();
    let refs = kept_objects(&reply);
    assert!(refs.iter().all(|r| r.server == a.address));
    assert_eq!(a.state.store.len(), 2);

    // dgesl on B pulls both straight from A, and keeps x in B's storage (spilled: B's
    // memory limit is 8 bytes).
    let mut req = request(
        "dgesl",
        vec![
            object(&refs[0].server, &refs[0].object_id),
            int(2),
            object(&refs[1].server, &refs[1].object_id),
            doubles(&[2.0, 8.0]),
        ],
    );
    req.keep = vec![3];
    req.owner = "t1".into();
    let reply = client_b.call_request(req).await.unwrap();
    let Some(v1::call_output::Result::Object(x)) = &reply.outputs[0].result else {
        panic!()
    };
    let mut storage_b = v1::storage_client::StorageClient::new(client_b.channel());
    let info = storage_b
        .stat(v1::StatRequest {
            object_id: x.object_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (info.bytes, info.spilled, info.owner.as_str()),
        (16, true, "t1")
    );
    let mut chunks = storage_b
        .get(v1::GetRequest {
            object_id: x.object_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let chunk = chunks.message().await.unwrap().unwrap();
    assert_eq!(
        ninf_proto::values::decode::<f64>(&chunk.data).unwrap(),
        vec![1.0, 2.0]
    );

    // The transaction's intermediates go; fetching one afterwards is a clear error.
    let mut storage_a = v1::storage_client::StorageClient::new(client_a.channel());
    let deleted = storage_a
        .delete_owner(v1::DeleteOwnerRequest { owner: "t1".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((deleted.objects, deleted.bytes), (2, 32 + 8));
    assert!(a.state.store.is_empty());
    let e = storage_a
        .get(v1::GetRequest {
            object_id: refs[0].object_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert_eq!(
        e.message(),
        format!(
            "unknown object id `{}` (never stored here, or already deleted)",
            refs[0].object_id
        )
    );
    let req = request(
        "dgesl",
        vec![
            object(&refs[0].server, &refs[0].object_id),
            int(2),
            object(&refs[1].server, &refs[1].object_id),
            doubles(&[2.0, 8.0]),
        ],
    );
    let e = client_b.call_request(req).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadArgument);
    assert_eq!(
        e.message,
        format!(
            "argument `a` of `dgesl`: cannot fetch object `{}` from {}: unknown object id `{}` (never stored here, or already deleted)",
            refs[0].object_id, a.address, refs[0].object_id
        )
    );
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_reports_load_and_health_is_serving() {
    // One row: the table space-shares, so a job that does not fit waits in the queue.
    let server = TestServer::start(|c| c.gang.max_rows = 1).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let sleeper = tokio::spawn({
        let client = client.clone();
        async move { client.call("sleep_ms", &mut [Arg::Integer(1000)]).await }
    });
    let sleeping_pool = server.state.function("sleep_ms").unwrap().pool().clone();
    while sleeping_pool.running() < 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut monitor = v1::monitor_client::MonitorClient::new(client.channel());
    let load = monitor.load(v1::LoadRequest {}).await.unwrap().into_inner();
    assert_eq!((load.running_jobs, load.queued_jobs), (1, 0));
    assert!(load.free_memory_bytes > 0 && load.sampled_unix_ms > 0);
    sleeper.await.unwrap().unwrap();

    // Two sleeps fill both processors; a third call must queue until one ends, and its
    // timing says so (observed through the gang queue, not wall-clock thresholds).
    let pool = server.state.function("sleep_ms").unwrap().pool().clone();
    let request = |ms| v1::CallRequest {
        function: "sleep_ms".into(),
        arguments: vec![int(ms)],
        ..Default::default()
    };
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.call_request(request(400)).await }
    });
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.call_request(request(400)).await }
    });
    while pool.running() < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let third = tokio::spawn({
        let client = client.clone();
        async move { client.call_request(request(0)).await }
    });
    while server.state.gang.load().1 < 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let queued = |reply: v1::CallReply| reply.timing.unwrap().queue_seconds;
    let (first, second) = (
        queued(first.await.unwrap().unwrap()),
        queued(second.await.unwrap().unwrap()),
    );
    let third = queued(third.await.unwrap().unwrap());
    assert!(
        third > first.max(second),
        "the third call waited for a processor: {first} {second} {third}"
    );
    let info = monitor.info(v1::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.processors, 2);

    let mut health = tonic_health::pb::health_client::HealthClient::new(client.channel());
    let reply = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "ninf.v1.Invoke".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reply.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_nobody_renews_loses_its_objects_when_the_lease_runs_out() {
    let server = TestServer::start(|c| c.storage.lease_seconds = 0.2).await;
    let channel = ninf_proto::net::connect(
        &server.address,
        None,
        ninf_proto::net::ConnectionSettings::default(),
    )
    .await
    .unwrap();
    let mut storage = v1::storage_client::StorageClient::new(channel);
    let chunk = v1::PutChunk {
        owner: "vanished-proxy/graph-1".into(),
        element_type: v1::ElementType::Double as i32,
        data: bytes::Bytes::from(vec![0u8; 64]),
        total_bytes: 64,
    };
    let info = storage
        .put(tokio_stream::iter(vec![chunk]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.bytes, 64);
    let renewed = storage
        .renew(v1::RenewRequest {
            owner: "vanished-proxy/graph-1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((renewed.objects, renewed.lease_seconds), (1, 0.2));
    // Nobody renews it again: the sweeper deletes it (polled, with a generous bound).
    let mut waited = 0;
    while !server.state.store.is_empty() && waited < 300 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        waited += 1;
    }
    assert!(server.state.store.is_empty(), "the lease never ran out");
    assert_eq!(server.state.store.usage(), (0, 0));
    let e = storage
        .renew(v1::RenewRequest {
            owner: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(e.message(), "a renewal must name an owner");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_its_cpu_budget_is_killed_and_the_next_call_runs() {
    let server = TestServer::start(|c| {
        c.executable_limits.cpu_seconds_per_call = Some(1);
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    // Endless work: only the CPU limit stops it (the call timeout is ten minutes).
    let e = client
        .call("spin", &mut [Arg::Integer(i64::MAX)])
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::SessionFailed, "{}", e.message);
    assert!(
        e.message.ends_with("killed by signal 24 (SIGXCPU)"),
        "{}",
        e.message
    );
    // A fresh executable with a fresh budget serves the next calls.
    client
        .call("spin", &mut [Arg::Integer(1000)])
        .await
        .unwrap();
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    server.stop().await;
}

/// A tmpfs of `bytes` mounted on `dir` until dropped (the test runs as root, as CI does).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(dir: &std::path::Path, bytes: usize) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "ninf-test"])
            .arg(dir)
            .status()
            .expect("mount runs");
        assert!(
            status.success(),
            "mounting a {bytes}-byte tmpfs on {} failed: this test needs root (CI runs as root)",
            dir.display()
        );
        SmallDisk(dir.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn echo_request(n: usize, keep: bool) -> v1::CallRequest {
    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut req = request("echo", vec![int(n as i64), doubles(&x), none()]);
    if keep {
        req.keep = vec![2];
        req.owner = "t1".into();
    }
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spill_directory_refuses_what_does_not_fit_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let spill = dir.path().join("spill");
    let _disk = SmallDisk::mount(&spill, 64 << 10);
    let server = TestServer::start(|c| {
        c.storage.memory_limit_bytes = 4096;
        c.storage.spill_dir = Some(spill.clone());
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();

    // 128 KiB to keep: past the memory limit, and more than the spill disk holds.
    let e = client
        .call_request(echo_request(16 << 10, true))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::RpcRefused, "{e}");
    for part in [
        "cannot spill object",
        "of 131072 bytes to",
        spill.to_str().unwrap(),
        "No space left on device",
        "memory holds 0 of its 4096 bytes",
    ] {
        assert!(e.message.contains(part), "{part:?} not in: {}", e.message);
    }
    let left: Vec<_> = std::fs::read_dir(&spill).unwrap().collect();
    assert!(left.is_empty(), "the partial file is removed: {left:?}");
    assert_eq!(server.state.store.usage(), (0, 0));

    // What fits in memory is still kept, and results sent back whole still come.
    let kept = client.call_request(echo_request(64, true)).await.unwrap();
    assert!(matches!(
        kept.outputs[0].result,
        Some(v1::call_output::Result::Object(_))
    ));
    let inline = client
        .call_request(echo_request(16 << 10, false))
        .await
        .unwrap();
    let Some(v1::call_output::Result::Array(y)) = &inline.outputs[0].result else {
        panic!("{inline:?}")
    };
    assert_eq!(y.data.len(), 128 << 10);
    assert_eq!(server.state.store.usage(), (512, 0));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_says_whether_its_executable_was_cold_for_it() {
    // One processor: every call runs on the module's one warm executable.
    let server = TestServer::start(|c| c.processors = Some(1)).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let cold = |n: usize| {
        let client = &client;
        async move {
            let reply = client.call_request(echo_request(n, false)).await.unwrap();
            reply.timing.unwrap().cold
        }
    };
    assert!(cold(64).await, "the first echo on a new executable");
    assert!(!cold(64).await, "the same echo again");
    assert!(!cold(100).await, "a request less than twice as large");
    assert!(cold(16 << 10).await, "a request many times larger");
    assert!(!cold(16 << 10).await, "that size again");
    assert!(!cold(64).await, "smaller again");
    let dgefa = request(
        "dgefa",
        vec![doubles(&[2.0, 0.0, 0.0, 2.0]), int(2), none()],
    );
    let first = client.call_request(dgefa.clone()).await.unwrap();
    assert!(
        first.timing.unwrap().cold,
        "another routine of the module, first run"
    );
    let second = client.call_request(dgefa).await.unwrap();
    assert!(!second.timing.unwrap().cold, "that routine again");
    server.stop().await;
}

async fn admitted(server: &TestServer) -> u64 {
    let mut gang =
        v1::gang_control_client::GangControlClient::connect(format!("http://{}", server.address))
            .await
            .unwrap();
    let status = gang.status(v1::GangStatusRequest {}).await.unwrap();
    status.into_inner().admitted
}

async fn call_batch(server: &TestServer, calls: Vec<v1::CallRequest>) -> Vec<v1::CallResult> {
    let mut invoke = v1::invoke_client::InvokeClient::connect(format!("http://{}", server.address))
        .await
        .unwrap();
    let reply = invoke.call_batch(v1::CallBatchRequest { calls }).await;
    reply.unwrap().into_inner().results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_runs_as_one_job_and_answers_each_call_on_its_own() {
    let server = TestServer::start(|c| c.processors = Some(1)).await;
    let before = admitted(&server).await;
    let noops = (0..10).map(|_| request("noop", vec![int(1)])).collect();
    let results = call_batch(&server, noops).await;
    assert_eq!(results.len(), 10);
    assert!(
        results
            .iter()
            .all(|r| matches!(r.result, Some(v1::call_result::Result::Reply(_))))
    );
    assert_eq!(
        admitted(&server).await - before,
        1,
        "ten calls, one gang job"
    );

    // A bad call, a routine's error and a dead executable fail alone; the calls after them
    // still run. A failed run gives its job up, so the next call is admitted anew.
    let before = admitted(&server).await;
    let calls = vec![
        echo_request(3, false),
        request("noop", vec![]),
        request("fail", vec![int(7)]),
        request("segfault", vec![int(1)]),
        echo_request(5, false),
    ];
    let results: Vec<_> = call_batch(&server, calls)
        .await
        .into_iter()
        .map(|r| r.result.unwrap())
        .collect();
    let echoed = |r: &v1::call_result::Result| match r {
        v1::call_result::Result::Reply(reply) => match &reply.outputs[0].result {
            Some(v1::call_output::Result::Array(a)) => {
                ninf_proto::values::decode::<f64>(&a.data).unwrap()
            }
            other => panic!("not an array: {other:?}"),
        },
        v1::call_result::Result::Error(e) => panic!("failed: {e:?}"),
    };
    let error = |r: &v1::call_result::Result| match r {
        v1::call_result::Result::Error(e) => (tonic::Code::from_i32(e.code), e.message.clone()),
        v1::call_result::Result::Reply(_) => panic!("succeeded"),
    };
    assert_eq!(echoed(&results[0]), [0.0, 1.0, 2.0]);
    assert_eq!(
        error(&results[1]),
        (
            tonic::Code::InvalidArgument,
            "`noop` takes 1 arguments, got 0".to_string()
        )
    );
    assert!(
        error(&results[2])
            .1
            .contains("selftest failure with code 7"),
        "{:?}",
        results[2]
    );
    assert!(error(&results[3]).1.contains("SIGSEGV"), "{:?}", results[3]);
    assert_eq!(echoed(&results[4]), [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(admitted(&server).await - before, 3);
    server.stop().await;
}

/// Through `Invoke.Call`: dgefa keeps its factors (320 KB) in the store region, written there
/// by the routine itself, and dgesl reads them from it in place; the solution is the one the
/// routines give in this process, bit for bit, and the room goes back with the objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factors_kept_in_the_store_region_solve_the_system_exactly() {
    let server = TestServer::start(|_| {}).await;
    let region = server.state.store_region.clone().expect("a store region");
    let client = NinfClient::connect(&server.address).await.unwrap();
    let n = 200usize;
    let matrix: Vec<f64> = (0..n * n)
        .map(|i| {
            ((i * 7919) % 1000) as f64 / 1000.0 + if i % (n + 1) == 0 { n as f64 } else { 0.0 }
        })
        .collect();
    let rhs: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 3.0).collect();

    let mut req = request("dgefa", vec![doubles(&matrix), int(n as i64), none()]);
    req.keep = vec![0, 2];
    req.owner = "t-store".into();
    let reply = client.call_request(req).await.unwrap();
    let refs = kept_objects(&reply);
    let (_, factors) = server.state.store.get(&refs[0].object_id).unwrap();
    let (_, pivots) = server.state.store.get(&refs[1].object_id).unwrap();
    let window = region.window();
    assert!(
        window.offset_of(&factors).is_some(),
        "the factors lie in the region"
    );
    assert!(
        window.offset_of(&pivots).is_none(),
        "800 bytes of pivots stay on the heap"
    );

    let mut req = request(
        "dgesl",
        vec![
            object(&refs[0].server, &refs[0].object_id),
            int(n as i64),
            object(&refs[1].server, &refs[1].object_id),
            doubles(&rhs),
        ],
    );
    req.owner = "t-store".into();
    let reply = client.call_request(req).await.unwrap();
    let Some(v1::call_output::Result::Array(x)) = &reply.outputs[0].result else {
        panic!("expected the solution, got {:?}", reply.outputs[0]);
    };
    let (mut a, mut ipvt, mut b) = (matrix.clone(), vec![0i32; n], rhs.clone());
    ninf_routines::linpack::dgesv(&mut a, n as i32, &mut ipvt, &mut b).unwrap();
    assert!(ninf_proto::values::decode::<f64>(&factors).unwrap() == a);
    assert!(ninf_proto::values::decode::<f64>(&x.data).unwrap() == b);
    let metrics = &server.state.metrics;
    let moved = |array| metrics.store_region_bytes(array);
    assert_eq!(
        (
            moved("written_in_place"),
            moved("copied_in"),
            moved("read_in_place")
        ),
        (8 * (n * n) as u64, 0, 8 * (n * n) as u64),
        "dgefa wrote the factors into the region and dgesl read them there"
    );

    drop((factors, pivots));
    server.state.store.delete_owner("t-store");
    assert_eq!(region.reserved(), 0);
    server.stop().await;
}

/// Calls `function` on `server`, as a proxy would for a task alone in its graph or not.
async fn call_alone(server: &TestServer, call: v1::CallRequest, alone: bool) -> v1::CallReply {
    call_at(&server.address, call, alone).await
}

async fn call_at(address: &str, mut call: v1::CallRequest, alone: bool) -> v1::CallReply {
    let mut invoke = v1::invoke_client::InvokeClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    call.alone = alone;
    invoke.call(call).await.unwrap().into_inner()
}

/// `sleep_ms(ms)` on `server`, running while the test goes on.
fn sleep_in_background(server: &TestServer, ms: i64) -> tokio::task::JoinHandle<v1::CallReply> {
    let address = server.address.clone();
    tokio::spawn(async move { call_at(&address, request("sleep_ms", vec![int(ms)]), false).await })
}

/// Waits up to 5 s for `done`; whether it came.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    done()
}

fn product_of(n: usize, reply: &v1::CallReply) -> Vec<f64> {
    let Some(v1::call_output::Result::Array(array)) = &reply.outputs[0].result else {
        panic!("no product in {reply:?}");
    };
    let values: Vec<f64> = ninf_proto::values::decode(&array.data).unwrap();
    assert_eq!(values.len(), n * n);
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_threads_call_computes_on_the_idle_neighbours_core_and_on_its_own_otherwise() {
    use ninf_compute_server::gang::claims::CoreClaims;
    let claims = tempfile::tempdir().unwrap();
    let dir = claims.path().to_path_buf();
    let server_on = |own: u32, spare: u32| {
        let dir = dir.clone();
        move |c: &mut ninf_compute_server::ServerConfig| {
            c.processors = Some(1);
            c.gang.cores = vec![own];
            c.gang.core_claims = Some(dir);
            c.gang.spare_cores = vec![spare];
            // Small products are lent cores too (faer is slow unoptimised).
            c.gang.lend_min_flops = 1e5;
        }
    };
    let first = TestServer::start(server_on(0, 1)).await;
    let second = TestServer::start(server_on(1, 0)).await;

    // Large enough to be lent cores (`lend_min_flops`); B is half the identity, so the
    // product is exact whatever the order of the sums.
    let n = 64;
    let a: Vec<f64> = (0..n * n).map(|i| (i % 17) as f64 - 8.0).collect();
    let b: Vec<f64> = (0..n * n)
        .map(|i| if i % n == i / n { 0.5 } else { 0.0 })
        .collect();
    let expected: Vec<f64> = a.iter().map(|x| x * 0.5).collect();
    assert!(2.0 * (n as f64).powi(3) >= 1e5);
    let mmul = request(
        "mmul",
        vec![int(n as i64), doubles(&a), doubles(&b), none()],
    );
    let threads = |reply: &v1::CallReply| reply.timing.as_ref().unwrap().threads;

    // The neighbour runs nothing: a lone call takes its core too.
    let reply = call_alone(&first, mmul.clone(), true).await;
    assert_eq!(threads(&reply), 2);
    assert_eq!(product_of(n, &reply), expected);
    // A call that is not alone in its graph, or of a routine not declared `Threads`,
    // computes on its own core.
    assert_eq!(threads(&call_alone(&first, mmul.clone(), false).await), 0);
    let sleep = request("sleep_ms", vec![int(1)]);
    assert_eq!(threads(&call_alone(&first, sleep, true).await), 0);
    let small = request(
        "mmul",
        vec![int(8), doubles(&[1.0; 64]), doubles(&[1.0; 64]), none()],
    );
    assert_eq!(threads(&call_alone(&first, small, true).await), 0);

    // While the neighbour computes, its core is not lent.
    let busy = sleep_in_background(&second, 1500);
    let probe = CoreClaims::new(&dir, vec![], vec![1]).unwrap();
    assert!(
        eventually(|| probe.borrow().cores.is_empty()).await,
        "the neighbour never held its core"
    );
    let reply = call_alone(&first, mmul.clone(), true).await;
    assert_eq!(threads(&reply), 0);
    assert_eq!(product_of(n, &reply), expected);
    busy.await.unwrap();

    // Nor while its own server has another job: that job's slots would stop the call and
    // leave the lent core idle.
    let other_job = sleep_in_background(&first, 1500);
    assert!(
        eventually(|| first.state.gang.jobs() == 1).await,
        "the other job never started"
    );
    assert_eq!(threads(&call_alone(&first, mmul, true).await), 0);
    other_job.await.unwrap();
    first.stop().await;
    second.stop().await;
}

/// A caller announcing a release this server cannot work with is refused, both releases
/// named; the same release, or none announced (grpcurl), is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_of_another_release_is_refused_naming_both() {
    let server = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let announcing = |version: &'static str| {
        v1::interface_client::InterfaceClient::with_interceptor(
            client.channel(),
            move |mut request: tonic::Request<()>| {
                request
                    .metadata_mut()
                    .insert("ninf-version", version.parse().unwrap());
                Ok(request)
            },
        )
    };
    let refused = announcing("9.0.0")
        .list(v1::ListRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        refused.message(),
        format!(
            "the caller runs ninf 9.0.0 and this compute server runs ninf {}; these releases do \
             not work together: run the same release on both sides",
            ninf_proto::version::VERSION
        )
    );
    assert_eq!(ninf::CallError::from(refused).kind, ErrorKind::RpcRefused);
    announcing(ninf_proto::version::VERSION)
        .list(v1::ListRequest::default())
        .await
        .unwrap();
    let mut plain = v1::interface_client::InterfaceClient::new(client.channel());
    plain.list(v1::ListRequest::default()).await.unwrap();
    // The grid's own client is served.
    assert_eq!(client.list().await.unwrap().len(), 3);
}
