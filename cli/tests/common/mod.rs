//! What the `ninf` command's tests share: the binary, and a grid `ninf up` runs as its own
//! process.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../testing/programs.rs"]
pub mod programs;

pub fn ninf() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ninf"))
}

/// `ninf up` in the background, stopped with SIGINT (it ends cleanly, exporting what it
/// has) by [`Up::stop`] or when dropped.
pub struct Up(pub Child);

impl Up {
    pub fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `ninf up --servers 2 ARGS --data-dir DATA_DIR`, once its grid file is written.
pub fn up(data_dir: &Path, args: &[&str]) -> Up {
    // The servers run the standard routines' executables, found next to `ninf`.
    programs::build();
    let child = Command::new(ninf())
        .args(["up", "--servers", "2"])
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let grid = Up(child);
    let file = data_dir.join("grid.toml");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !file.exists() {
        assert!(Instant::now() < deadline, "ninf up wrote no grid file");
        std::thread::sleep(Duration::from_millis(100));
    }
    grid
}
