//! The `ninf-metaserver` binary as a user runs it: a TOML configuration with
//! `metrics_listen` and `dashboard_listen` (as docs/metaserver.md and docs/observability.md
//! write them), and the `--dashboard-listen` flag overriding it; it prints where the
//! dashboard is, and both endpoints answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};

/// The metaserver process, stopped when dropped.
struct Metaserver(Child);

impl Drop for Metaserver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary with `args`; returns it and its first `lines` stdout lines.
fn start(args: &[&str], count: usize) -> (Metaserver, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ninf-metaserver"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .take(count)
        .map(Result::unwrap)
        .collect();
    (Metaserver(child), lines)
}

/// GET `path` from `host:port`: (status line, body).
fn get(address: &str, path: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: ninf\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

fn dashboard_address(line: &str) -> String {
    line.strip_prefix("dashboard http://")
        .and_then(|rest| rest.strip_suffix('/'))
        .unwrap_or_else(|| panic!("not a dashboard line: {line}"))
        .to_string()
}

#[test]
fn the_configured_dashboard_and_metrics_answer_and_the_flag_overrides_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("metaserver.toml");
    let data = dir.path().join("data");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nmetrics_listen = \"127.0.0.1:0\"\n\
             dashboard_listen = \"127.0.0.1:0\"\n",
            data.display()
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    let (running, lines) = start(&["--config", config], 3);
    assert!(lines[0].starts_with("listening on 127.0.0.1:"), "{lines:?}");
    let metrics = lines[1]
        .strip_prefix("metrics http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("not a metrics line: {}", lines[1]));
    let (status, body) = get(metrics, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("# TYPE ninf_prediction_error_ratio histogram"),
        "{body}"
    );
    let dashboard = dashboard_address(&lines[2]);
    let (status, body) = get(&dashboard, "/api/overview");
    assert!(status.contains("200"), "{status}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(overview["scheduler"], "flow");
    assert_eq!(overview["servers"], serde_json::json!([]));
    drop(running);

    // The flag wins over the file: a port picked here, then handed to the binary.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let flag = format!("127.0.0.1:{port}");
    let (_running, lines) = start(&["--config", config, "--dashboard-listen", &flag], 3);
    assert_eq!(dashboard_address(&lines[2]), flag);
    let (status, body) = get(&flag, "/");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("/assets/app.js"), "{body}");
}
