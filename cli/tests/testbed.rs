#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The wide-area testbed's set-up and tear-down on this machine's kernel (root only; without
//! root each test says so and passes vacuously, as the testbed itself refuses to run).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ninf_lab::testbed::{Profile, Testbed, is_root};

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

fn ninf() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ninf"))
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
        .with_forwarder(ninf())
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
    // `ip netns exec` enters the namespace before it execs; until then the tear-down
    // cannot see the sleeper there.
    let pid = sleeper.id() as i32;
    while !bed.pids("b").contains(&pid) {
        assert!(sleeper.try_wait().unwrap().is_none(), "the sleeper exited");
        std::thread::sleep(Duration::from_millis(10));
    }
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

/// Connects from `from`'s site to a listener at `to`'s, `times` times; the time each
/// connect took (one round trip: SYN out, SYN-ACK back).
fn connect_times(bed: &Testbed, from: &str, to: &str, port: u16, times: usize) -> Vec<Duration> {
    let target = format!("{}:{port}", bed.address(to));
    let bind = target.clone();
    let listener = in_namespace(&bed.namespace(to), move || {
        let listener = TcpListener::bind(bind).unwrap();
        for _ in 0..times {
            let (mut stream, _) = listener.accept().unwrap();
            let mut byte = [0u8; 1];
            stream.read_exact(&mut byte).unwrap();
            stream.write_all(&byte).unwrap();
        }
    });
    let connecting = in_namespace(&bed.namespace(from), move || {
        let mut times_taken = Vec::new();
        while times_taken.len() < times {
            let start = Instant::now();
            let Ok(mut stream) = TcpStream::connect(&target) else {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            };
            times_taken.push(start.elapsed());
            stream.write_all(&[42]).unwrap();
            let mut echo = [0u8; 1];
            stream.read_exact(&mut echo).unwrap();
            assert_eq!(echo, [42]);
        }
        times_taken
    });
    let taken = connecting.join().unwrap();
    listener.join().unwrap();
    taken
}

#[test]
fn latency_delays_every_round_trip_by_the_profiles_amount_and_the_forwarder_goes_with_the_testbed()
{
    if !is_root() {
        eprintln!("not root: the testbed cannot be built here");
        return;
    }
    // A 400 ms round trip between the client and A (200 ms each way); none to B.
    let profile = Profile::parse(
        "name = \"slow\"\n\
         [[site]]\nname = \"client\"\nrole = \"client\"\n\
         [[site]]\nname = \"a\"\nrole = \"server\"\n\
         [[site]]\nname = \"b\"\nrole = \"server\"\n\
         [[link]]\nbetween = [\"client\", \"a\"]\nmbit = 100.0\nlatency_ms = 400.0\n\
         [[link]]\nbetween = [\"client\", \"b\"]\nmbit = 100.0\n",
    )
    .unwrap();
    let prefix = format!("nl{}", std::process::id() % 100_000);
    // Without the program that forwards, a profile with latency is refused, with the reason,
    // and nothing is left.
    let refused = Testbed::new(&prefix, profile.clone()).up().unwrap_err();
    assert!(
        refused.to_string().contains("sets latencies"),
        "{refused:#}"
    );
    assert!(Testbed::new(&prefix, profile.clone()).existing().is_empty());
    let not_a_forwarder = Testbed::new(&prefix, profile.clone())
        .with_forwarder(Path::new("/bin/true"))
        .up()
        .unwrap_err();
    assert!(
        not_a_forwarder.to_string().contains("delay forwarder"),
        "{not_a_forwarder:#}"
    );
    assert!(Testbed::new(&prefix, profile.clone()).existing().is_empty());

    let bed = Testbed::new(&prefix, profile)
        .with_forwarder(ninf())
        .up()
        .unwrap();
    // The packets cannot arrive before their time: every connect to A takes at least the
    // round trip.
    for taken in connect_times(&bed, "client", "a", 7997, 3) {
        assert!(taken >= Duration::from_millis(400), "{taken:?}");
    }
    // The same connection carries data intact both ways through the delay line.
    let a = bed.address("a");
    let receiving = in_namespace(&bed.namespace("a"), move || {
        let listener = TcpListener::bind(format!("{a}:7996")).unwrap();
        let (mut stream, _) = listener.accept().unwrap();
        let mut received = Vec::new();
        stream.read_to_end(&mut received).unwrap();
        received
    });
    let a = bed.address("a");
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let sent = payload.clone();
    in_namespace(&bed.namespace("client"), move || {
        let mut stream = loop {
            match TcpStream::connect(format!("{a}:7996")) {
                Ok(s) => break s,
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        stream.write_all(&sent).unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(receiving.join().unwrap(), payload);
    // The forwarder runs in the router namespace and goes with the testbed.
    let router = bed.router();
    let pids = || {
        let output = Command::new("ip")
            .args(["netns", "pids", &router])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).lines().count()
    };
    assert_eq!(pids(), 1, "one forwarder in the router");
    drop(bed);
    assert!(
        Testbed::new(&prefix, Profile::load("lan").unwrap())
            .existing()
            .is_empty()
    );
}

/// The gang benchmark with its nodes in namespaces of their own: two communicating jobs
/// time-share two nodes whose agents keep clocks 300 and 600 ms ahead, ranks' messages cross
/// the router between the nodes' brokers, every message arrives checked, and with network
/// preemption no byte reaches a job outside its slots; without it, the same run counts some.
#[test]
fn gang_jobs_across_namespaced_nodes_talk_through_the_router_only_in_their_slots() {
    if !is_root() {
        eprintln!("not root: the testbed cannot be built here");
        return;
    }
    let run = |preempt: bool| {
        let mut command = Command::new(ninf());
        command.args([
            "gang-bench",
            "--namespaces",
            "--workload",
            "exchange",
            "--quantum-ms",
            "20",
            "--job-seconds",
            "0.5",
            "--message-bytes",
            "32768",
            "--clock-offset-ms",
            "300",
            "--json",
        ]);
        if !preempt {
            command.arg("--no-network-preemption");
        }
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&output.stdout).unwrap()
    };
    let result = run(true);
    assert_eq!(result["namespaces"], true);
    assert_eq!(result["broker"], "nodes");
    let rounds = result["rounds"].as_u64().unwrap();
    // Each rank ran under its node's agent, inside the node's namespace: p ranks for each of
    // the two calibrating calls, and for each of 2 jobs in the batch and time-shared runs.
    assert_eq!(result["ranks"], "nodes");
    let p = result["processors"].as_u64().unwrap();
    assert_eq!(result["ranks_run_by_agents"].as_u64(), Some(6 * p));
    // Two jobs, once in a batch and once time-shared, two ranks each checking every round.
    assert_eq!(
        result["messages_checked"].as_u64().unwrap(),
        2 * 2 * 2 * rounds
    );
    let network = &result["network"];
    assert_eq!(network["preempts"], true);
    assert_eq!(network["bytes_outside_slot"], 0, "{network}");
    let bytes = network["bytes"].as_u64().unwrap();
    assert!(bytes >= 8 * rounds * 32768, "{network}");
    assert!(
        result["routed_bytes"].as_u64().unwrap() >= bytes,
        "the messages crossed the router: {result}"
    );
    assert!(result["switches"].as_u64().unwrap() > 0);
    // The same run without preemption still checks every message (the gate only counts).
    let unpreempted = run(false);
    assert_eq!(unpreempted["network"]["preempts"], false);
    assert_eq!(
        unpreempted["messages_checked"].as_u64().unwrap(),
        2 * 2 * 2 * unpreempted["rounds"].as_u64().unwrap()
    );
}
