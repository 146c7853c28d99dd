//! Gang scheduling with real processes: jobs alternate slots (their processes are stopped
//! and continued in turns, by node agents on emulated clocks of their own), a job waiting for
//! its input gives its slot away, a deadlocked parallel job is detected and killed, killing a
//! job frees its columns, each process runs on its column's core, parallel routines compute right, and the server keeps serving
//! throughout. Observations are of process states and counters, never of elapsed time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use crate::common::TestServer;
use ninf::{Arg, NinfClient};
use ninf_proto::v1;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn status(server: &TestServer) -> v1::GangStatus {
    let mut client =
        v1::gang_control_client::GangControlClient::connect(format!("http://{}", server.address))
            .await
            .unwrap();
    client
        .status(v1::GangStatusRequest {})
        .await
        .unwrap()
        .into_inner()
}

/// Waits (polling the status, up to 20 s) until `ready` holds.
async fn wait_for(
    server: &TestServer,
    what: &str,
    ready: impl Fn(&v1::GangStatus) -> bool,
) -> v1::GangStatus {
    for _ in 0..2000 {
        let s = status(server).await;
        if ready(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// The state letter of a process in /proc (`R`, `S`, `T` for stopped...).
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// Samples process states (up to 400 times, 7 ms apart) and counts the samples in which all of
/// `a` run while all of `b` are stopped, and the other way round; stops once both exceed 3.
async fn turns(a: &[u32], b: &[u32]) -> (usize, usize) {
    let stopped = |pids: &[u32]| pids.iter().all(|&p| process_state(p) == Some('T'));
    let running = |pids: &[u32]| pids.iter().all(|&p| process_state(p) == Some('R'));
    let (mut a_only, mut b_only) = (0, 0);
    for _ in 0..400 {
        if running(a) && stopped(b) {
            a_only += 1;
        }
        if running(b) && stopped(a) {
            b_only += 1;
        }
        if a_only > 3 && b_only > 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(7)).await;
    }
    (a_only, b_only)
}

fn jobs_of<'a>(s: &'a v1::GangStatus, function: &str) -> Vec<&'a v1::GangJob> {
    s.jobs.iter().filter(|j| j.function == function).collect()
}

/// CPU-bound work of a few seconds for a debug-built executable.
const LONG_WORK: i64 = 400_000_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_jobs_alternate_slots_on_agents_with_their_own_clocks() {
    let server = TestServer::start(|c| {
        c.gang.quantum_ms = 50.0;
        c.gang.nodes = 2;
        // Node k's clock is 300 (k + 1) ms ahead of the server's.
        c.gang.agent_clock_offset_ms = 300.0;
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let spin = |client: NinfClient| async move {
        client
            .call("pspin", &mut [Arg::Integer(2), Arg::Integer(LONG_WORK)])
            .await
    };
    let first = tokio::spawn(spin(client.clone()));
    let second = tokio::spawn(spin(client.clone()));
    let s = wait_for(&server, "two pspin jobs with their processes", |s| {
        let jobs = jobs_of(s, "pspin");
        jobs.len() == 2 && jobs.iter().all(|j| j.processes.len() == 2)
    })
    .await;
    assert_eq!(s.rows, 2, "{:?}", s.layout);
    let jobs = jobs_of(&s, "pspin");
    let (a, b) = (jobs[0].processes.clone(), jobs[1].processes.clone());

    // Sample process states: each job must be seen running while the other is stopped, and
    // a job's two processes are always in the same state (gang: they run and stop together,
    // up to the instants of a switch).
    let (a_only, b_only) = turns(&a, &b).await;
    assert!(
        a_only > 3 && b_only > 3,
        "jobs alternate: {a_only} samples with only the first running, {b_only} with only the second"
    );

    // The server keeps serving: a one-processor call gets a row of its own meanwhile.
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();

    let s = status(&server).await;
    assert_eq!(s.nodes.len(), 2);
    for (k, node) in s.nodes.iter().enumerate() {
        let expected = -0.3 * (k as f64 + 1.0);
        assert!(
            (node.clock_offset - expected).abs() < 0.01,
            "{}: offset {} s, expected {expected} s",
            node.node,
            node.clock_offset
        );
        assert!(node.attached, "{} is attached", node.node);
        assert!(node.clock_checks >= 1);
        assert!(node.switches > 0, "{} never switched", node.node);
        assert!(
            node.table_messages <= s.tables_issued,
            "tables are sent on changes only"
        );
    }
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let s = wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    assert!(
        s.skew_samples > 0,
        "switch skew across the two agents was measured"
    );
    assert_eq!(s.rows, 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_for_input_gives_its_slot_away_until_the_input_arrives() {
    let server = TestServer::start(|c| {
        c.gang.quantum_ms = 50.0;
        c.gang.max_rows = 2;
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();

    // A bulk call whose caller sends only half its array, then pauses.
    let n = 1 << 16;
    let x: Vec<f64> = (0..n).map(|i| i as f64 * 0.5).collect();
    let payload: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut stream = tokio::net::TcpStream::connect(&server.state.info.bulk_address)
        .await
        .unwrap();
    let body = common::echo_request(n as i64, 8 * n as u64).encode_to_vec();
    stream
        .write_all(&(body.len() as u32).to_le_bytes())
        .await
        .unwrap();
    stream.write_all(&body).await.unwrap();
    stream
        .write_all(&payload[..payload.len() / 2])
        .await
        .unwrap();
    let s = wait_for(&server, "the echo job idle", |s| {
        jobs_of(s, "echo")
            .first()
            .is_some_and(|j| j.state == "idle")
    })
    .await;
    let echo_pid = jobs_of(&s, "echo")[0].processes[0];

    // A parallel job needing both processors gets the second row; the idle job's row is
    // skipped, so the parallel job is never stopped, while the idle one stays stopped.
    let spin = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call(
                    "pspin",
                    &mut [Arg::Integer(2), Arg::Integer(LONG_WORK / 10)],
                )
                .await
        }
    });
    let s = wait_for(&server, "the pspin job started", |s| {
        jobs_of(s, "pspin")
            .first()
            .is_some_and(|j| j.processes.len() == 2)
    })
    .await;
    assert_eq!(s.rows, 2, "{:?}", s.layout);
    let spin_pids = jobs_of(&s, "pspin")[0].processes.clone();
    let mut samples = 0;
    for _ in 0..60 {
        if spin.is_finished() {
            break;
        }
        let states: Vec<Option<char>> = spin_pids.iter().map(|&p| process_state(p)).collect();
        assert!(
            !states.contains(&Some('T')),
            "the runnable job was stopped while the only other job was idle: {states:?}"
        );
        assert_eq!(
            process_state(echo_pid),
            Some('T'),
            "the idle job is stopped"
        );
        samples += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(samples > 0);
    spin.await.unwrap().unwrap();

    // The rest of the input arrives: the job becomes runnable and completes.
    stream
        .write_all(&payload[payload.len() / 2..])
        .await
        .unwrap();
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(header) as usize];
    stream.read_exact(&mut body).await.unwrap();
    let reply = v1::BulkReply::decode(body.as_slice()).unwrap();
    let Some(v1::bulk_reply::Result::Reply(reply)) = reply.result else {
        panic!("the echo failed: {reply:?}");
    };
    let bytes = match &reply.outputs[0].result {
        Some(v1::call_output::Result::Bulk(b)) => b.bytes as usize,
        other => panic!("unexpected output {other:?}"),
    };
    let mut echoed = vec![0u8; bytes];
    stream.read_exact(&mut echoed).await.unwrap();
    assert_eq!(echoed, payload);
    wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlocked_parallel_job_is_detected_and_killed_after_its_grace() {
    let server = TestServer::start(|c| c.gang.stop_grace_seconds = 0.2).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    a_pdeadlock_is_killed(&server, &client).await;
    // The server goes on: parallel and sequential calls work.
    client
        .call("pspin", &mut [Arg::Integer(2), Arg::Integer(1000)])
        .await
        .unwrap();
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    server.stop().await;
}

/// Runs `pdeadlock` on two ranks: the call fails saying why, and the job is counted killed.
async fn a_pdeadlock_is_killed(server: &TestServer, client: &NinfClient) {
    let error = client
        .call("pdeadlock", &mut [Arg::Integer(2)])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("deadlock") && error.contains("all 2 ranks of `pdeadlock`"),
        "{error}"
    );
    let s = wait_for(server, "an empty table", |s| s.jobs.is_empty()).await;
    assert_eq!(s.deadlocks_killed, 1);
}

/// Waits until both nodes' agents have said where their brokers are.
async fn wait_for_node_brokers(server: &TestServer) {
    wait_for(server, "two node brokers", |s| {
        s.nodes
            .iter()
            .filter(|n| !n.broker_address.is_empty())
            .count()
            == 2
    })
    .await;
}

/// Calls `pexchange` on two ranks; returns how many messages the ranks checked.
async fn exchange(
    client: &NinfClient,
    rounds: i64,
    bytes: i64,
    work: i64,
) -> Result<i32, ninf::CallError> {
    let mut checked = vec![0i32; 1];
    client
        .call(
            "pexchange",
            &mut [
                Arg::Integer(2),
                Arg::Integer(rounds),
                Arg::Integer(bytes),
                Arg::Integer(work),
                Arg::from(&mut checked),
            ],
        )
        .await?;
    Ok(checked[0])
}

/// A server whose two processors are two nodes, each with its agent's broker: rank-to-rank
/// messages go between the brokers over TCP, and each node hands a job its messages only in
/// its own slots (by the node's clock, 300 and 600 ms ahead of the server's).
async fn server_with_node_brokers(preempt: bool) -> TestServer {
    TestServer::start(move |c| node_brokers(c, preempt)).await
}

fn node_brokers(c: &mut ninf_compute_server::ServerConfig, preempt: bool) {
    c.gang.quantum_ms = 20.0;
    c.gang.nodes = 2;
    c.gang.agent_clock_offset_ms = 300.0;
    c.gang.broker = ninf_compute_server::config::BrokerPlacement::Nodes;
    c.gang.network_preemption = preempt;
    c.gang.stop_grace_seconds = 0.2;
}

/// The same, with each rank started by the agent of its node (`ranks = "nodes"`).
async fn server_with_ranks_on_nodes() -> TestServer {
    TestServer::start(|c| {
        node_brokers(c, true);
        c.gang.ranks = ninf_compute_server::config::RankPlacement::Nodes;
    })
    .await
}

/// The parent of a process, from /proc.
fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

/// Gone or a zombie waiting to be reaped.
fn process_ended(pid: u32) -> bool {
    matches!(process_state(pid), None | Some('Z') | Some('X'))
}

async fn wait_until_ended(pids: &[u32]) {
    for _ in 0..2000 {
        if pids.iter().all(|&p| process_ended(p)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("processes {pids:?} still run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_on_two_nodes_exchange_through_node_brokers_only_in_their_slots() {
    let server = server_with_node_brokers(true).await;
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let rounds = 300;
    let exchange =
        |client: NinfClient| async move { exchange(&client, rounds, 4096, 10_000).await };
    // Two jobs time-share both nodes, so each node's broker holds one job's messages while
    // the other's slot is in progress.
    let first = tokio::spawn(exchange(client.clone()));
    let second = tokio::spawn(exchange(client.clone()));
    assert_eq!(first.await.unwrap().unwrap(), 2 * rounds as i32);
    assert_eq!(second.await.unwrap().unwrap(), 2 * rounds as i32);
    let s = wait_for(&server, "both nodes' reports of every message", |s| {
        s.nodes
            .iter()
            .filter_map(|n| n.network)
            .map(|l| l.messages)
            .sum::<u64>()
            >= 2 * (2 * rounds as u64 + 1)
    })
    .await;
    for node in &s.nodes {
        let ledger = node.network.unwrap();
        assert!(ledger.preempts, "{}", node.node);
        assert_eq!(
            ledger.bytes_outside_slot, 0,
            "{}: {ledger:?}: bytes handed to a job outside its slots",
            node.node
        );
    }
    assert_eq!(
        server.state.broker.delivered(),
        0,
        "nothing went through the server"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_across_two_nodes_is_seen_from_the_brokers_reports() {
    let server = server_with_node_brokers(true).await;
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    a_pdeadlock_is_killed(&server, &client).await;
    // A job that merely waits a while for a busy rank is not taken for deadlocked.
    assert_eq!(exchange(&client, 50, 64, 0).await.unwrap(), 100);
    assert_eq!(status(&server).await.deadlocks_killed, 1);
    server.stop().await;
}

/// The pid of the `ninf-gang-agent` process serving `node` for the server at `address`.
fn agent_pid(address: &str, node: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let has = |flag: &str, value: &str| {
            args.windows(2)
                .any(|w| w[0] == flag.as_bytes() && w[1] == value.as_bytes())
        };
        let agent = args
            .first()
            .is_some_and(|a| a.ends_with(b"ninf-gang-agent"));
        (agent && has("--server", address) && has("--node", node)).then_some(pid)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_whose_node_broker_dies_fails_saying_so_and_the_server_goes_on() {
    let server = server_with_node_brokers(true).await;
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let running = tokio::spawn({
        let client = client.clone();
        async move { exchange(&client, 1_000_000, 64, 1000).await }
    });
    wait_for(&server, "the exchange running", |s| {
        jobs_of(s, "pexchange")
            .first()
            .is_some_and(|j| j.processes.len() == 2)
    })
    .await;
    let pid = agent_pid(&server.address, "node-1").expect("node-1's agent process");
    assert!(ninf_compute_server::gang::signal(pid, libc_sigkill()));
    let error = running.await.unwrap().unwrap_err().to_string();
    // The agent's broker dies with it: whichever the server notices first names node-1.
    assert!(
        error.contains("node `node-1`'s agent went away")
            || error.contains("messages from node `node-0` to node `node-1` were lost"),
        "{error}"
    );
    wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    // Sequential calls go on; a parallel one is refused while node-1 has no agent.
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    let refused = client
        .call("pspin", &mut [Arg::Integer(2), Arg::Integer(1000)])
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("no node agent holds processor 1"),
        "{refused}"
    );
    server.stop().await;
}

/// Waits until a `pexchange` job has both its ranks; returns their process ids.
async fn exchange_ranks(server: &TestServer) -> Vec<u32> {
    let s = wait_for(server, "the exchange's two ranks", |s| {
        jobs_of(s, "pexchange")
            .first()
            .is_some_and(|j| j.processes.len() == 2)
    })
    .await;
    jobs_of(&s, "pexchange")[0].processes.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_on_nodes_are_started_by_their_nodes_agents_and_exchange_checked_messages() {
    let server = server_with_ranks_on_nodes().await;
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let rounds = 20_000;
    let running = tokio::spawn({
        let client = client.clone();
        async move { exchange(&client, rounds, 64, 10_000).await }
    });
    let ranks = exchange_ranks(&server).await;
    // Rank k runs on column k, which is node-k's: its agent started it, not the server.
    for (rank, &pid) in ranks.iter().enumerate() {
        let agent = agent_pid(&server.address, &format!("node-{rank}")).unwrap();
        assert_eq!(parent_pid(pid), Some(agent), "rank {rank}");
    }
    assert_eq!(running.await.unwrap().unwrap(), 2 * rounds as i32);
    // A second job on the same nodes: the agents' warm pools serve it.
    assert_eq!(exchange(&client, 10, 4096, 0).await.unwrap(), 20);
    let s = wait_for(&server, "both agents' rank counts", |s| {
        s.nodes.iter().all(|n| n.ranks_run == 2)
    })
    .await;
    for node in &s.nodes {
        assert_eq!(node.network.unwrap().bytes_outside_slot, 0, "{}", node.node);
    }
    assert_eq!(server.state.broker.delivered(), 0);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_of_ranks_on_nodes_is_killed_by_their_agents() {
    let server = server_with_ranks_on_nodes().await;
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let deadlocked = tokio::spawn({
        let client = client.clone();
        async move { client.call("pdeadlock", &mut [Arg::Integer(2)]).await }
    });
    let s = wait_for(&server, "the deadlocked job's two ranks", |s| {
        jobs_of(s, "pdeadlock")
            .first()
            .is_some_and(|j| j.processes.len() == 2)
    })
    .await;
    let ranks = jobs_of(&s, "pdeadlock")[0].processes.clone();
    let error = deadlocked.await.unwrap().unwrap_err().to_string();
    assert!(error.contains("all 2 ranks of `pdeadlock`"), "{error}");
    // The server signals no process of another host: the agents killed them.
    wait_until_ended(&ranks).await;
    assert_eq!(status(&server).await.deadlocks_killed, 1);
    assert_eq!(exchange(&client, 50, 64, 0).await.unwrap(), 100);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranks_on_nodes_die_with_a_lost_agent_and_the_job_says_which() {
    let server = server_with_ranks_on_nodes().await;
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let running = tokio::spawn({
        let client = client.clone();
        async move { exchange(&client, 1_000_000, 64, 1000).await }
    });
    let ranks = exchange_ranks(&server).await;
    let agent = agent_pid(&server.address, "node-1").unwrap();
    assert!(ninf_compute_server::gang::signal(agent, libc_sigkill()));
    let error = running.await.unwrap().unwrap_err().to_string();
    // Which report reaches the server first is a race: the agent's loss, or node-0's broker
    // losing its connection to node-1's. Either names node-1.
    assert!(
        error.contains("node `node-1`'s agent went away")
            || error.contains("messages from node `node-0` to node `node-1` were lost"),
        "{error}"
    );
    // Rank 1 died with its agent (even if it was stopped), rank 0 was killed by node-0's.
    wait_until_ended(&ranks).await;
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    server.stop().await;
}

/// A server whose two nodes' agents the test starts itself, as on other hosts.
async fn server_for_agents_started_elsewhere() -> TestServer {
    TestServer::start(|c| {
        node_brokers(c, true);
        c.gang.ranks = ninf_compute_server::config::RankPlacement::Nodes;
        c.gang.spawn_agents = false;
    })
    .await
}

/// A `ninf-gang-agent` for one column, with a node broker on loopback.
fn start_agent(
    server: &TestServer,
    node: &str,
    column: &str,
    extra: &[&str],
) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_ninf-gang-agent"))
        .args([
            "--server",
            &server.address,
            "--node",
            node,
            "--columns",
            column,
        ])
        .args(["--broker-listen", "127.0.0.1:0", "--no-pin"])
        .args(extra)
        .spawn()
        .unwrap()
}

fn stop_agents(agents: impl IntoIterator<Item = std::process::Child>) {
    for mut agent in agents {
        agent.kill().unwrap();
        agent.wait().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_started_elsewhere_runs_ranks_from_its_own_executables_directory() {
    let server = server_for_agents_started_elsewhere().await;
    let binaries = common::binaries().display().to_string();
    let missing = std::env::temp_dir().join("ninf-no-executables-here");
    let missing_arg = missing.display().to_string();
    let mut agents = [
        start_agent(&server, "node-0", "0", &["--executables", &binaries]),
        start_agent(&server, "node-1", "1", &["--executables", &missing_arg]),
    ];
    wait_for_node_brokers(&server).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let error = exchange(&client, 10, 64, 0).await.unwrap_err().to_string();
    let expected = format!(
        "rank 1 of 2: on node `node-1`: cannot start the executable of module `selftest` ({})",
        missing.join("ninf-exec-selftest").display()
    );
    assert!(error.contains(&expected), "{error}");
    wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    // The server and node-0 go on: with node-1's agent pointed at the executables, the same
    // call runs.
    let [first, second] = agents;
    stop_agents([second]);
    wait_for(&server, "node-1 detached", |s| {
        s.nodes.iter().any(|n| n.node == "node-1" && !n.attached)
    })
    .await;
    agents = [
        first,
        start_agent(&server, "node-1", "1", &["--executables", &binaries]),
    ];
    wait_for(&server, "node-1 back", |s| {
        s.nodes.iter().filter(|n| n.attached).count() == 2
    })
    .await;
    assert_eq!(exchange(&client, 10, 64, 0).await.unwrap(), 20);
    stop_agents(agents);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_cannot_reach_another_nodes_broker_fail_the_job_saying_where() {
    let server = server_for_agents_started_elsewhere().await;
    // Node-1 advertises an address where nothing listens, as behind a wrong NAT mapping:
    // node-0's broker cannot deliver rank 0's messages to rank 1.
    let agents = [
        start_agent(&server, "node-0", "0", &[]),
        start_agent(
            &server,
            "node-1",
            "1",
            &["--broker-advertise", "127.0.0.1:1"],
        ),
    ];
    wait_for_node_brokers(&server).await;
    let s = status(&server).await;
    assert!(s.nodes.iter().any(|n| n.broker_address == "127.0.0.1:1"));
    let client = NinfClient::connect(&server.address).await.unwrap();
    let error = exchange(&client, 10, 64, 0).await.unwrap_err().to_string();
    assert!(
        error.contains(
            "messages from node `node-0` to node `node-1` were lost: cannot reach the broker at 127.0.0.1:1"
        ) && error.contains("the job cannot complete"),
        "{error}"
    );
    wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    stop_agents(agents);
    server.stop().await;
}

/// The time table laid out by the gang thesis's Distributed Queue Tree: a job of both processors
/// (the root's partition) and two of one each (the leaves') take turns, the two small ones
/// side by side, by the tree's rounds; every call completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_distributed_queue_tree_lays_out_the_live_table() {
    let server = TestServer::start(|c| {
        c.gang.quantum_ms = 50.0;
        c.gang.layout = ninf_compute_server::config::TableLayout::Dqt;
        c.gang.dqt_allocation = "apa".into();
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let wide = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call("pspin", &mut [Arg::Integer(2), Arg::Integer(LONG_WORK)])
                .await
        }
    });
    let narrow: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call("spin", &mut [Arg::Integer(LONG_WORK)]).await })
        })
        .collect();
    let s = wait_for(&server, "three jobs with their processes", |s| {
        s.jobs.len() == 3 && s.jobs.iter().all(|j| !j.processes.is_empty())
    })
    .await;
    assert_eq!(s.table_layout, "dqt-apa");
    assert_eq!(s.layout.len(), 3, "one line per job: {:?}", s.layout);
    let wide_pids = jobs_of(&s, "pspin")[0].processes.clone();
    let narrow_pids: Vec<u32> = jobs_of(&s, "spin")
        .iter()
        .flat_map(|j| j.processes.clone())
        .collect();
    let columns: Vec<Vec<u32>> = jobs_of(&s, "spin")
        .iter()
        .map(|j| j.columns.clone())
        .collect();
    assert_eq!(columns.len(), 2);
    assert_ne!(
        columns[0], columns[1],
        "the leaves' partitions: {columns:?}"
    );
    let (wide_only, narrow_only) = turns(&wide_pids, &narrow_pids).await;
    assert!(
        wide_only > 3 && narrow_only > 3,
        "the root's job and the leaves' pair take turns: {wide_only} and {narrow_only} samples"
    );
    wide.await.unwrap().unwrap();
    for call in narrow {
        call.await.unwrap().unwrap();
    }
    let s = wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    assert_eq!(s.finished, 3);
    server.stop().await;
}

/// A call of `spin(work)`, as the client sends it.
fn spin_request(work: i64) -> v1::CallRequest {
    v1::CallRequest {
        function: "spin".into(),
        arguments: vec![v1::CallArgument {
            source: Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                value: Some(v1::argument_value::Value::IntValue(work)),
            })),
        }],
        ..Default::default()
    }
}

/// The stopped time a reply reports, checked to lie within its compute time.
fn stopped_of(reply: &v1::CallReply) -> f64 {
    let timing = reply.timing.unwrap();
    assert!(
        (0.0..=timing.compute_seconds).contains(&timing.stopped_seconds),
        "{timing:?}"
    );
    timing.stopped_seconds
}

/// On one processor, a call alone runs in every slot and reports no stopped time; a call
/// that joins one already running alternates slots with it, and reports at least the
/// other job's slot it stood stopped through, so that the metaserver does not read that wait
/// as the routine's speed. The bounds are the table's quantum, not elapsed times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reports_the_time_its_job_stood_stopped_outside_its_slots() {
    let quantum = 0.1;
    let server = TestServer::start(|c| {
        c.processors = Some(1);
        c.gang.quantum_ms = quantum * 1000.0;
        c.gang.max_rows = 2;
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let alone = client
        .call_request(spin_request(LONG_WORK / 20))
        .await
        .unwrap();
    assert!(stopped_of(&alone) < quantum / 2.0, "{:?}", alone.timing);

    let first = tokio::spawn({
        let client = client.clone();
        async move { client.call_request(spin_request(LONG_WORK / 10)).await }
    });
    wait_for(&server, "the first spin job running", |s| {
        jobs_of(s, "spin")
            .first()
            .is_some_and(|j| !j.processes.is_empty())
    })
    .await;
    let second = client
        .call_request(spin_request(LONG_WORK / 10))
        .await
        .unwrap();
    let first = first.await.unwrap().unwrap();
    // The second joined with most of the first's work still to do: the first ran at least
    // one whole slot after the second had entered the table, and the second was stopped
    // through it.
    assert!(stopped_of(&second) >= quantum * 0.99, "{:?}", second.timing);
    stopped_of(&first);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_job_mid_slot_frees_its_columns() {
    let server = TestServer::start(|c| c.gang.quantum_ms = 50.0).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let victim = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call("pspin", &mut [Arg::Integer(2), Arg::Integer(LONG_WORK)])
                .await
        }
    });
    let other = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .call(
                    "pspin",
                    &mut [Arg::Integer(2), Arg::Integer(LONG_WORK / 20)],
                )
                .await
        }
    });
    let s = wait_for(&server, "two pspin jobs", |s| {
        let jobs = jobs_of(s, "pspin");
        jobs.len() == 2 && jobs.iter().all(|j| j.processes.len() == 2)
    })
    .await;
    assert_eq!(s.rows, 2);
    // The first job to arrive is the long one only if it was admitted first; find it by
    // killing the one the other call does not finish with.
    let doomed = jobs_of(&s, "pspin")[0].clone();
    for &pid in &doomed.processes {
        assert!(ninf_compute_server::gang::signal(pid, libc_sigkill()));
    }
    let results = [victim.await.unwrap(), other.await.unwrap()];
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("rank"), "{}", failures[0]);
    let s = wait_for(&server, "an empty table", |s| s.jobs.is_empty()).await;
    assert_eq!((s.rows, s.queued), (0, 0));
    assert!(s.layout.is_empty());
    // Both columns are free again: a two-processor job runs at once.
    client
        .call("pspin", &mut [Arg::Integer(2), Arg::Integer(1000)])
        .await
        .unwrap();
    server.stop().await;
}

fn libc_sigkill() -> i32 {
    9
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parallel_matrix_product_matches_the_sequential_one() {
    let server = TestServer::start(|_| {}).await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    let n = 67;
    let a: Vec<f64> = (0..n * n)
        .map(|i| ((i * 7919) % 1000) as f64 / 999.0)
        .collect();
    let b: Vec<f64> = (0..n * n)
        .map(|i| ((i * 104_729) % 997) as f64 / 996.0)
        .collect();
    let mut sequential = vec![0.0; n * n];
    client
        .call(
            "mmul",
            &mut [
                Arg::Integer(n as i64),
                Arg::from(&a),
                Arg::from(&b),
                Arg::from(&mut sequential),
            ],
        )
        .await
        .unwrap();
    let mut parallel = vec![0.0; n * n];
    client
        .call(
            "pmmul",
            &mut [
                Arg::Integer(2),
                Arg::Integer(n as i64),
                Arg::from(&a),
                Arg::from(&b),
                Arg::from(&mut parallel),
            ],
        )
        .await
        .unwrap();
    assert_eq!(parallel, sequential, "same blocks, same arithmetic");
    let delivered = server.state.broker.delivered();
    assert!(delivered >= 1, "rank 1's block went through the broker");

    // More ranks than processors is refused before anything runs.
    let error = client
        .call(
            "pmmul",
            &mut [
                Arg::Integer(3),
                Arg::Integer(n as i64),
                Arg::from(&a),
                Arg::from(&b),
                Arg::from(&mut parallel),
            ],
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`pmmul` would run on 3 processors; this server has 2"),
        "{error}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_process_is_pinned_to_the_core_its_column_is_given() {
    // The host's cores backwards: column 0 on the last one, so that the first core (where
    // every column went before `cores` existed) is not the answer by default.
    use ninf_compute_server::gang::cores::{allowed, of_process};
    let cores: Vec<u32> = allowed().into_iter().rev().collect();
    let server = TestServer::start({
        let cores = cores.clone();
        move |c| c.gang.cores = cores
    })
    .await;
    let client = NinfClient::connect(&server.address).await.unwrap();
    // Two jobs, so that the agents get a table (one job alone is never stopped, and its
    // table is not sent).
    let jobs: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .call("pspin", &mut [Arg::Integer(2), Arg::Integer(LONG_WORK)])
                    .await
            })
        })
        .collect();
    let s = wait_for(&server, "two pspin jobs with their processes", |s| {
        let jobs = jobs_of(s, "pspin");
        jobs.len() == 2 && jobs.iter().all(|j| j.processes.len() == 2)
    })
    .await;
    let running: Vec<v1::GangJob> = jobs_of(&s, "pspin").into_iter().cloned().collect();
    for job in &running {
        for (&column, &pid) in job.columns.iter().zip(&job.processes) {
            let expected = vec![cores[column as usize % cores.len()]];
            let mut seen = of_process(pid);
            for _ in 0..200 {
                if seen.as_ref() == Some(&expected) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                seen = of_process(pid);
            }
            assert_eq!(
                seen,
                Some(expected),
                "column {column} (process {pid}) of {cores:?}"
            );
        }
    }
    for pid in running.iter().flat_map(|j| &j.processes) {
        ninf_compute_server::gang::signal(*pid, libc_sigkill());
    }
    for job in jobs {
        assert!(job.await.unwrap().is_err(), "a killed job fails");
    }
    // The server goes on.
    client.call("noop", &mut [Arg::Integer(0)]).await.unwrap();
    server.stop().await;
}
