//! Stored arrays lent between the servers of one host: a call on one server whose argument
//! another server of the host keeps reads it where it lies in that server's store region,
//! through gRPC and through the bulk port alike; the loan ends after the call; a store
//! socket answers only with the grid's token, and names what it cannot lend.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{TestServer, echo_request, receive, send};
use ninf::NinfClient;
use ninf_idl::ElementType;
use ninf_proto::net::local;
use ninf_proto::v1;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// `x` kept on `server` under `owner`, in its store region.
fn keep_in_region(server: &TestServer, owner: &str, x: &[f64]) -> v1::ObjectRef {
    let region = server.state.store_region.clone().expect("a store region");
    let data = region.copy_in(&ninf_proto::values::encode(x)).unwrap();
    let info = server
        .state
        .store
        .put(owner, ElementType::Double, data)
        .unwrap();
    v1::ObjectRef {
        server: server.address.clone(),
        object_id: info.id,
    }
}

fn echo_of(n: usize, x: &v1::ObjectRef) -> v1::CallRequest {
    let mut request = echo_request(n as i64, 0);
    request.arguments[1].source = Some(v1::call_argument::Source::Object(x.clone()));
    request
}

async fn echo_through_bulk(address: &str, request: &v1::CallRequest, n: usize) -> Vec<f64> {
    let mut stream = TcpStream::connect(address).await.unwrap();
    send(&mut stream, request, &[]).await;
    let reply = receive(&mut stream).await;
    assert!(
        matches!(reply.result, Some(v1::bulk_reply::Result::Reply(_))),
        "{reply:?}"
    );
    let mut raw = vec![0u8; 8 * n];
    stream.read_exact(&mut raw).await.unwrap();
    ninf_proto::values::decode::<f64>(&raw).unwrap()
}

async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_array_kept_by_another_server_of_the_host_is_read_where_it_lies_and_returned() {
    let a = TestServer::start(|_| {}).await;
    let b = TestServer::start(|_| {}).await;
    let n = 20_000usize; // 160,000 bytes: over the 64 KiB of an array beside the message
    let x: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 7.0).collect();
    let kept = keep_in_region(&a, "t-borrow", &x);
    let (peer_a, peer_b) = (&a.state.metrics, &b.state.metrics);

    // Through gRPC: echo on B of the array A keeps.
    let client = NinfClient::connect(&b.address).await.unwrap();
    let reply = client.call_request(echo_of(n, &kept)).await.unwrap();
    let Some(v1::call_output::Result::Array(y)) = &reply.outputs[0].result else {
        panic!("expected the echo, got {:?}", reply.outputs[0]);
    };
    assert_eq!(ninf_proto::values::decode::<f64>(&y.data).unwrap(), x);
    let bytes = 8 * n as u64;
    assert_eq!(peer_a.store_region_bytes("lent_to_peer"), bytes);
    assert_eq!(peer_b.store_region_bytes("read_from_peer"), bytes);

    // Through B's bulk port: the same, lent on to the executable the bulk path's way.
    let y = echo_through_bulk(&b.state.info.bulk_address, &echo_of(n, &kept), n).await;
    assert_eq!(y, x);
    assert_eq!(peer_a.store_region_bytes("lent_to_peer"), 2 * bytes);
    assert_eq!(peer_b.store_region_bytes("read_from_peer"), 2 * bytes);
    assert_eq!(
        (
            peer_b.store_region_bytes("read_in_place"),
            peer_b.lent_input_bytes()
        ),
        (0, 0),
        "B's own store and a proxy's regions had no part in it"
    );

    // A copy B keeps (a data handle's replica) is B's own, not A's memory on loan.
    let mut storage_b = v1::storage_client::StorageClient::new(client.channel());
    let copy = storage_b
        .copy_from(v1::CopyFromRequest {
            source: Some(kept.clone()),
            owner: "t-copy".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let (_, copied) = b.state.store.get(&copy.object_id).unwrap();
    let own = b.state.store_region.clone().unwrap();
    assert!(
        own.window().offset_of(&copied).is_some(),
        "in B's own region"
    );
    assert_eq!(ninf_proto::values::decode::<f64>(&copied).unwrap(), x);

    // The loans ended with the calls: once A deletes the array, its room is free again.
    a.state.store.delete_owner("t-borrow");
    let region = a.state.store_region.clone().unwrap();
    assert!(
        eventually(|| region.reserved() == 0).await,
        "A's region still holds {} bytes",
        region.reserved()
    );

    assert_eq!(
        ninf_proto::values::decode::<f64>(&copied).unwrap(),
        x,
        "B's copy outlives A's array"
    );

    // A deleted array cannot be lent: the call falls back to Storage.Get, whose error names it.
    let e = client.call_request(echo_of(n, &kept)).await.unwrap_err();
    assert_eq!(
        e.message,
        format!(
            "argument `x` of `echo`: cannot fetch object `{}` from {}: unknown object id `{}` (never stored here, or already deleted)",
            kept.object_id, a.address, kept.object_id
        )
    );
    a.stop().await;
    b.stop().await;
}

async fn ask(stream: &tokio::net::UnixStream, frame: v1::StoreBorrow) {
    local::send_message(stream, &frame, None).await.unwrap();
}

async fn answer(
    stream: &tokio::net::UnixStream,
) -> (v1::StoreBorrowReply, Option<std::os::fd::OwnedFd>) {
    local::receive_message(stream, 1 << 20).await.unwrap()
}

fn refused(reply: v1::StoreBorrowReply) -> String {
    match reply.result {
        Some(v1::store_borrow_reply::Result::Error(e)) => e.message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_socket_lends_only_with_the_token_and_names_what_it_cannot_lend() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    let token = ninf_proto::net::auth::generate_token(&token_file).unwrap();
    let a = TestServer::start(|c| c.auth_token_file = Some(token_file.clone())).await;
    let n = 10_000usize;
    let x: Vec<f64> = (0..n).map(|i| (i % 97) as f64).collect();
    let kept = keep_in_region(&a, "t-socket", &x);
    let name = a.state.info.store_local.clone();
    assert!(name.starts_with("ninf-store-"), "{name}");

    // Without the token: refused, and the connection closes.
    let stream = local::connect(&name).unwrap();
    let without = v1::StoreBorrow {
        object_id: kept.object_id.clone(),
        ..Default::default()
    };
    ask(&stream, without).await;
    let (reply, file) = answer(&stream).await;
    assert!(file.is_none());
    assert!(refused(reply).contains("token"));
    assert!(
        local::receive_message::<v1::StoreBorrowReply>(&stream, 1 << 20)
            .await
            .is_err()
    );

    // With it: an unknown id is named; a known one is lent, the region's file with it.
    let stream = local::connect(&name).unwrap();
    let authorization = format!("Bearer {token}");
    let unknown = v1::StoreBorrow {
        authorization: authorization.clone(),
        object_id: "no-such-object".into(),
        ..Default::default()
    };
    ask(&stream, unknown).await;
    let (reply, _) = answer(&stream).await;
    assert_eq!(
        refused(reply),
        "unknown object id `no-such-object` (never stored here, or already deleted)"
    );
    let borrow = v1::StoreBorrow {
        authorization: authorization.clone(),
        object_id: kept.object_id.clone(),
        ..Default::default()
    };
    ask(&stream, borrow).await;
    let (reply, file) = answer(&stream).await;
    let Some(v1::store_borrow_reply::Result::Loan(loan)) = reply.result else {
        panic!("expected a loan, got {reply:?}");
    };
    let region = local::SharedRegion::adopt(file.expect("the region's file")).unwrap();
    let lent = &region.bytes()[loan.offset as usize..][..loan.bytes as usize];
    assert_eq!(ninf_proto::values::decode::<f64>(lent).unwrap(), x);

    // Deleted while lent, the array keeps its room until the loan is returned.
    let room = a.state.store_region.clone().unwrap();
    a.state.store.delete_owner("t-socket");
    assert!(room.reserved() > 0, "the loan holds the array");
    let give_back = v1::StoreBorrow {
        authorization,
        returned: vec![loan.loan],
        ..Default::default()
    };
    ask(&stream, give_back).await;
    assert!(eventually(|| room.reserved() == 0).await);
    a.stop().await;
}

fn chunks_of(x: &[f64], total_bytes: u64) -> Vec<v1::PutChunk> {
    let bytes = ninf_proto::values::encode(x);
    bytes
        .chunks(64 << 10)
        .map(|data| v1::PutChunk {
            owner: "t-put".into(),
            element_type: v1::ElementType::Double as i32,
            data: bytes::Bytes::copy_from_slice(data),
            total_bytes,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_put_lands_in_the_store_region_and_a_short_one_is_refused() {
    let a = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&a.address).await.unwrap();
    let mut storage = v1::storage_client::StorageClient::new(client.channel());
    let region = a.state.store_region.clone().unwrap();
    let x: Vec<f64> = (0..30_000).map(|i| i as f64).collect();
    let bytes = 8 * x.len() as u64;
    // Its length said up front (as a proxy says it), or not: in the region either way.
    for total in [bytes, 0] {
        let info = storage
            .put(tokio_stream::iter(chunks_of(&x, total)))
            .await
            .unwrap()
            .into_inner();
        let (_, data) = a.state.store.get(&info.object_id).unwrap();
        assert!(
            region.window().offset_of(&data).is_some(),
            "announced {total}"
        );
        assert_eq!(ninf_proto::values::decode::<f64>(&data).unwrap(), x);
    }
    assert_eq!(
        a.state.metrics.store_region_bytes("copied_in"),
        bytes,
        "only the unannounced one was copied"
    );
    let e = storage
        .put(tokio_stream::iter(chunks_of(&x, bytes + 8)))
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            "{bytes} bytes came of the {} the first chunk announced",
            bytes + 8
        )
    );
    let e = storage
        .put(tokio_stream::iter(chunks_of(&x, bytes - 8)))
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        format!(
            "more than the {} bytes the first chunk announced",
            bytes - 8
        )
    );
    // A small array is received on the heap; a stream that stops short of what it
    // announced is refused there too, not stored as if whole.
    let small = [1.0, 2.0];
    let e = storage
        .put(tokio_stream::iter(chunks_of(&small, 24)))
        .await
        .unwrap_err();
    assert_eq!(
        e.message(),
        "16 bytes came of the 24 the first chunk announced"
    );
    a.state.store.delete_owner("t-put");
    assert_eq!(region.reserved(), 0, "refused puts leave no room taken");
    a.stop().await;
}
