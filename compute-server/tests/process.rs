//! The synchronous client API against a `ninf-server` process: `ninf_call` by URL, typed
//! stubs over a `Client`, and GridRPC-style asynchronous sessions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use crate::common::ServerProcess;
use ninf::{Arg, Client, ErrorKind, OwnedArg, ninf_call};
use ninf_proto::ArrayData;
use ninf_routines::linpack_client as linpack;

#[test]
fn ninf_call_by_url_and_typed_stubs_over_a_client() {
    let server = ServerProcess::start(&[]);
    let n = 40usize;
    let mut a: Vec<f64> = (0..n * n)
        .map(|k| {
            if k % (n + 1) == 0 {
                n as f64
            } else {
                ((k * 7919) % 13) as f64 / 13.0 - 0.5
            }
        })
        .collect();
    let a0 = a.clone();
    let x: Vec<f64> = (0..n).map(|i| i as f64 / 3.0 - 2.0).collect();
    let mut b: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| a0[i + j * n] * x[j]).sum())
        .collect();
    let mut ipvt = vec![0i32; n];
    let url = format!("ninf://{}/dgefa", server.address);
    let outcome = ninf_call(
        &url,
        &mut [Arg::from(&mut a), Arg::from(n as i32), Arg::from(&mut ipvt)],
    )
    .unwrap();
    assert_eq!(outcome.status, 0);

    let mut client = Client::connect(&format!("ninf://{}", server.address)).unwrap();
    linpack::dgesl(&mut client, &a, n as i32, &ipvt, &mut b).unwrap();
    let error = b
        .iter()
        .zip(&x)
        .map(|(got, want)| (got - want).abs())
        .fold(0.0, f64::max);
    assert!(error < 1e-12, "max error {error}");

    let e = ninf_call(&format!("ninf://{}/nope", server.address), &mut []).unwrap_err();
    assert_eq!(e.kind, ErrorKind::FunctionNotFound);
    let e = ninf_call("ninf://127.0.0.1:1/dgefa", &mut []).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ServerNotFound);
    assert!(
        e.message.starts_with("cannot connect to 127.0.0.1:1"),
        "{}",
        e.message
    );
    let e = ninf_call("http://example/dgefa", &mut []).unwrap_err();
    assert_eq!(
        e.message,
        "`http://example/dgefa` is not a ninf:// URL (ninf://host:port/function)"
    );
}

#[test]
fn asynchronous_sessions_wait_probe_and_cancel() {
    let server = ServerProcess::start(&[]);
    let client = Client::connect(&server.address).unwrap();

    // Two sleeps run at once on the server's two processors: the short one ends first.
    let slow = client
        .call_async("sleep_ms", vec![OwnedArg::Integer(3000)])
        .unwrap();
    let fast = client
        .call_async("sleep_ms", vec![OwnedArg::Integer(0)])
        .unwrap();
    let (first, result) = client.wait_any(&[slow, fast]).unwrap();
    assert_eq!(first, fast);
    result.unwrap();
    assert!(
        !client.probe(slow).unwrap(),
        "the slow call is still running"
    );
    client.wait(slow).unwrap();
    assert!(client.probe(slow).is_err(), "a waited-for session is gone");

    // Results of OUT arrays come back by name.
    let x = ArrayData::Double(vec![1.0, 2.0, 3.0]);
    let echo = client
        .call_async(
            "echo",
            vec![
                OwnedArg::Integer(3),
                OwnedArg::Array(x.clone()),
                OwnedArg::Out,
            ],
        )
        .unwrap();
    let noop = client
        .call_async("noop", vec![OwnedArg::Integer(1)])
        .unwrap();
    let results = client.wait_all(&[echo, noop]);
    let echoed = results[0].as_ref().unwrap();
    assert_eq!(echoed.outputs.get("y"), Some(&x));
    assert!(results[1].is_ok());

    // Cancel, and errors of the session API itself.
    let long = client
        .call_async("sleep_ms", vec![OwnedArg::Integer(5_000)])
        .unwrap();
    client.cancel(long).unwrap();
    let e = client.wait(long).unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (
            ErrorKind::Canceled,
            format!("session {} was canceled", long.0).as_str()
        )
    );
    let e = client.wait(long).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidSessionId);
    let bad = client
        .call_async("echo", vec![OwnedArg::Integer(3)])
        .unwrap();
    let e = client.wait(bad).unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (
            ErrorKind::BadArgument,
            "`echo` takes 3 arguments (n, x, y), got 1"
        )
    );

    // The server still serves after a canceled call.
    let mut y = [0.0; 2];
    client
        .call(
            "echo",
            &mut [
                Arg::Integer(2),
                Arg::from(&[5.0, 6.0][..]),
                Arg::from(&mut y[..]),
            ],
        )
        .unwrap();
    assert_eq!(y, [5.0, 6.0]);
}

#[test]
fn benchmark_only_prints_the_machine_as_json() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ninf-server"))
        .arg("--benchmark-only")
        .output()
        .unwrap();
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for key in ["mflops", "cpus", "memory_bytes", "benchmark_n"] {
        assert!(
            report[key].as_f64().is_some_and(|v| v > 0.0),
            "{key} in {report}"
        );
    }
    assert!(report["normalized_residual"].as_f64().unwrap() < 100.0);
}

#[test]
fn a_bad_configuration_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("ninf-bad-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("bad.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nprocesors = 2\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ninf-server"))
        .args(["--no-benchmark", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown field `procesors`"), "{stderr}");
    assert!(stderr.contains("bad.toml"), "{stderr}");
}

#[test]
fn a_processor_slowdown_below_one_is_refused_by_server_and_executable() {
    let dir = std::env::temp_dir().join(format!("ninf-bad-slowdown-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("slow.toml");
    std::fs::write(&config, "listen = \"127.0.0.1:0\"\ncpu_slowdown = 0.5\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ninf-server"))
        .args(["--no-benchmark", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("slow.toml: cpu_slowdown is 0.5; it must be a number of at least 1"),
        "{stderr}"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ninf-server"))
        .args([
            "--no-benchmark",
            "--cpu-slowdown=-2",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cpu_slowdown is -2"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // An executable given a bad slowdown says so and exits before serving.
    common::ensure_executables();
    let output = std::process::Command::new(common::binaries().join("ninf-exec-linpack"))
        .env("NINF_EXEC_CPU_SLOWDOWN", "fast")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("NINF_EXEC_CPU_SLOWDOWN is `fast`; it must be a number of at least 1"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Children of a process, from /proc: each thread lists the children it started, and the
/// server starts them from its runtime's worker threads as well as its main thread.
fn children(pid: u32) -> Vec<u32> {
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    threads
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[test]
fn sigterm_shuts_down_gracefully_and_stops_the_executables() {
    let server = ServerProcess::start(&[]);
    let client = Client::connect(&server.address).unwrap();
    client.call("noop", &mut [Arg::Integer(0)]).unwrap();
    let children = children(server.pid());
    let named = |name: &str| {
        children
            .iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|cmd| cmd.contains(name))
            })
            .count()
    };
    assert_eq!(
        named("ninf-exec-"),
        24,
        "a warm process for each of the 2 processors' 4 rows, for each of three modules"
    );
    assert_eq!(named("ninf-gang-agent"), 1, "one node agent");
    assert_eq!(children.len(), 25);
    let status = server.terminate();
    assert!(status.success(), "{status:?}");
    for pid in children {
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "));
        assert!(!alive, "child {pid} outlived its server");
    }
}

/// The `selftest` executables (their command name, cut to 15 bytes) that are children of
/// `parent` and sleeping in a call (nanosleep or clock_nanosleep on x86_64).
fn sleeping_executables_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Some(pid) = path
            .file_name()
            .and_then(|n| n.to_str()?.parse::<u32>().ok())
        else {
            continue;
        };
        let read = |file: &str| std::fs::read_to_string(path.join(file)).unwrap_or_default();
        let is_child = read("status")
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .is_some_and(|p| p.trim() == parent.to_string());
        let sleeping = matches!(
            read("syscall").split_whitespace().next(),
            Some("35" | "230")
        );
        if read("comm").trim() == "ninf-exec-selft" && is_child && sleeping {
            found.push(pid);
        }
    }
    found
}

/// A server killed outright (SIGKILL) cannot stop its executables: the one running a call
/// of a minute ends by itself within moments, instead of sleeping on as an orphan.
#[test]
fn a_killed_servers_executable_does_not_outlive_it() {
    let server = ServerProcess::start(&[]);
    let url = format!("ninf://{}/slow_echo", server.address);
    let caller = std::thread::spawn(move || {
        let (mut x, mut y) = (vec![1.0f64; 4], vec![0.0f64; 4]);
        ninf_call(
            &url,
            &mut [
                Arg::from(60_000i32),
                Arg::from(4i64),
                Arg::from(&mut x),
                Arg::from(&mut y),
            ],
        )
    });
    // A guard against a hang, not a speed check: on a busy machine the other tests' servers
    // start their executables at the same time.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let executable = loop {
        if let Some(&pid) = sleeping_executables_of(server.pid()).first() {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the call never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(server);
    let error = caller.join().unwrap().unwrap_err();
    assert_eq!(error.kind, ErrorKind::CommunicationFailed, "{error}");
    // The call had 60 s to go; its executable must be gone long before.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Gone, or a zombie waiting for whoever adopted it to reap it.
    let running = || {
        std::fs::read_to_string(format!("/proc/{executable}/status")).is_ok_and(|s| {
            !s.lines()
                .any(|l| l.starts_with("State:") && l.contains('Z'))
        })
    };
    while running() {
        assert!(
            std::time::Instant::now() < deadline,
            "executable {executable} outlived its server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
