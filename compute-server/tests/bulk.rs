//! The bulk-data path: large calls through it give the same results as small ones through
//! gRPC, and bad input on a bulk connection gets an error frame while the connection (and the
//! server) keep working. A server with a grid token refuses both paths without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{TestServer, echo_request, receive, send};
use ninf::{Arg, ErrorKind, NinfClient};
use ninf_compute_server::metrics::Path;
use ninf_proto::net::local::{self, SharedRegion};
use ninf_proto::v1;
use prost::Message;
use std::os::fd::AsFd;
use tokio::io::AsyncReadExt;
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

/// Array bytes the server took in on each bulk path: (TCP port, same-host socket).
fn bulk_bytes_in(server: &TestServer) -> (u64, u64) {
    let metrics = &server.state.metrics;
    (
        metrics.bytes_on("in", Path::Bulk),
        metrics.bytes_on("in", Path::Local),
    )
}

/// The server's bytes in on the same-host path once they reach `at_least` (or after about
/// five seconds, whatever they are then): it counts a call just after sending its reply, so
/// a client that has the reply may look before the count.
async fn local_bytes_in_reaching(server: &TestServer, at_least: u64) -> u64 {
    for _ in 0..500 {
        let counted = bulk_bytes_in(server).1;
        if counted >= at_least {
            return counted;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    bulk_bytes_in(server).1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_routine_calls_through_bulk_match_the_reference() {
    let server = TestServer::start(|_| {}).await;
    let connected = NinfClient::connect(&server.address).await.unwrap();
    // From this host the arrays go through shared memory; a client on another host (here:
    // one told not to) sends them over the TCP bulk port. Both must give the same results.
    for same_host in [true, false] {
        let before = bulk_bytes_in(&server);
        let client = connected.clone().with_same_host_bulk(same_host);
        large_routine_calls(&client).await;
        let after = bulk_bytes_in(&server);
        let (tcp, local) = (after.0 - before.0, after.1 - before.1);
        if same_host {
            assert!(
                tcp == 0 && local > 2 * (400 * 400 * 8),
                "tcp {tcp}, local {local}"
            );
        } else {
            assert!(
                local == 0 && tcp > 2 * (400 * 400 * 8),
                "tcp {tcp}, local {local}"
            );
        }
    }
    server.stop().await;
}

async fn large_routine_calls(client: &NinfClient) {
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
    assert!(
        reply.timing.unwrap().cold,
        "the first echo of its executable"
    );
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
    assert!(
        !reply.timing.unwrap().cold,
        "the same echo on the same executable"
    );
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

/// Sends a request frame on a same-host connection, handing `region` over with it.
async fn send_local(
    stream: &tokio::net::UnixStream,
    request: &v1::CallRequest,
    region: Option<std::os::fd::BorrowedFd<'_>>,
) {
    let body = request.encode_to_vec();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    local::send(stream, &frame, region).await.unwrap();
}

async fn receive_local(stream: &tokio::net::UnixStream) -> v1::BulkReply {
    let mut header = [0u8; 4];
    local::receive(stream, &mut header).await.unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(header) as usize];
    local::receive(stream, &mut body).await.unwrap();
    v1::BulkReply::decode(body.as_slice()).unwrap()
}

fn error_of(reply: v1::BulkReply) -> v1::BulkError {
    match reply.result {
        Some(v1::bulk_reply::Result::Error(e)) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

/// `echo` of `x` sent inline: its output still comes back through the region.
fn inline_echo(x: &[f64]) -> v1::CallRequest {
    let mut request = echo_request(x.len() as i64, 0);
    request.arguments[1].source = Some(v1::call_argument::Source::Value(v1::ArgumentValue {
        value: Some(v1::argument_value::Value::Array(
            ninf_proto::ArrayData::Double(x.to_vec()).to_proto(),
        )),
    }));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_host_connection_checks_the_shared_region_and_survives_what_does_not_fit() {
    let server = TestServer::start(|_| {}).await;
    let name = server.state.info.bulk_local.clone();
    assert!(name.starts_with("ninf-bulk-"), "{name}");
    let stream = local::connect(&name).unwrap();

    // No region yet, so the inputs are nowhere: answered, and the connection stays in step.
    send_local(&stream, &echo_request(4, 32), None).await;
    let e = error_of(receive_local(&stream).await);
    assert_eq!(e.code, tonic::Code::InvalidArgument as i32);
    assert_eq!(
        e.message,
        "the call's bulk inputs of 32 bytes do not fit the shared region of 0 bytes"
    );

    // With a region, an output is written at the region's start.
    let region = SharedRegion::create(4096).unwrap();
    let x = vec![1.5, -2.0, 3.25, 8.0];
    send_local(&stream, &inline_echo(&x), Some(region.fd())).await;
    let Some(v1::bulk_reply::Result::Reply(reply)) = receive_local(&stream).await.result else {
        panic!("expected a reply");
    };
    assert!(matches!(
        reply.outputs[0].result,
        Some(v1::call_output::Result::Bulk(v1::BulkArray {
            bytes: 32,
            ..
        }))
    ));
    assert_eq!(
        ninf_proto::values::decode::<f64>(&region.bytes()[..32]).unwrap(),
        x
    );

    // Inputs larger than the region are refused by name.
    send_local(&stream, &echo_request(1024, 8192), None).await;
    let e = error_of(receive_local(&stream).await);
    assert_eq!(
        e.message,
        "the call's bulk inputs of 8192 bytes do not fit the shared region of 4096 bytes"
    );
    // Outputs larger than the region follow the frame on the socket, and the region is
    // left alone.
    let before = region.bytes()[..32].to_vec();
    let big: Vec<f64> = (0..1024).map(|i| f64::from(i) * 0.5).collect();
    send_local(&stream, &inline_echo(&big), None).await;
    let reply = receive_local(&stream).await;
    assert!(reply.outputs_follow);
    let Some(v1::bulk_reply::Result::Reply(reply)) = reply.result else {
        panic!("expected a reply");
    };
    assert!(matches!(
        reply.outputs[0].result,
        Some(v1::call_output::Result::Bulk(v1::BulkArray {
            bytes: 8192,
            ..
        }))
    ));
    let mut following = vec![0u8; 8192];
    local::receive(&stream, &mut following).await.unwrap();
    assert_eq!(ninf_proto::values::decode::<f64>(&following).unwrap(), big);
    assert_eq!(region.bytes()[..32], before[..]);
    // Outputs that fit come back through the region again, on the same connection.
    let z = vec![4.0, 3.0, 2.0, 1.0];
    send_local(&stream, &inline_echo(&z), None).await;
    let reply = receive_local(&stream).await;
    assert!(!reply.outputs_follow);
    assert_eq!(
        ninf_proto::values::decode::<f64>(&region.bytes()[..32]).unwrap(),
        z
    );

    // A region that could shrink under the server's mapping is refused, and the connection
    // closes.
    let stream = local::connect(&name).unwrap();
    let unsealed = unsealed_memory_file(4096);
    send_local(&stream, &echo_request(4, 32), Some(unsealed.as_fd())).await;
    let e = error_of(receive_local(&stream).await);
    assert_eq!(
        e.message,
        "the shared region is not sealed against shrinking (F_SEAL_SHRINK)"
    );
    let mut rest = [0u8; 1];
    assert!(local::receive(&stream, &mut rest).await.is_err());

    // The server goes on serving, through shared memory, with no executable replaced.
    let client = NinfClient::connect(&server.address).await.unwrap();
    let n = 1 << 18;
    let x = random(n, 9);
    let mut y = vec![0.0; n];
    client
        .call(
            "echo",
            &mut [Arg::Integer(n as i64), Arg::from(&x), Arg::from(&mut y)],
        )
        .await
        .unwrap();
    assert!(y == x);
    assert_eq!(server.state.function("echo").unwrap().pool().replaced(), 0);
    server.stop().await;
}

/// `echo` of `n` doubles whose input lies at `offset` in the region lent as `region`.
fn lent_echo(n: usize, region: &str, offset: u64) -> v1::CallRequest {
    let mut request = echo_request(n as i64, 8 * n as u64);
    request.lent_arrays.push(v1::LentArray {
        parameter: 1,
        region: region.into(),
        offset,
    });
    request
}

/// Sends `request` with `files` handed over, as `lent_regions` names them.
async fn send_lending(
    stream: &tokio::net::UnixStream,
    request: &v1::CallRequest,
    files: &[std::os::fd::BorrowedFd<'_>],
) {
    let body = request.encode_to_vec();
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&body);
    local::send_files(stream, &frame, files).await.unwrap();
}

fn echoed(reply: v1::BulkReply, region: &SharedRegion, n: usize) -> Vec<f64> {
    assert!(
        !reply.outputs_follow,
        "the output fits the connection's region"
    );
    assert!(
        matches!(reply.result, Some(v1::bulk_reply::Result::Reply(_))),
        "{reply:?}"
    );
    ninf_proto::values::decode::<f64>(&region.bytes()[..8 * n]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_in_a_region_a_proxy_lends_on_are_read_where_they_lie_and_bad_names_refused() {
    let server = TestServer::start(|_| {}).await;
    let stream = local::connect(&server.state.info.bulk_local).unwrap();
    let own = SharedRegion::create(1 << 20).unwrap();
    let mut client = SharedRegion::create(1 << 20).unwrap();
    let n = 1 << 15;
    let x = random(n, 3);
    let bytes = ninf_proto::ArrayData::Double(x.clone()).to_proto().data;
    client.bytes_mut()[4096..4096 + bytes.len()].copy_from_slice(&bytes);

    // Handed over with the call: the connection's own region (the empty name) and the
    // client's, under the name the proxy lends it as.
    let mut request = lent_echo(n, "c#0", 4096);
    request.lent_regions = vec![String::new(), "c#0".into()];
    send_lending(&stream, &request, &[own.fd(), client.fd()]).await;
    assert_eq!(echoed(receive_local(&stream).await, &own, n), x);
    assert_eq!(server.state.metrics.lent_input_bytes(), 8 * n as u64);
    // The routine wrote its output where the connection's region carries it back.
    assert_eq!(server.state.metrics.lent_output_bytes(), 8 * n as u64);
    let expected = request.encoded_len() as u64 + 8 * n as u64;
    assert_eq!(
        local_bytes_in_reaching(&server, expected).await,
        expected,
        "the call took its frame and its lent input in on the same-host path"
    );

    // Named again without its file: the server kept it. New bytes at another offset.
    let z = random(n, 4);
    let bytes = ninf_proto::ArrayData::Double(z.clone()).to_proto().data;
    client.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);
    send_lending(&stream, &lent_echo(n, "c#0", 0), &[]).await;
    assert_eq!(echoed(receive_local(&stream).await, &own, n), z);

    // A name never lent, and bytes outside the region: refused by name, connection in step.
    send_lending(&stream, &lent_echo(n, "nope", 0), &[]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "argument `x` of `echo`: no region `nope` was lent on this connection"
    );
    send_lending(&stream, &lent_echo(n, "c#0", 1 << 20), &[]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "argument `x` of `echo`: its 262144 bytes at offset 1048576 lie outside the lent region `c#0` of 1048576 bytes"
    );
    // A region the proxy let go of is no longer there.
    let mut dropped = lent_echo(n, "c#0", 0);
    dropped.dropped_regions = vec!["c#0".into()];
    send_lending(&stream, &dropped, &[]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "argument `x` of `echo`: no region `c#0` was lent on this connection"
    );
    assert_eq!(server.state.metrics.lent_input_bytes(), 16 * n as u64);

    // Files and names that do not match: the connection closes.
    let mut request = lent_echo(n, "c#1", 0);
    request.lent_regions = vec![String::new(), "c#1".into()];
    send_lending(&stream, &request, &[client.fd()]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "the request names 2 handed regions, but 1 files came with it"
    );
    let mut rest = [0u8; 1];
    assert!(local::receive(&stream, &mut rest).await.is_err());
    // A lent region that could shrink is refused as the connection's own region is.
    let stream = local::connect(&server.state.info.bulk_local).unwrap();
    let unsealed = unsealed_memory_file(1 << 20);
    let mut request = lent_echo(n, "c#2", 0);
    request.lent_regions = vec!["c#2".into()];
    send_lending(&stream, &request, &[unsealed.as_fd()]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "the shared region is not sealed against shrinking (F_SEAL_SHRINK)"
    );
    assert_eq!(server.state.function("echo").unwrap().pool().replaced(), 0);
    server.stop().await;
}

/// `echo` of `n` doubles lent in `region` at 0, its output asked at `offset` there, in at
/// most `bytes`.
fn echo_into(n: usize, region: &str, offset: u64, bytes: u64) -> v1::CallRequest {
    let mut request = lent_echo(n, region, 0);
    request.output_place = Some(v1::OutputPlace {
        region: region.into(),
        offset,
        bytes,
        parameters: vec![2],
    });
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_given_a_place_in_a_lent_region_are_written_there_and_named_shared() {
    let server = TestServer::start(|_| {}).await;
    let stream = local::connect(&server.state.info.bulk_local).unwrap();
    let own = SharedRegion::create(1 << 20).unwrap();
    let mut client = SharedRegion::create(2 << 20).unwrap();
    let n = 1 << 15;
    let x = random(n, 5);
    let bytes = ninf_proto::ArrayData::Double(x.clone()).to_proto().data;
    client.bytes_mut()[..bytes.len()].copy_from_slice(&bytes);

    // The place starts off a 64-byte boundary: the output goes to the next one.
    let mut request = echo_into(n, "c#0", (1 << 20) + 8, 8 * n as u64 + 64);
    request.lent_regions = vec![String::new(), "c#0".into()];
    send_lending(&stream, &request, &[own.fd(), client.fd()]).await;
    let reply = match receive_local(&stream).await.result {
        Some(v1::bulk_reply::Result::Reply(reply)) => reply,
        other => panic!("expected a reply, got {other:?}"),
    };
    let shared = v1::SharedArray {
        element_type: v1::ElementType::Double as i32,
        region: "c#0".into(),
        offset: (1 << 20) + 64,
        bytes: 8 * n as u64,
    };
    assert_eq!(
        reply.outputs[0].result,
        Some(v1::call_output::Result::Shared(shared))
    );
    let start = (1 << 20) + 64;
    let written = &client.bytes()[start..start + 8 * n];
    assert_eq!(ninf_proto::values::decode::<f64>(written).unwrap(), x);
    assert!(
        own.bytes()[..8 * n].iter().all(|&b| b == 0),
        "nothing copied"
    );
    assert_eq!(server.state.metrics.lent_output_bytes(), 8 * n as u64);

    // A place too small for the output: it comes back through the connection's region.
    send_lending(
        &stream,
        &echo_into(n, "c#0", 1 << 20, 8 * n as u64 - 1),
        &[],
    )
    .await;
    assert_eq!(echoed(receive_local(&stream).await, &own, n), x);

    // A region never lent, and a place outside the region: refused by name, in step.
    let mut nowhere = echo_into(n, "c#0", 0, 8 * n as u64);
    nowhere.output_place.as_mut().unwrap().region = "nope".into();
    send_lending(&stream, &nowhere, &[]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "output place of `echo`: no region `nope` was lent on this connection"
    );
    send_lending(&stream, &echo_into(n, "c#0", 2 << 20, 64), &[]).await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "output place of `echo`: bytes 2097152..2097216 lie outside the lent region `c#0` of 2097152 bytes"
    );
    send_lending(&stream, &lent_echo(n, "c#0", 0), &[]).await;
    assert_eq!(echoed(receive_local(&stream).await, &own, n), x);
    assert_eq!(server.state.function("echo").unwrap().pool().replaced(), 0);
    server.stop().await;
}

/// A memory file that allows shrinking: what a careless or hostile client might hand over.
fn unsealed_memory_file(len: i64) -> std::os::fd::OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: memfd_create reads the NUL-terminated name and returns a new descriptor.
    let fd = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on a descriptor this function owns.
    assert_eq!(
        unsafe { libc::ftruncate(std::os::fd::AsRawFd::as_raw_fd(&fd), len) },
        0
    );
    fd
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
    // The same-host socket checks it the same way.
    let same_host = local::connect(&server.state.info.bulk_local).unwrap();
    let region = SharedRegion::create(4096).unwrap();
    send_local(&same_host, &echo_request(4, 32), Some(region.fd())).await;
    let e = error_of(receive_local(&same_host).await);
    assert_eq!(e.code, tonic::Code::Unauthenticated as i32);
    assert!(e.message.contains("no grid token"), "{}", e.message);

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

/// A large output kept by a bulk call is written by the routine straight into the server's
/// store region, and a later bulk call naming it reads it there; a kept INOUT array arrives
/// in its room and is updated there. The values are exact, and the room goes back once the
/// owner's objects are deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_outputs_live_in_the_store_region_and_feed_later_calls_in_place() {
    let server = TestServer::start(|_| {}).await;
    let region = server.state.store_region.clone().expect("a store region");
    let mut stream = TcpStream::connect(&server.state.info.bulk_address)
        .await
        .unwrap();
    let n = 20_000usize; // 160,000 bytes: over the 64 KiB of an array beside the message
    let x = random(n, 7);

    let mut keep = echo_request(n as i64, 8 * n as u64);
    keep.keep = vec![2];
    keep.owner = "store-test".into();
    send(&mut stream, &keep, &ninf_proto::values::encode(&x)).await;
    let reply = match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Reply(r)) => r,
        other => panic!("expected a reply, got {other:?}"),
    };
    let Some(v1::call_output::Result::Object(kept)) = reply.outputs[0].result.clone() else {
        panic!("expected an object, got {:?}", reply.outputs[0]);
    };
    let (_, data) = server.state.store.get(&kept.object_id).unwrap();
    assert!(
        region.window().offset_of(&data).is_some(),
        "the kept output lies in the store region"
    );
    assert_eq!(ninf_proto::values::decode::<f64>(&data).unwrap(), x);
    assert_eq!(region.reserved(), (8 * n as u64).div_ceil(4096) * 4096);
    let metrics = &server.state.metrics;
    assert_eq!(
        (
            metrics.store_region_bytes("written_in_place"),
            metrics.store_region_bytes("copied_in")
        ),
        (8 * n as u64, 0),
        "the routine wrote the output there; the server copied nothing"
    );
    drop(data);

    // echo(x = the kept object): its bytes go to the executable by their place in the region.
    let mut again = echo_request(n as i64, 0);
    again.arguments[1].source = Some(v1::call_argument::Source::Object(kept.clone()));
    again.owner = "store-test".into();
    send(&mut stream, &again, &[]).await;
    let reply = match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Reply(r)) => r,
        other => panic!("expected a reply, got {other:?}"),
    };
    assert!(matches!(
        reply.outputs[0].result,
        Some(v1::call_output::Result::Bulk(_))
    ));
    let mut raw = vec![0u8; 8 * n];
    stream.read_exact(&mut raw).await.unwrap();
    assert_eq!(ninf_proto::values::decode::<f64>(&raw).unwrap(), x);
    assert_eq!(metrics.store_region_bytes("read_in_place"), 8 * n as u64);

    // dgefa(a) keeping a: the matrix arrives straight in the room kept for the factors, and
    // the routine factors it there.
    let m = 120usize;
    let mut a = random(m * m, 9);
    for i in 0..m {
        a[i + i * m] += m as f64;
    }
    let dgefa = v1::CallRequest {
        function: "dgefa".into(),
        arguments: vec![
            v1::CallArgument {
                source: Some(v1::call_argument::Source::Bulk(v1::BulkArray {
                    element_type: v1::ElementType::Double as i32,
                    bytes: 8 * (m * m) as u64,
                })),
            },
            v1::CallArgument {
                source: Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::IntValue(m as i64)),
                })),
            },
            v1::CallArgument { source: None },
        ],
        keep: vec![0],
        owner: "store-test".into(),
        ..Default::default()
    };
    send(&mut stream, &dgefa, &ninf_proto::values::encode(&a)).await;
    let reply = match receive(&mut stream).await.result {
        Some(v1::bulk_reply::Result::Reply(r)) => r,
        other => panic!("expected a reply, got {other:?}"),
    };
    let Some(v1::call_output::Result::Object(factors)) = reply.outputs[0].result.clone() else {
        panic!("expected an object, got {:?}", reply.outputs[0]);
    };
    let mut pivots = vec![0u8; 4 * m];
    stream.read_exact(&mut pivots).await.unwrap();
    let (_, data) = server.state.store.get(&factors.object_id).unwrap();
    let (mut here, mut ipvt) = (a.clone(), vec![0i32; m]);
    ninf_routines::linpack::dgefa(&mut here, m as i32, &mut ipvt).unwrap();
    assert!(ninf_proto::values::decode::<f64>(&data).unwrap() == here);
    assert_eq!(ninf_proto::values::decode::<i32>(&pivots).unwrap(), ipvt);
    assert_eq!(
        metrics.store_region_bytes("written_in_place"),
        8 * (n + m * m) as u64
    );
    drop(data);

    assert_eq!(
        server.state.store.delete_owner("store-test"),
        (2, 8 * (n + m * m) as u64)
    );
    assert_eq!(region.reserved(), 0, "the room went back with the objects");
    server.stop().await;
}

/// A put frame of `bytes` bytes of doubles for `owner`; lent when `lent` names a region.
fn put_request(owner: &str, bytes: u64, lent: Option<(&str, u64)>) -> v1::CallRequest {
    let array = v1::CallArgument {
        source: Some(v1::call_argument::Source::Bulk(v1::BulkArray {
            element_type: v1::ElementType::Double as i32,
            bytes,
        })),
    };
    let lent_arrays = lent
        .map(|(region, offset)| v1::LentArray {
            parameter: 0,
            region: region.into(),
            offset,
        })
        .into_iter()
        .collect();
    v1::CallRequest {
        put: Some(v1::BulkPut {
            owner: owner.into(),
        }),
        arguments: vec![array],
        lent_arrays,
        ..Default::default()
    }
}

/// The object a put's reply names, its owner and its values as stored.
fn stored(server: &TestServer, reply: v1::BulkReply) -> (String, Vec<f64>) {
    let Some(v1::bulk_reply::Result::Reply(reply)) = reply.result else {
        panic!("expected a reply, got {reply:?}");
    };
    let Some(v1::call_output::Result::Object(object)) = &reply.outputs[0].result else {
        panic!("expected an object, got {:?}", reply.outputs);
    };
    assert_eq!(object.server, server.state.advertise);
    let (info, data) = server.state.store.get(&object.object_id).unwrap();
    (
        info.owner,
        ninf_proto::values::decode::<f64>(&data).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_on_a_bulk_connection_are_stored_by_every_path_and_bad_ones_refused_in_step() {
    let server = TestServer::start(|_| {}).await;
    let n = 1 << 15;
    let x = random(n, 7);
    let raw = ninf_proto::values::encode(&x);

    // On the TCP port, the bytes after the frame; the same connection after each refusal.
    let mut stream = TcpStream::connect(&server.state.info.bulk_address)
        .await
        .unwrap();
    let mut two = put_request("h1", 8 * n as u64, None);
    two.arguments.push(two.arguments[0].clone());
    send(
        &mut stream,
        &two,
        &[raw.as_slice(), raw.as_slice()].concat(),
    )
    .await;
    assert_eq!(
        error_of(receive(&mut stream).await).message,
        "a put carries one array, not 2 arguments"
    );
    let mut untyped = put_request("h1", 8 * n as u64, None);
    if let Some(v1::call_argument::Source::Bulk(bulk)) = &mut untyped.arguments[0].source {
        bulk.element_type = v1::ElementType::Unspecified as i32;
    }
    send(&mut stream, &untyped, &raw).await;
    assert_eq!(
        error_of(receive(&mut stream).await).message,
        "a put's array must name an element type of fixed size"
    );
    send(&mut stream, &put_request("h1", 8 * n as u64, None), &raw).await;
    assert_eq!(
        stored(&server, receive(&mut stream).await),
        ("h1".into(), x.clone())
    );
    assert_eq!(server.state.metrics.put_bytes("bulk"), 8 * n as u64);

    // On the same-host socket: in the connection's region, then lent where a client put it.
    let stream = local::connect(&server.state.info.bulk_local).unwrap();
    let mut own = SharedRegion::create(1 << 20).unwrap();
    own.bytes_mut()[..raw.len()].copy_from_slice(&raw);
    send_local(
        &stream,
        &put_request("h2", 8 * n as u64, None),
        Some(own.fd()),
    )
    .await;
    assert_eq!(
        stored(&server, receive_local(&stream).await),
        ("h2".into(), x.clone())
    );
    assert_eq!(server.state.metrics.put_bytes("local"), 8 * n as u64);

    let mut client = SharedRegion::create(1 << 20).unwrap();
    let z = random(n, 8);
    let lent_bytes = ninf_proto::values::encode(&z);
    client.bytes_mut()[4096..4096 + lent_bytes.len()].copy_from_slice(&lent_bytes);
    let mut lent = put_request("h3", 8 * n as u64, Some(("c#0", 4096)));
    lent.lent_regions = vec!["c#0".into()];
    send_lending(&stream, &lent, &[client.fd()]).await;
    assert_eq!(
        stored(&server, receive_local(&stream).await),
        ("h3".into(), z)
    );
    assert_eq!(server.state.metrics.put_bytes("lent"), 8 * n as u64);

    // A region never lent, and bytes outside the one that was: refused, in step.
    send_lending(
        &stream,
        &put_request("h4", 8 * n as u64, Some(("nope", 0))),
        &[],
    )
    .await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "the put's array: no region `nope` was lent on this connection"
    );
    send_lending(
        &stream,
        &put_request("h4", 8 * n as u64, Some(("c#0", 1 << 20))),
        &[],
    )
    .await;
    assert_eq!(
        error_of(receive_local(&stream).await).message,
        "the put's array: its 262144 bytes at offset 1048576 lie outside the lent region `c#0` of 1048576 bytes"
    );
    send_lending(
        &stream,
        &put_request("h5", 8 * n as u64, Some(("c#0", 0))),
        &[],
    )
    .await;
    assert_eq!(stored(&server, receive_local(&stream).await).0, "h5");
    assert_eq!(
        server.state.store.len(),
        4,
        "the four puts stored, nothing of the refused ones"
    );
    server.stop().await;
}
