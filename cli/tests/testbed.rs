#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The wide-area testbed's set-up and tear-down on this machine's kernel (root only; without
//! root each test says so and passes vacuously, as the testbed itself refuses to run).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;

use ninf_cli::testbed::{Profile, Testbed, is_root};

/// Runs `f` on a thread inside namespace `ns` (sockets it opens belong to that namespace).
fn in_namespace<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<T> {
    let path = format!("/var/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("namespace file");
        // SAFETY: setns(2) on a namespace file descriptor we hold open; it only changes this
        // thread's network namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}");
        f()
    })
}

/// Bytes counted by an htb class on a router interface.
fn class_bytes(bed: &Testbed, device: &str, class: &str) -> u64 {
    let output = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.router(),
            "tc",
            "-s",
            "class",
            "show",
            "dev",
            device,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.contains(&format!("class htb {class} ")) {
            let sent = lines.next().unwrap_or("");
            return sent
                .split_whitespace()
                .nth(1)
                .and_then(|b| b.parse().ok())
                .unwrap_or(0);
        }
    }
    0
}

/// The router-side interface of the site at 1-based index `k` (as the plan names it).
fn router_device(bed: &Testbed, k: usize) -> String {
    bed.plan_up()
        .iter()
        .map(|c| c.join(" "))
        .find_map(|c| {
            c.strip_prefix(&format!(
                "ip -n {} addr add 10.77.{k}.1/24 dev ",
                bed.router()
            ))
            .map(str::to_string)
        })
        .unwrap()
}

#[test]
fn sites_reach_each_other_through_their_shaped_classes_and_nothing_is_left() {
    if !is_root() {
        eprintln!("not root: the testbed cannot be built here");
        return;
    }
    let prefix = format!("nt{}", std::process::id() % 100_000);
    let bed = Testbed::new(&prefix, Profile::load("paper").unwrap())
        .up()
        .unwrap();
    assert_eq!(bed.existing().len(), 4);
    // 300 kB from the client's site to server A's.
    let a = bed.address("a");
    let listener = in_namespace(&bed.namespace("a"), move || {
        let listener = TcpListener::bind(format!("{a}:7999")).unwrap();
        let (mut stream, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        stream.read_to_end(&mut received).unwrap();
        received.len()
    });
    let a = bed.address("a");
    let sender = in_namespace(&bed.namespace("client"), move || {
        let mut stream = loop {
            match TcpStream::connect(format!("{a}:7999")) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
            }
        };
        stream.write_all(&vec![7u8; 300_000]).unwrap();
    });
    sender.join().unwrap();
    assert_eq!(listener.join().unwrap(), 300_000);
    // It went through the client-to-A class (source site 1 -> class 1:10 on A's interface),
    // not the unshaped default.
    let device = router_device(&bed, 2);
    assert!(
        class_bytes(&bed, &device, "1:10") >= 300_000,
        "client->A class"
    );
    assert!(
        class_bytes(&bed, &device, "1:11") == 0,
        "nothing from A to itself"
    );
    // A process left running in a site is killed by the tear-down.
    let mut sleeper = bed
        .command("b", std::path::Path::new("/bin/sleep"))
        .arg("600")
        .spawn()
        .unwrap();
    drop(bed);
    let status = sleeper.wait().unwrap();
    assert!(!status.success(), "the sleeper was killed");
    let after = Testbed::new(&prefix, Profile::load("paper").unwrap());
    assert!(after.existing().is_empty(), "{:?}", after.existing());
}

#[test]
fn set_up_is_idempotent_and_cleans_up_after_a_failure() {
    if !is_root() {
        eprintln!("not root: the testbed cannot be built here");
        return;
    }
    let prefix = format!("nu{}", std::process::id() % 100_000);
    // Leftovers of a crashed run: a namespace of the prefix.
    Command::new("ip")
        .args(["netns", "add", &format!("{prefix}-router")])
        .status()
        .unwrap();
    let bed = Testbed::new(&prefix, Profile::load("lan").unwrap())
        .up()
        .unwrap();
    assert_eq!(bed.existing().len(), 4);
    // A run that fails part-way (a panic while the testbed is up) still tears it down.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _bed = bed;
        panic!("the experiment failed");
    }));
    assert!(result.is_err());
    let after = Testbed::new(&prefix, Profile::load("lan").unwrap());
    assert!(after.existing().is_empty(), "{:?}", after.existing());
    // Tearing down nothing is fine.
    after.down().unwrap();
}
