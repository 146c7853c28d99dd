//! The bulk-data path: large calls through it give the same results as small ones through
//! gRPC, and bad input on a bulk connection gets an error frame while the connection (and the
//! server) keep working. A server with a grid token refuses both paths without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{TestServer, echo_request};
use ninf::{Arg, ErrorKind, NinfClient};
use ninf_proto::v1;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn random(n: usize, seed: u64) -> Vec<f64> {
    let mut state = seed | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_routine_calls_through_bulk_match_the_reference() {
    let server = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    // 3 arrays of 400 x 400 doubles: 3.8 MiB, well past the bulk threshold.
    let n = 400;
    let a = random(n * n, 1);
    let b = random(n * n, 2);
    let mut c = vec![0.0; n * n];
    client
        .call(
            "mmul",
            &mut [
                Arg::Integer(n as i64),
                Arg::from(&a),
                Arg::from(&b),
                Arg::from(&mut c),
            ],
        )
        .await
        .unwrap();
    for (i, j) in [(0, 0), (17, 391), (399, 399), (250, 3)] {
        let want: f64 = (0..n).map(|k| a[i + k * n] * b[k + j * n]).sum();
        assert!((c[i + j * n] - want).abs() < 1e-12, "C[{i},{j}]");
    }

    // dgesv with INOUT arrays both ways.
    let mut m = random(n * n, 3);
    for i in 0..n {
        m[i + i * n] += n as f64;
    }
    let m0 = m.clone();
    let x: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
    let mut rhs: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| m0[i + j * n] * x[j]).sum())
        .collect();
    let mut ipvt = vec![0i32; n];
    let outcome = client
        .call(
            "dgesv",
            &mut [
                Arg::from(&mut m),
                Arg::Integer(n as i64),
                Arg::from(&mut ipvt),
                Arg::from(&mut rhs),
            ],
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, 0);
    let error = rhs
        .iter()
        .zip(&x)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(error < 1e-12, "max error {error}");
    assert!(ipvt.iter().all(|&p| p >= 1 && p as usize <= n));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_errors_come_back_as_the_same_errors_as_grpc() {
    let server = TestServer::start(|c| c.max_request_bytes = 64 << 20).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let n = 1 << 18; // 2 MiB of doubles: the bulk path
    let x = vec![1.0; n];
    let mut y = vec![0.0; n - 1];
    let e = client
        .call(
            "echo",
            &mut [Arg::Integer(n as i64), Arg::from(&x), Arg::from(&mut y)],
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::BadArgument,
        "checked before sending: {}",
        e.message
    );
    let mut y = vec![0.0; n];
    let limited = client
        .clone()
        .with_timeout(std::time::Duration::from_millis(200));
    let e = limited
        .call("sleep_ms", &mut [Arg::Integer(5000)])
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout);
    client
        .call(
            "echo",
            &mut [Arg::Integer(n as i64), Arg::from(&x), Arg::from(&mut y)],
        )
        .await
        .unwrap();
    assert!(y == x);
    server.stop().await;
}

async fn send(stream: &mut TcpStream, request: &v1::CallRequest, payload: &[u8]) {
    let body = request.encode_to_vec();
    stream
        .write_all(&(body.len() as u32).to_le_bytes())
        .await
        .unwrap();
    stream.write_all(&body).await.unwrap();
    stream.write_all(payload).await.unwrap();
}

async fn receive(stream: &mut TcpStream) -> v1::BulkReply {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(header) as usize];
    stream.read_exact(&mut body).await.unwrap();
    v1::BulkReply::decode(body.as_slice()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_bulk_connection_survives_refused_calls_and_keeps_outputs_on_request() {
    let server = TestServer::start(|_| {}).await;
    let address = server.state.info.bulk_address.clone();
    let mut stream = TcpStream::connect(&address).await.unwrap();

    // Declared size disagrees with the IDL: refused, and the declared bytes are skipped so
    // the connection stays in step.
    send(&mut stream, &echo_request(4, 24), &[0u8; 24]).await;
    match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Error(e)) => {
            assert_eq!(e.code, tonic::Code::InvalidArgument as i32);
            assert_eq!(
                e.message,
                "argument `x` of `echo` must be 32 bytes of double, got 24 bytes of double"
            );
        }
        other => panic!("expected an error, got {other:?}"),
    }

    // An unknown routine, same connection.
    let mut unknown = echo_request(4, 32);
    unknown.function = "nope".into();
    send(&mut stream, &unknown, &[0u8; 32]).await;
    match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Error(e)) => {
            assert_eq!(e.message, "no routine `nope` on this server")
        }
        other => panic!("expected an error, got {other:?}"),
    }

    // A good call, same connection: the output comes back as raw bytes after the reply.
    let x: Vec<f64> = vec![1.5, -2.0, 3.25, 8.0];
    send(
        &mut stream,
        &echo_request(4, 32),
        &ninf_proto::values::encode(&x),
    )
    .await;
    let reply = match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Reply(r)) => r,
        other => panic!("expected a reply, got {other:?}"),
    };
    assert!(matches!(
        reply.outputs[0].result,
        Some(v1::call_output::Result::Bulk(v1::BulkArray {
            bytes: 32,
            ..
        }))
    ));
    let mut raw = [0u8; 32];
    stream.read_exact(&mut raw).await.unwrap();
    assert_eq!(ninf_proto::values::decode::<f64>(&raw).unwrap(), x);

    // Kept instead of returned: the output lands in storage, owned by the caller's id.
    let mut keep = echo_request(4, 32);
    keep.keep = vec![2];
    keep.owner = "bulk-test".into();
    send(&mut stream, &keep, &ninf_proto::values::encode(&x)).await;
    let reply = match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Reply(r)) => r,
        other => panic!("expected a reply, got {other:?}"),
    };
    let Some(v1::call_output::Result::Object(object)) = &reply.outputs[0].result else {
        panic!("expected an object, got {:?}", reply.outputs[0]);
    };
    let (info, data) = server.state.store.get(&object.object_id).unwrap();
    assert_eq!(info.owner, "bulk-test");
    assert_eq!(ninf_proto::values::decode::<f64>(&data).unwrap(), x);

    // A client that vanishes halfway through its bytes costs nothing.
    send(&mut stream, &echo_request(1 << 20, 8 << 20), &[0u8; 4096]).await;
    drop(stream);
    let client = NinfClient::connect(&server.address).await.unwrap();
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    let routine = server.state.function("echo").unwrap();
    assert_eq!(
        routine.pool().replaced(),
        0,
        "no executable was killed and replaced"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_a_grid_token_refuses_requests_without_it_on_grpc_and_bulk() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("ninf-bulk-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("token");
    let token = ninf_proto::net::auth::generate_token(&token_file).unwrap();
    assert_eq!(
        std::fs::metadata(&token_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let server = TestServer::start(|c| c.auth_token_file = Some(token_file.clone())).await;

    // gRPC without the token: refused by name, before anything runs.
    let open = NinfClient::connect(&server.address).await.unwrap();
    let e = open.describe("echo").await.unwrap_err();
    assert_eq!(
        e.message,
        "the compute server refuses requests with no grid token; pass the grid's token (the \
         `token` file `ninf up` wrote)"
    );
    let wrong = NinfClient::connect(&server.address)
        .await
        .unwrap()
        .with_token("0123456789abcdef-not-it");
    let e = wrong
        .call("noop", &mut [Arg::Integer(0)])
        .await
        .unwrap_err();
    assert!(e.message.contains("a wrong grid token"), "{}", e.message);

    // Bulk without it: an error frame, and the connection closes (the request's bulk bytes
    // are never read).
    let mut stream = TcpStream::connect(&server.state.info.bulk_address)
        .await
        .unwrap();
    send(&mut stream, &echo_request(4, 32), &[0u8; 32]).await;
    match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Error(e)) => {
            assert_eq!(e.code, tonic::Code::Unauthenticated as i32);
            assert!(e.message.contains("no grid token"), "{}", e.message);
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let mut rest = Vec::new();
    assert_eq!(stream.read_to_end(&mut rest).await.unwrap(), 0);

    // With the token, both paths serve: a large call goes over bulk, carrying it.
    let client = NinfClient::connect(&server.address)
        .await
        .unwrap()
        .with_token(&token);
    let n = 400usize;
    let x = random(n * n, 7);
    let mut y = vec![0.0; n * n];
    client
        .call(
            "echo",
            &mut [
                Arg::Integer((n * n) as i64),
                Arg::from(&x),
                Arg::from(&mut y),
            ],
        )
        .await
        .unwrap();
    assert!(y == x);
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    // The node agents got in too: they present the token to the gang service.
    let mut attached = 0;
    for _ in 0..100 {
        let status = server.state.gang.status();
        attached = status.nodes.iter().filter(|n| n.attached).count();
        if attached > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(attached > 0, "no node agent attached");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
