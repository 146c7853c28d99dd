//! Call overheads, each measured against a baseline in the same run on the same machine:
//!
//! 1. null call: `ninf_call` of `noop` through a server vs a raw tonic unary echo;
//! 2. large arguments: `echo` of 32 MiB in and 32 MiB out (through shared memory, and over the
//!    TCP bulk port as from another host) vs a raw TCP loopback copy of the
//!    same 64 MiB;
//! 3. warm pool: a call on a warm executable vs spawning the executable for each call.
//!
//! Run with `cargo bench -p ninf-compute-server --bench calls`; figures go to
//! docs/performance.md. Prints one JSON object per comparison.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

use ninf::{Arg, NinfClient};
use ninf_compute_server::ServerConfig;
use ninf_compute_server::config::ModuleConfig;
use ninf_executable::ExecutableProcess;
use ninf_proto::v1;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn binaries() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

fn ensure_executables() {
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "-q", "--release", "-p", "ninf-routines", "--bins"])
        .status()
        .unwrap();
    assert!(status.success());
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

struct EchoService;

#[tonic::async_trait]
impl v1::echo_server::Echo for EchoService {
    async fn echo(
        &self,
        request: tonic::Request<v1::EchoMessage>,
    ) -> Result<tonic::Response<v1::EchoMessage>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }
}

async fn start_ninf_server() -> ninf_compute_server::Running {
    let config = ServerConfig {
        listen: "127.0.0.1:0".into(),
        load_interval_seconds: 5.0,
        processors: Some(1),
        max_request_bytes: 1 << 30,
        modules: vec![ModuleConfig {
            executable: binaries().join("ninf-exec-selftest"),
            idl: ninf_routines::idl::path("selftest"),
        }],
        ..ServerConfig::default()
    };
    ninf_compute_server::bind(&config, v1::ServerInfo::default())
        .await
        .unwrap()
}

async fn start_echo_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(
        ninf_proto::net::server(None)
            .unwrap()
            .add_service(
                v1::echo_server::EchoServer::new(EchoService)
                    .max_decoding_message_size(usize::MAX)
                    .max_encoding_message_size(usize::MAX),
            )
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    address
}

/// A TCP server that reads `len` bytes and writes them back.
async fn start_tcp_echo(len: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket.set_nodelay(true).unwrap();
            let mut buffer = vec![0u8; len];
            socket.read_exact(&mut buffer).await.unwrap();
            socket.write_all(&buffer).await.unwrap();
        }
    });
    address
}

async fn null_calls(
    ninf: &NinfClient,
    echo: &mut v1::echo_client::EchoClient<tonic::transport::Channel>,
) {
    // Alternate single calls so drift in the machine hits both sides alike.
    let calls = 3000;
    let (mut ninf_samples, mut raw_samples) =
        (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for _ in 0..calls {
        let start = Instant::now();
        ninf.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
        ninf_samples.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        echo.echo(v1::EchoMessage {
            data: bytes::Bytes::from_static(&[0; 4]),
        })
        .await
        .unwrap();
        raw_samples.push(start.elapsed().as_secs_f64());
    }
    let (ninf_us, raw_us) = (median(ninf_samples) * 1e6, median(raw_samples) * 1e6);
    println!(
        "{{\"bench\":\"null_call\",\"ninf_us\":{ninf_us:.1},\"raw_tonic_echo_us\":{raw_us:.1},\"ratio\":{:.2},\"target\":\"<= 2.0\"}}",
        ninf_us / raw_us
    );
}

/// Where the time of a large call goes: gRPC alone, and the executable pipe alone.
async fn large_breakdown(echo: &mut v1::echo_client::EchoClient<tonic::transport::Channel>) {
    let bytes = bytes::Bytes::from(vec![3u8; 32 << 20]);
    let mut grpc = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        echo.echo(v1::EchoMessage {
            data: bytes.clone(),
        })
        .await
        .unwrap();
        grpc.push(start.elapsed().as_secs_f64());
    }
    let path = binaries().join("ninf-exec-selftest");
    let n = 4i64 << 20;
    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let direct = tokio::task::spawn_blocking(move || {
        let mut process = ExecutableProcess::spawn(&path).unwrap();
        let mut samples = Vec::new();
        for _ in 0..5 {
            let args = vec![
                v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::IntValue(n)),
                },
                v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::Array(
                        ninf_proto::ArrayData::Double(x.clone()).to_proto(),
                    )),
                },
                v1::ArgumentValue { value: None },
            ];
            let start = Instant::now();
            process.call("echo", args).unwrap();
            samples.push(start.elapsed().as_secs_f64());
        }
        samples
    })
    .await
    .unwrap();
    println!(
        "{{\"bench\":\"large_call_breakdown\",\"raw_tonic_echo_32MiB_ms\":{:.1},\"executable_pipe_echo_32MiB_ms\":{:.1}}}",
        median(grpc) * 1e3,
        median(direct) * 1e3
    );
}

/// One `echo` of `x` into `y` (seconds), checked.
async fn echo_call(ninf: &NinfClient, x: &[f64], y: &mut [f64]) -> f64 {
    let n = x.len();
    y[n - 1] = -1.0;
    let start = Instant::now();
    ninf.call(
        "echo",
        &mut [Arg::Integer(n as i64), Arg::from(x), Arg::from(&mut *y)],
    )
    .await
    .unwrap();
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(y[n - 1], x[n - 1]);
    seconds
}

/// The same 32 MiB each way over a fresh loopback TCP connection (seconds).
async fn raw_tcp_echo(tcp_address: &str, payload: &[u8]) -> f64 {
    let start = Instant::now();
    let mut socket = tokio::net::TcpStream::connect(tcp_address).await.unwrap();
    socket.set_nodelay(true).unwrap();
    let (mut reader, mut writer) = socket.split();
    let mut back = vec![0u8; payload.len()];
    let (w, r) = tokio::join!(writer.write_all(payload), reader.read_exact(&mut back));
    w.unwrap();
    r.unwrap();
    start.elapsed().as_secs_f64()
}

/// The same server called from this host (arrays through shared memory) and as a client on
/// another host would (`with_same_host_bulk(false)`: arrays over the TCP bulk port).
async fn large_calls(ninf: &NinfClient, tcp_address: &str) {
    let n = 4 << 20; // 4 Mi doubles = 32 MiB
    let x: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let mut y = vec![0.0; n];
    let payload = vec![7u8; n * 8];
    let moved = 2.0 * (n * 8) as f64;
    let over_tcp = ninf.clone().with_same_host_bulk(false);
    let (mut ninf_samples, mut tcp_bulk_samples, mut raw_samples) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..7 {
        ninf_samples.push(echo_call(ninf, &x, &mut y).await);
        tcp_bulk_samples.push(echo_call(&over_tcp, &x, &mut y).await);
        raw_samples.push(raw_tcp_echo(tcp_address, &payload).await);
    }
    let (ninf_s, tcp_bulk_s, raw_s) = (
        median(ninf_samples),
        median(tcp_bulk_samples),
        median(raw_samples),
    );
    let (ninf_mb, raw_mb) = (moved / ninf_s / 1e6, moved / raw_s / 1e6);
    println!(
        "{{\"bench\":\"large_call_32MiB_in_32MiB_out\",\"ninf_ms\":{:.1},\"ninf_tcp_bulk_ms\":{:.1},\"raw_tcp_ms\":{:.1},\"ninf_MBps\":{ninf_mb:.0},\"raw_tcp_MBps\":{raw_mb:.0},\"ratio\":{:.2},\"tcp_bulk_ratio\":{:.2},\"target\":\">= 0.8\"}}",
        ninf_s * 1e3,
        tcp_bulk_s * 1e3,
        raw_s * 1e3,
        raw_s / ninf_s,
        raw_s / tcp_bulk_s,
    );
}

fn warm_versus_cold() {
    let path = binaries().join("ninf-exec-selftest");
    let noop = || {
        vec![v1::ArgumentValue {
            value: Some(v1::argument_value::Value::IntValue(0)),
        }]
    };
    let mut warm = ExecutableProcess::spawn(&path).unwrap();
    warm.call("noop", noop()).unwrap();
    let (mut warm_samples, mut cold_samples) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let start = Instant::now();
        warm.call("noop", noop()).unwrap();
        warm_samples.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        let mut cold = ExecutableProcess::spawn(&path).unwrap();
        cold.call("noop", noop()).unwrap();
        cold.shutdown().unwrap();
        cold_samples.push(start.elapsed().as_secs_f64());
    }
    let (warm_us, cold_us) = (median(warm_samples) * 1e6, median(cold_samples) * 1e6);
    println!(
        "{{\"bench\":\"warm_pool\",\"warm_call_us\":{warm_us:.1},\"cold_spawn_call_us\":{cold_us:.1},\"saved_us\":{:.1},\"cold_over_warm\":{:.1}}}",
        cold_us - warm_us,
        cold_us / warm_us
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: run only for bench.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    ensure_executables();
    // The same allocator setting the server binary uses (both sides live in this process).
    ninf_compute_server::keep_freed_memory();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // Serves until the end of the block.
        let ninf_server = start_ninf_server().await;
        let ninf_address = ninf_server.address.clone();
        let echo_address = start_echo_server().await;
        let tcp_address = start_tcp_echo(32 << 20).await;
        let ninf = NinfClient::connect(&ninf_address).await.unwrap();
        let channel = ninf_proto::net::connect(
            &echo_address,
            None,
            ninf_proto::net::ConnectionSettings::default(),
        )
        .await
        .unwrap();
        let mut echo = v1::echo_client::EchoClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX);
        // Warm up both paths (descriptor fetch, connections).
        ninf.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
        echo.echo(v1::EchoMessage::default()).await.unwrap();
        null_calls(&ninf, &mut echo).await;
        large_calls(&ninf, &tcp_address).await;
        large_breakdown(&mut echo).await;
    });
    warm_versus_cold();
}
