//! Allocation queues against a real Slurm: a private one-node cluster (`munged`,
//! `slurmctld`, `slurmd` from Debian's packages) started by each test, and a grid with no
//! compute servers of its own whose servers all come from the queue's jobs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{TestGrid, binaries, local_mmul, matrix};
use ninf::grid::GridClient;
use ninf_grid::slurm::LocalSlurm;
use ninf_proto::v1;

/// A grid with no servers whose metaserver submits to `slurm`.
fn grid_on(slurm: &LocalSlurm) -> TestGrid {
    TestGrid::start(Vec::new(), |options| {
        options.server_program = Some(binaries().join("ninf-server"));
        options.slurm_conf = Some(slurm.conf.clone());
    })
}

/// `ninf alloc` against the grid in `dir`; its standard output, or a panic with its error.
fn ninf_alloc(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(binaries().join("ninf"))
        .arg("alloc")
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "ninf alloc {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn queue_spec(name: &str, batch_args: &[&str]) -> v1::AllocQueueSpec {
    v1::AllocQueueSpec {
        name: name.into(),
        manager: "slurm".into(),
        time_limit_minutes: 10,
        servers_per_job: 1,
        max_servers: 2,
        backlog: 1,
        idle_timeout_seconds: 0.0,
        batch_args: batch_args.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    }
}

/// Waits up to `limit` for `condition`, showing Slurm's logs if it never holds.
fn eventually(
    slurm: &LocalSlurm,
    what: &str,
    limit: Duration,
    mut condition: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what} did not happen within {limit:?}\n{}", slurm.logs());
}

/// `c = a·b; d = c·a` in one transaction, checked against the same products computed here.
fn mmul_chain(client: &GridClient, n: usize, seed: u64) {
    let (a, b) = (matrix(n, seed), matrix(n, seed + 1));
    let (mut c, mut d) = (vec![0.0; n * n], vec![0.0; n * n]);
    let order = n as i32;
    client
        .transaction(|tx| {
            let (a_, b_, c_, d_) = (
                tx.input(&a),
                tx.input(&b),
                tx.buffer(&mut c),
                tx.buffer(&mut d),
            );
            tx.call("mmul", &[order.into(), a_.into(), b_.into(), c_.into()])?;
            tx.call("mmul", &[order.into(), c_.into(), a_.into(), d_.into()])?;
            Ok(())
        })
        .unwrap();
    let expected_c = local_mmul(n, &a, &b);
    assert_eq!(d, local_mmul(n, &expected_c, &a), "seed {seed}");
}

#[test]
fn transactions_sent_before_any_server_exists_complete_on_servers_from_slurm() {
    let slurm = LocalSlurm::start().unwrap();
    let grid = grid_on(&slurm);
    let dir = grid._dir.path();
    let added = ninf_alloc(
        dir,
        &[
            "add",
            "slurm",
            "--name",
            "q1",
            "--time-limit",
            "10",
            "--max-servers",
            "2",
            "--",
            "--partition=debug",
        ],
    );
    assert!(added.contains("queue q1 added"), "{added}");
    // No work, no jobs: the queue submits only while something waits.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(slurm.jobs().unwrap(), Vec::<String>::new());
    let proxy = grid.grid().endpoints.proxy.clone();
    let clients: Vec<_> = (0..3)
        .map(|seed| {
            let proxy = proxy.clone();
            std::thread::spawn(move || {
                let client = GridClient::connect(&proxy).unwrap().with_scheduler("flow");
                mmul_chain(&client, 48, seed);
            })
        })
        .collect();
    for client in clients {
        client.join().unwrap();
    }
    // Every server came from the queue, and says so.
    let status = grid.status();
    assert!(!status.servers.is_empty());
    let now = ninf_metaserver::unix_now();
    for server in &status.servers {
        assert_eq!(server.allocation, "q1");
        assert!(server.batch_job.contains('_'), "job {}", server.batch_job);
        assert!(server.walltime_end > now && server.walltime_end < now + 600.0);
    }
    let jobs = slurm.jobs().unwrap();
    assert!(!jobs.is_empty(), "squeue lists the queue's jobs");
    // A job's state is what the last poll of the batch system listed: its server can
    // register and serve the chains before the next poll sees the job running.
    let list = || -> serde_json::Value {
        serde_json::from_str(&ninf_alloc(dir, &["list", "--json"])).unwrap()
    };
    eventually(
        &slurm,
        "a job listed running",
        Duration::from_secs(30),
        || {
            list()[0]["jobs"]
                .as_array()
                .is_some_and(|jobs| jobs.iter().any(|j| j["state"] == "running"))
        },
    );
    let listed = list();
    let queue = &listed[0];
    assert_eq!(queue["name"], "q1");
    assert_eq!(queue["state"], "active");
    let running: Vec<&serde_json::Value> = queue["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|j| j["state"] == "running")
        .collect();
    assert!(!running.is_empty(), "{listed}");
    for job in &running {
        assert!(jobs.contains(&job["job_id"].as_str().unwrap().to_string()));
        let script = std::fs::read_to_string(job["script"].as_str().unwrap()).unwrap();
        assert!(script.contains("#SBATCH --job-name=ninf-q1"), "{script}");
    }
    let removed = ninf_alloc(dir, &["remove", "q1"]);
    assert!(removed.starts_with("queue removed"), "{removed}");
    eventually(&slurm, "squeue emptied", Duration::from_secs(30), || {
        slurm.jobs().unwrap().is_empty()
    });
    assert!(ninf_alloc(dir, &["list"]).starts_with("no allocation queues"));
}

#[test]
fn a_bad_partition_is_refused_by_the_dry_run_with_sbatchs_own_message() {
    let slurm = LocalSlurm::start().unwrap();
    let grid = grid_on(&slurm);
    let metaserver = grid.grid().metaserver.clone();
    let refused = grid
        .runtime
        .block_on(metaserver.add_queue(queue_spec("bad", &["--partition=nope"])))
        .unwrap_err()
        .to_string();
    assert!(refused.starts_with("sbatch --test-only: "), "{refused}");
    assert!(
        refused.contains("invalid partition specified: nope"),
        "{refused}"
    );
    assert!(metaserver.list_queues().is_empty());
    let spec = v1::AllocQueueSpec {
        max_servers: 0,
        ..queue_spec("q", &[])
    };
    let refused = grid
        .runtime
        .block_on(metaserver.add_queue(spec))
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "allocation queue: --servers-per-job and --max-servers must be at least 1"
    );
    assert_eq!(
        slurm.jobs().unwrap(),
        Vec::<String>::new(),
        "nothing was submitted"
    );
}

#[test]
fn a_job_that_exits_at_start_up_pauses_the_queue_and_shows_its_output() {
    let slurm = LocalSlurm::start().unwrap();
    let grid = grid_on(&slurm);
    let metaserver = grid.grid().metaserver.clone();
    let spec = v1::AllocQueueSpec {
        grid_file: "/nonexistent/grid.toml".into(),
        ..queue_spec("broken", &[])
    };
    grid.runtime.block_on(metaserver.add_queue(spec)).unwrap();
    // A call waits for the queue's servers, and is refused once the queue gives up.
    let proxy = grid.grid().endpoints.proxy.clone();
    let waiting = std::thread::spawn(move || {
        let client = GridClient::connect(&proxy).unwrap();
        let mut c = vec![0.0; 4];
        client
            .call(
                "mmul",
                &mut [
                    2i32.into(),
                    (&vec![1.0; 4]).into(),
                    (&vec![1.0; 4]).into(),
                    (&mut c).into(),
                ],
            )
            .unwrap_err()
            .to_string()
    });
    eventually(&slurm, "the queue paused", Duration::from_secs(90), || {
        metaserver.list_queues()[0].state == "paused"
    });
    let queue = &metaserver.list_queues()[0];
    assert_eq!(queue.failures, 3);
    assert!(
        queue
            .last_error
            .contains("ended before its server registered"),
        "{}",
        queue.last_error
    );
    assert!(
        queue.last_error.contains("/nonexistent/grid.toml"),
        "the job's output says why: {}",
        queue.last_error
    );
    let failed = queue.jobs.iter().filter(|j| j.state == "failed").count();
    assert_eq!(failed, 3);
    let error = waiting.join().unwrap();
    assert!(
        error.contains("no server has registered a routine `mmul`"),
        "{error}"
    );
    assert_eq!(
        slurm.jobs().unwrap(),
        Vec::<String>::new(),
        "a paused queue submits nothing"
    );
}

#[test]
fn a_restarted_metaserver_still_knows_its_queue_and_its_jobs() {
    let slurm = LocalSlurm::start().unwrap();
    let mut grid = grid_on(&slurm);
    let metaserver = grid.grid().metaserver.clone();
    grid.runtime
        .block_on(metaserver.add_queue(queue_spec("kept", &[])))
        .unwrap();
    let client = grid.client("flow");
    mmul_chain(&client, 32, 7);
    let job_ids = |queues: &[v1::AllocQueue]| -> Vec<(String, String)> {
        queues[0]
            .jobs
            .iter()
            .map(|j| (j.job_id.clone(), j.state.clone()))
            .collect()
    };
    // The job's state is what the last poll of the batch system listed: its server can
    // register and serve the chain before the next poll sees the job running.
    eventually(
        &slurm,
        "the job listed running",
        Duration::from_secs(30),
        || {
            job_ids(&metaserver.list_queues())
                .iter()
                .any(|(_, state)| state == "running")
        },
    );
    let before = metaserver.list_queues();
    let runtime = &grid.runtime;
    runtime
        .block_on(grid.grid.as_mut().unwrap().restart_metaserver())
        .unwrap();
    let restarted = grid.grid().metaserver.clone();
    let after = restarted.list_queues();
    assert_eq!(after[0].spec, before[0].spec);
    assert_eq!(job_ids(&after), job_ids(&before));
    // Its server is still the queue's, and takes the next transaction: nothing new submitted.
    mmul_chain(&client, 32, 8);
    let after = restarted.list_queues();
    let running = after[0].jobs.iter().find(|j| j.state == "running").unwrap();
    assert_eq!(running.servers, 1);
    assert_eq!(job_ids(&after), job_ids(&before));
}

#[test]
fn servers_of_one_minute_jobs_drain_and_are_replaced_with_nothing_lost() {
    let slurm = LocalSlurm::start().unwrap();
    let margin = 5.0;
    let grid = TestGrid::start(Vec::new(), |options| {
        options.server_program = Some(binaries().join("ninf-server"));
        options.slurm_conf = Some(slurm.conf.clone());
        options.walltime_margin_seconds = margin;
    });
    let metaserver = grid.grid().metaserver.clone();
    let spec = v1::AllocQueueSpec {
        time_limit_minutes: 1,
        ..queue_spec("short", &[])
    };
    grid.runtime.block_on(metaserver.add_queue(spec)).unwrap();
    // Two clients send transactions without pause for 100 s: across the first job's end.
    let proxy = grid.grid().endpoints.proxy.clone();
    let until = Instant::now() + Duration::from_secs(100);
    let clients: Vec<_> = (0..2u64)
        .map(|client| {
            let proxy = proxy.clone();
            std::thread::spawn(move || {
                let grid = GridClient::connect(&proxy).unwrap().with_scheduler("flow");
                let mut done = 0u64;
                while Instant::now() < until {
                    mmul_chain(&grid, 32, client * 1000 + done);
                    done += 1;
                }
                done
            })
        })
        .collect();
    let transactions: u64 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert!(transactions > 20, "{transactions} transactions");
    // The first servers drained and left; the queue had submitted their replacements.
    let status = grid.status();
    let left = status.servers.iter().filter(|s| !s.up).count();
    assert!(left >= 1, "a server left: {:?}", status.servers);
    let queue = &metaserver.list_queues()[0];
    assert!(
        queue.jobs.len() >= 3,
        "replacements submitted: {:?}",
        queue.jobs
    );
    assert!(
        queue.jobs.iter().any(|j| j.state == "ended"),
        "{:?}",
        queue.jobs
    );
    assert_eq!(queue.failures, 0, "{}", queue.last_error);
    let events: Vec<String> = metaserver
        .events_since(0, 100_000)
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert!(events.iter().any(|k| k == "draining"), "{events:?}");
    assert!(events.iter().any(|k| k == "left"), "{events:?}");
    // No task was ever placed to end past its server's deadline.
    let placements = grid
        .runtime
        .block_on(metaserver.db().walltime_placements())
        .unwrap();
    // The DB keeps the graphs of the latest `retention_graphs` (1000) transactions, pruned
    // every minute: a fast run leaves fewer placements than it made, never fewer than that.
    assert!(
        placements.len() as u64 >= transactions.min(1000),
        "{} placements of {transactions} transactions",
        placements.len()
    );
    let past: Vec<_> = placements
        .iter()
        .filter(|p| p.past_deadline(margin))
        .collect();
    assert!(past.is_empty(), "placed past the deadline: {past:?}");
}
