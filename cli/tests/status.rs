//! `ninf status` against a grid `ninf up` started as its own process: the JSON lists every
//! server and the dashboard's address, `--watch` redraws until it is interrupted, and a bad
//! interval is refused by name.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{ninf, up};

#[test]
fn status_lists_the_grid_and_watch_redraws_until_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let _grid = up(dir.path(), &[]);

    let output = Command::new(ninf())
        .args(["status", "--json", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["servers"].as_array().unwrap().len(), 2, "{status}");
    assert_eq!(status["servers"][0]["queued_jobs"], 0);
    let dashboard = status["dashboard"].as_str().unwrap();
    assert!(dashboard.starts_with("http://127.0.0.1:"), "{dashboard}");
    assert_eq!(status["data"], serde_json::json!([]));

    // A handle kept on the grid is listed with its server and owner.
    let file = ninf::grid::GridFile::read(&dir.path().join("grid.toml")).unwrap();
    let runtime = ninf::runtime::runtime().unwrap();
    let client = ninf::grid::GridClient::from_async(runtime.block_on(file.connect()).unwrap());
    let kept = client
        .put(&vec![1.5f64; 1000], &[], ninf::grid::DataMode::Persistent)
        .unwrap();
    let output = Command::new(ninf())
        .args(["status", "--json", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let data = &status["data"][0];
    assert_eq!(data["id"], kept.id(), "{status}");
    assert_eq!(data["bytes"], 8000);
    assert_eq!(data["mode"], "persistent");
    assert_eq!(data["servers"].as_array().unwrap().len(), 1);
    let text = Command::new(ninf())
        .args(["status", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("data on the grid"), "{text}");
    assert!(
        text.contains(" 1 handles ") && text.contains(" 8000 B"),
        "{text}"
    );
    client.free(&kept).unwrap();

    let watching = Command::new(ninf())
        .args(["status", "--watch", "--interval", "0.2", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(watching.id() as i32, libc::SIGINT) };
    let output = watching.wait_with_output().unwrap();
    assert!(output.status.success(), "Ctrl-C ends the watch cleanly");
    let text = String::from_utf8(output.stdout).unwrap();
    let redraws = text.matches("\x1b[2J").count();
    assert!(redraws >= 2, "redrawn {redraws} times: {text}");
    let last = text.rsplit("\x1b[2J").next().unwrap();
    for server in status["servers"].as_array().unwrap() {
        assert!(last.contains(server["address"].as_str().unwrap()), "{last}");
    }
    assert!(last.contains("queued"), "{last}");

    let refused = Command::new(ninf())
        .args(["status", "--watch", "--interval", "0", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let error = String::from_utf8_lossy(&refused.stderr);
    assert!(
        error.contains("--interval must be a positive number"),
        "{error}"
    );
}
