//! Compute servers from Slurm across walltime boundaries, measured: a private one-node Slurm
//! (`ninf_grid::slurm`), a grid with no servers of its own, one allocation queue of
//! `--time-limit`-minute jobs, and clients sending transactions without pause for
//! `--seconds`. Prints one JSON object: the seconds from the queue's `alloc add` to the first
//! transaction served, the transactions run and failed, the jobs the queue used and the
//! servers that left, the calls the proxy ran again (the work lost across the boundaries), and
//! the placements predicted to end past their server's deadline (docs/slurm.md, "Figures").
//!
//!     cargo run --release -p ninf-grid --example slurm_walltime -- --seconds 150 --time-limit 1

use std::time::{Duration, Instant};

use anyhow::Context;
use ninf::grid::GridClient;
use ninf_grid::embedded::{EmbeddedGrid, GridOptions};
use ninf_grid::slurm::LocalSlurm;
use ninf_proto::v1;

struct Settings {
    seconds: f64,
    time_limit: u32,
    clients: u64,
    n: usize,
}

fn settings() -> anyhow::Result<Settings> {
    let mut settings = Settings {
        seconds: 150.0,
        time_limit: 1,
        clients: 2,
        n: 64,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let value = pair.get(1).context("every flag takes a value")?;
        match pair[0].as_str() {
            "--seconds" => settings.seconds = value.parse()?,
            "--time-limit" => settings.time_limit = value.parse()?,
            "--clients" => settings.clients = value.parse()?,
            "--n" => settings.n = value.parse()?,
            other => {
                anyhow::bail!("unknown flag {other} (--seconds, --time-limit, --clients, --n)")
            }
        }
    }
    Ok(settings)
}

/// `c = a·b; d = c·a` in one transaction; whether `d` is exactly the same products here.
fn chain(client: &GridClient, n: usize, seed: u64) -> anyhow::Result<bool> {
    let a: Vec<f64> = (0..n * n)
        .map(|i| ((i as u64 * 31 + seed) % 17) as f64 / 17.0)
        .collect();
    let (mut c, mut d) = (vec![0.0; n * n], vec![0.0; n * n]);
    let order = n as i32;
    client.transaction(|tx| {
        let (a_, c_, d_) = (tx.input(&a), tx.buffer(&mut c), tx.buffer(&mut d));
        tx.call("mmul", &[order.into(), a_.into(), a_.into(), c_.into()])?;
        tx.call("mmul", &[order.into(), c_.into(), a_.into(), d_.into()])?;
        Ok(())
    })?;
    let mut expected_c = vec![0.0; n * n];
    ninf_routines::blas::mmul(order, &a, &a, &mut expected_c).map_err(anyhow::Error::msg)?;
    let mut expected = vec![0.0; n * n];
    ninf_routines::blas::mmul(order, &expected_c, &a, &mut expected).map_err(anyhow::Error::msg)?;
    Ok(d == expected)
}

fn main() -> anyhow::Result<()> {
    let settings = settings()?;
    let slurm = LocalSlurm::start()?;
    let dir = tempfile::tempdir()?;
    let bin = std::env::current_exe()?
        .parent()
        .and_then(|examples| examples.parent())
        .context("no folder of programs")?
        .to_path_buf();
    let runtime = tokio::runtime::Runtime::new()?;
    let mut options = GridOptions::new(Vec::new(), dir.path());
    options.server_program = Some(bin.join("ninf-server"));
    options.slurm_conf = Some(slurm.conf.clone());
    options.walltime_margin_seconds = 5.0;
    let grid = runtime.block_on(EmbeddedGrid::start(options))?;
    let metaserver = grid.metaserver.clone();
    let added = Instant::now();
    runtime.block_on(metaserver.add_queue(v1::AllocQueueSpec {
        name: "measured".into(),
        manager: "slurm".into(),
        time_limit_minutes: settings.time_limit,
        servers_per_job: 1,
        max_servers: 2,
        backlog: 1,
        ..Default::default()
    }))?;
    let proxy = grid.endpoints.proxy.clone();
    let first = GridClient::connect(&proxy)?;
    let exact_first = chain(&first, settings.n, 0)?;
    let first_call = added.elapsed().as_secs_f64();
    let until = Instant::now() + Duration::from_secs_f64(settings.seconds);
    let clients: Vec<_> = (0..settings.clients)
        .map(|client| {
            let proxy = proxy.clone();
            let n = settings.n;
            std::thread::spawn(move || -> (u64, u64) {
                let Ok(grid) = GridClient::connect(&proxy) else {
                    return (0, 1);
                };
                let (mut done, mut failed) = (0, 0);
                while Instant::now() < until {
                    match chain(&grid, n, client * 1_000_000 + done + failed) {
                        Ok(true) => done += 1,
                        Ok(false) | Err(_) => failed += 1,
                    }
                }
                (done, failed)
            })
        })
        .collect();
    let (mut done, mut failed) = (u64::from(exact_first), u64::from(!exact_first));
    for client in clients {
        let (d, f) = client
            .join()
            .map_err(|_| anyhow::anyhow!("a client panicked"))?;
        done += d;
        failed += f;
    }
    let events = metaserver.events_since(0, 1_000_000);
    let count = |kind: &str| events.iter().filter(|e| e.kind == kind).count();
    let placements = runtime.block_on(metaserver.db().walltime_placements())?;
    let past = placements.iter().filter(|p| p.past_deadline(5.0)).count();
    let queue = metaserver.list_queues().remove(0);
    let report = serde_json::json!({
        "time_limit_minutes": settings.time_limit,
        "seconds": settings.seconds,
        "first_call_seconds": first_call,
        "transactions": done,
        "failed": failed,
        "jobs": queue.jobs.len(),
        "jobs_ended": queue.jobs.iter().filter(|j| j.state == "ended").count(),
        "servers_left": count("left"),
        "calls_run_again": count("retry") + count("regenerate"),
        "placements_on_walltime_servers": placements.len(),
        "placements_past_deadline": past,
    });
    println!("{report}");
    runtime.block_on(grid.stop());
    drop(slurm);
    Ok(())
}
