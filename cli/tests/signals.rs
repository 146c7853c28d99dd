//! The commands that start processes (`ninf chaos`, `ninf load`, `ninf up`) end every one of
//! them when they are interrupted: the test starts each, waits until its grid runs, sends
//! SIGINT or SIGTERM to `ninf` alone (not to its process group, as a terminal's Ctrl-C
//! would, so the children hear of it only from `ninf`), and then finds none of the
//! processes that were under it still alive.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::ninf;

/// The parent of `pid`, from `/proc/PID/stat` (the field after the command's parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].chars().next())
            .is_some_and(|state| state != 'Z'),
        Err(_) => false,
    }
}

/// Every live process under `root`: its children, theirs, and so on.
fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(all.iter().filter(|(_, p)| *p == parent).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found.into_iter().filter(|&pid| alive(pid)).collect()
}

fn kill(pid: u32, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// Starts `ninf ARGS`, waits until at least `children` processes run under it, sends it
/// `signal`, and returns its exit code and the processes that were under it and are still
/// alive 15 s after it exited (all killed before returning).
fn interrupt(args: &[&str], children: usize, signal: i32) -> (Option<i32>, Vec<u32>) {
    let (code, left, _) = interrupt_pid(args, children, signal);
    (code, left)
}

/// [`interrupt`], with the interrupted process's id.
fn interrupt_pid(args: &[&str], children: usize, signal: i32) -> (Option<i32>, Vec<u32>, u32) {
    common::programs::build();
    let mut child: Child = Command::new(ninf())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while descendants(pid).len() < children {
        assert!(
            Instant::now() < deadline,
            "`ninf {}` never had {children} processes under it",
            args.join(" ")
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "`ninf {}` ended",
            args.join(" ")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Let the grid settle into its run (clients connected, calls under way).
    std::thread::sleep(Duration::from_secs(2));
    let under = descendants(pid);
    kill(pid, signal);
    let status = wait_at_most(&mut child, Duration::from_secs(30));
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut left: Vec<u32> = under.clone();
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&p| alive(p));
        std::thread::sleep(Duration::from_millis(100));
    }
    for &p in &left {
        kill(p, libc::SIGKILL);
    }
    (status, left, pid)
}

fn wait_at_most(child: &mut Child, limit: Duration) -> Option<i32> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("`ninf` did not exit within {limit:?} of the signal");
}

#[test]
fn an_interrupted_chaos_run_leaves_no_process_behind() {
    // A metaserver, a proxy and three compute servers.
    let (code, left, pid) = interrupt_pid(
        &["chaos", "--transactions", "100000", "--cpu-slowdown", "1"],
        5,
        libc::SIGINT,
    );
    assert_eq!(code, Some(130));
    assert!(left.is_empty(), "still alive after ninf chaos: {left:?}");
    // Servers the run restarts after killing them are not under it when the signal comes;
    // none may be left either (their configurations lie in the run's own directory).
    let marker = format!("ninf-chaos-{pid}/");
    let strays: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| alive(p))
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        })
        .collect();
    for &p in &strays {
        kill(p, libc::SIGKILL);
    }
    assert!(strays.is_empty(), "left running by ninf chaos: {strays:?}");
}

#[test]
fn a_terminated_load_run_leaves_no_process_behind() {
    // A metaserver, a proxy and two compute servers.
    let (code, left) = interrupt(
        &[
            "load",
            "--clients",
            "2",
            "--transactions",
            "100000",
            "--servers",
            "2",
        ],
        4,
        libc::SIGTERM,
    );
    assert_eq!(code, Some(130));
    assert!(left.is_empty(), "still alive after ninf load: {left:?}");
}

#[test]
fn an_interrupted_grid_of_ninf_up_leaves_no_process_behind() {
    // The embedded grid's node agents and warm executables run as processes under `ninf`.
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_str().unwrap();
    let (code, left) = interrupt(
        &["up", "--servers", "2", "--data-dir", dir],
        2,
        libc::SIGINT,
    );
    assert_eq!(code, Some(0), "ninf up stops gracefully on SIGINT");
    assert!(left.is_empty(), "still alive after ninf up: {left:?}");
}

#[test]
fn an_interrupted_experiment_leaves_no_process_and_no_namespace_behind() {
    if !ninf_lab::testbed::is_root() {
        eprintln!("not root: the testbed cannot be built here");
        return;
    }
    let prefix = format!("ns{}", std::process::id() % 100_000);
    let out = tempfile::tempdir().unwrap();
    // A metaserver, a proxy and a server in each of the two sites, in their namespaces.
    let (code, left) = interrupt(
        &[
            "experiment",
            "wan",
            "--profile",
            "lan",
            "--workload",
            "pairs",
            "--sizes",
            "60",
            "--trials",
            "100000",
            "--prefix",
            &prefix,
            "--out",
            out.path().to_str().unwrap(),
        ],
        4,
        libc::SIGINT,
    );
    assert_eq!(code, Some(130));
    assert!(
        left.is_empty(),
        "still alive after ninf experiment: {left:?}"
    );
    assert_eq!(
        ninf_lab::testbed::namespaces_of(&prefix),
        Vec::<String>::new()
    );
}
