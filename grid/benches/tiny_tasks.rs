//! Throughput of tiny tasks (issue 4's target: >= 4,000 tasks/s, what Dask's documentation
//! states for its scheduler): one transaction of 10,000 independent `noop` calls through one
//! proxy to 2 local servers, against a baseline measured side by side: the same 10,000 calls
//! sent straight to the 2 servers by one async client with the same number in flight (no
//! metaserver, no proxy). Prints one JSON object with tasks/s of both, their ratio, and where
//! the transaction's time went.
//!
//! Run with `cargo bench -p ninf-grid --bench tiny_tasks`; figures go to docs/performance.md.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Instant;

use ninf::grid::{GridClient, TxArg};
use ninf_compute_server::config::ModuleConfig;
use ninf_grid::embedded::{EmbeddedGrid, GridOptions};
use ninf_proto::v1;

const TASKS: usize = 10_000;
/// Calls in flight per server, for the proxy and for the baseline alike.
const IN_FLIGHT: usize = 16;

fn binaries() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|d| d.parent()).unwrap().to_path_buf()
}

fn main() {
    let status = std::process::Command::new(env!("CARGO"))
        .args(["build", "-q", "--release", "-p", "ninf-routines", "--bins"])
        .status()
        .unwrap();
    assert!(status.success());
    let dir = std::env::temp_dir().join(format!("ninf-bench-{}", std::process::id()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut options = GridOptions::new(vec![1, 1], &dir);
    options.modules = vec![ModuleConfig {
        executable: binaries().join("ninf-exec-selftest"),
        idl: ninf_routines::idl::path("selftest"),
    }];
    options.mflops = Some(1000.0);
    let grid = runtime.block_on(EmbeddedGrid::start(options)).unwrap();
    let servers = grid.endpoints.servers.clone();

    // Baseline: the same calls straight to the servers, IN_FLIGHT outstanding on each.
    let baseline_seconds = runtime.block_on(async {
        let start = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for (s, server) in servers.iter().enumerate() {
            for w in 0..IN_FLIGHT {
                let channel = ninf_proto::net::connect(
                    server,
                    None,
                    ninf_proto::net::ConnectionSettings::default(),
                )
                .await
                .unwrap();
                let count = (0..TASKS)
                    .filter(|i| i % servers.len() == s && (i / servers.len()) % IN_FLIGHT == w)
                    .count();
                workers.spawn(async move {
                    let mut client = v1::invoke_client::InvokeClient::new(channel);
                    for _ in 0..count {
                        let request = v1::CallRequest {
                            function: "noop".into(),
                            arguments: vec![v1::CallArgument {
                                source: Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                                    value: Some(v1::argument_value::Value::IntValue(1)),
                                })),
                            }],
                            ..Default::default()
                        };
                        client.call(request).await.unwrap();
                    }
                });
            }
        }
        while workers.join_next().await.is_some() {}
        start.elapsed().as_secs_f64()
    });

    let proxy = grid.endpoints.proxy.clone();
    let (record_seconds, end_seconds, plan) = std::thread::spawn(move || {
        let client = GridClient::connect(&proxy)
            .unwrap()
            .with_scheduler("round-robin");
        client.describe("noop").unwrap();
        let start = Instant::now();
        let mut tx = client.transaction_begin();
        for _ in 0..TASKS {
            tx.call("noop", &[TxArg::from(1)]).unwrap();
        }
        let recorded = start.elapsed().as_secs_f64();
        let plan = tx.end().unwrap();
        (recorded, start.elapsed().as_secs_f64() - recorded, plan)
    })
    .join()
    .unwrap();
    let total = record_seconds + end_seconds;
    let tasks_per_second = TASKS as f64 / total;
    let baseline_per_second = TASKS as f64 / baseline_seconds;
    let per_server = plan.servers();
    println!(
        "{}",
        serde_json::json!({
            "bench": "tiny_tasks",
            "tasks": TASKS,
            "servers": servers.len(),
            "tasks_per_second": tasks_per_second,
            "baseline_direct_tasks_per_second": baseline_per_second,
            "ratio_to_direct": tasks_per_second / baseline_per_second,
            "seconds": {
                "total": total,
                "client_record": record_seconds,
                "metaserver_schedule": plan.schedule_seconds,
                "proxy_dispatch_and_calls": plan.actual_makespan,
                "other": end_seconds - plan.schedule_seconds - plan.actual_makespan,
            },
            "per_server": per_server,
        })
    );
    runtime.block_on(grid.stop());
    let _ = std::fs::remove_dir_all(&dir);
}
