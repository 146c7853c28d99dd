//! `ninf status`: the running grid's servers, network matrix and recent graphs; with
//! `--watch`, a view that redraws every `--interval` seconds until Ctrl-C.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use ninf_grid::embedded::Endpoints;
use ninf_proto::v1;

#[derive(Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Graphs to list.
    #[arg(long, default_value_t = 10)]
    pub graphs: u32,
    /// Redraw the view (servers, queues, running and recent graphs) until Ctrl-C.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
    /// Seconds between redraws with `--watch`.
    #[arg(long, default_value_t = 2.0, requires = "watch")]
    pub interval: f64,
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let data_dir = args
        .data_dir
        .clone()
        .unwrap_or_else(ninf_grid::default_data_dir);
    let endpoints = Endpoints::read(&data_dir)?;
    let runtime = super::runtime()?;
    if args.watch {
        if !(args.interval.is_finite() && args.interval > 0.0) {
            anyhow::bail!(
                "--interval must be a positive number of seconds, not {}",
                args.interval
            );
        }
        return runtime.block_on(watch(&endpoints, args.graphs, args.interval));
    }
    let status = runtime.block_on(fetch(&endpoints, args.graphs))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json(&endpoints, &status))?
        );
    } else {
        print!("{}", text(&endpoints, &status));
    }
    Ok(())
}

async fn fetch(endpoints: &Endpoints, graphs: u32) -> anyhow::Result<v1::GridStatus> {
    let (channel, token) = endpoints.metaserver_channel().await?;
    let reply = v1::scheduling_client::SchedulingClient::with_interceptor(channel, token)
        .status(v1::StatusRequest {
            recent_graphs: graphs,
            data: true,
            ..Default::default()
        })
        .await
        .map_err(|s| anyhow::anyhow!("metaserver: {}", s.message()))?;
    Ok(reply.into_inner())
}

/// Redraws until Ctrl-C; a metaserver that cannot be reached is shown, not fatal (it may be
/// restarting).
async fn watch(endpoints: &Endpoints, graphs: u32, interval: f64) -> anyhow::Result<()> {
    let stop = ninf_proto::shutdown::signal();
    tokio::pin!(stop);
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(interval));
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = ticker.tick() => {}
        }
        let view = match fetch(endpoints, graphs).await {
            Ok(status) => text(endpoints, &status),
            Err(e) => format!("{e:#}\n"),
        };
        // Clear the screen and home the cursor (ANSI), then draw.
        print!(
            "\x1b[2J\x1b[H{} (every {interval} s; Ctrl-C stops)\n\n{view}",
            clock()
        );
        use std::io::Write as _;
        std::io::stdout().flush()?;
    }
}

/// Local time of day, `HH:MM:SS` (UTC when the offset is unknown).
fn clock() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let day = seconds % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        day / 3600,
        (day % 3600) / 60,
        day % 60
    )
}

fn json(endpoints: &Endpoints, status: &v1::GridStatus) -> serde_json::Value {
    serde_json::json!({
        "metaserver": endpoints.metaserver,
        "proxy": endpoints.proxy,
        "dashboard": endpoints.dashboard,
        "scheduler": status.scheduler,
        "predictor": status.predictor,
        "servers": status.servers.iter().map(|s| serde_json::json!({
            "address": s.address, "up": s.up, "mflops": s.mflops,
            "processors": s.processors, "load": s.load, "stored_bytes": s.stored_bytes,
            "data_cap_bytes": s.data_cap_bytes,
            "running_jobs": s.running_jobs, "queued_jobs": s.queued_jobs,
            "seconds_since_heartbeat": s.seconds_since_heartbeat,
            "routines": s.functions,
            "modules": s.modules,
            "failed_modules": s.failed_modules.iter().map(|f| serde_json::json!({
                "executable": f.executable, "reason": f.reason,
            })).collect::<Vec<_>>(),
            "batch_job": s.batch_job, "allocation": s.allocation,
            "walltime_end": s.walltime_end, "draining": s.draining,
        })).collect::<Vec<_>>(),
        "queues": super::alloc::queues_json(&status.queues),
        "data": status.data.iter().map(|d| {
            let spec = d.spec.clone().unwrap_or_default();
            serde_json::json!({
                "id": d.id, "owner": d.owner, "bytes": spec.bytes, "shape": spec.shape,
                "mode": v1::DataMode::try_from(spec.mode)
                    .map_or("sticky", |m| m.as_str_name())
                    .trim_start_matches("DATA_MODE_")
                    .to_lowercase(),
                "servers": d.copies.iter().map(|c| c.server.clone()).collect::<Vec<_>>(),
                "lease_until": d.lease_until,
            })
        }).collect::<Vec<_>>(),
        "network": status.network.iter().map(|n| serde_json::json!({
            "from": n.from, "to": n.to,
            "throughput_bytes_per_second": n.throughput_bytes_per_second,
            "latency_seconds": n.latency_seconds,
        })).collect::<Vec<_>>(),
        "graphs": status.graphs.iter().map(|g| serde_json::json!({
            "id": g.graph_id, "label": g.label, "scheduler": g.scheduler, "tasks": g.tasks,
            "state": g.state, "predicted_makespan_s": g.predicted_makespan,
            "actual_makespan_s": g.actual_makespan, "inter_server_ratio": g.inter_server_ratio,
            "error": g.error,
        })).collect::<Vec<_>>(),
    })
}

/// The view as text: servers with their queues, the network, running graphs first.
fn text(endpoints: &Endpoints, status: &v1::GridStatus) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "metaserver {} (scheduler {}, predictor {}), proxy {}",
        endpoints.metaserver, status.scheduler, status.predictor, endpoints.proxy
    );
    if let Some(dashboard) = &endpoints.dashboard {
        let _ = writeln!(out, "dashboard  {dashboard}");
    }
    let _ = writeln!(
        out,
        "\n{:<22} {:<5} {:>8} {:>5} {:>6} {:>7} {:>6} {:>12} {:>10}",
        "server",
        "state",
        "MFLOPS",
        "procs",
        "load",
        "running",
        "queued",
        "stored (B)",
        "heartbeat"
    );
    for s in &status.servers {
        let _ = writeln!(
            out,
            "{:<22} {:<5} {:>8.0} {:>5} {:>6.1} {:>7} {:>6} {:>12} {:>9.1}s",
            s.address,
            if s.up { "up" } else { "down" },
            s.mflops,
            s.processors,
            s.load,
            s.running_jobs,
            s.queued_jobs,
            s.stored_bytes,
            s.seconds_since_heartbeat
        );
        let _ = writeln!(out, "{:<22} modules: {}", "", s.modules.join(", "));
        if s.data_cap_bytes > 0 {
            let _ = writeln!(out, "{:<22} data cap: {} B", "", s.data_cap_bytes);
        }
        if !s.batch_job.is_empty() {
            let left = s.walltime_end - ninf_proto::clock::unix_now();
            let _ = writeln!(
                out,
                "{:<22} job {} of queue {}, {:.0} s left{}",
                "",
                s.batch_job,
                s.allocation,
                left.max(0.0),
                if s.draining { ", draining" } else { "" }
            );
        }
        for failed in &s.failed_modules {
            let _ = writeln!(
                out,
                "{:<22} FAILED {}: {}",
                "", failed.executable, failed.reason
            );
        }
    }
    if !status.queues.is_empty() {
        let _ = writeln!(out, "\nallocation queues");
        out.push_str(&super::alloc::queues_text(&status.queues));
    }
    if !status.data.is_empty() {
        let _ = writeln!(
            out,
            "\ndata on the grid (handles and bytes, by server and owner)"
        );
        out.push_str(&data_text(&status.data));
    }
    let _ = writeln!(out, "\nnetwork (latest samples)");
    for n in &status.network {
        let _ = writeln!(
            out,
            "  {:<22} -> {:<22} {:>10.1} MB/s {:>8.3} ms",
            n.from,
            n.to,
            n.throughput_bytes_per_second / 1e6,
            n.latency_seconds * 1e3
        );
    }
    let running = status
        .graphs
        .iter()
        .filter(|g| g.state == "running")
        .count();
    let _ = writeln!(out, "\nrecent graphs ({running} running)");
    let mut graphs: Vec<&v1::GraphSummary> = status.graphs.iter().collect();
    graphs.sort_by_key(|g| g.state != "running");
    for g in graphs {
        let _ = writeln!(
            out,
            "  #{:<5} {:<20} {:<12} {:>5} tasks {:<8} predicted {:.3}s actual {:.3}s inter-server {:.0}% {}",
            g.graph_id,
            g.label,
            g.scheduler,
            g.tasks,
            g.state,
            g.predicted_makespan,
            g.actual_makespan,
            g.inter_server_ratio * 100.0,
            g.error
        );
    }
    out
}

/// The handles kept on the grid, summed by the server holding them and their owner.
fn data_text(data: &[v1::DataInfo]) -> String {
    let mut sums: std::collections::BTreeMap<(&str, &str), (u64, u64)> = Default::default();
    for d in data {
        let bytes = d.spec.as_ref().map_or(0, |s| s.bytes);
        let servers: Vec<&str> = if d.copies.is_empty() {
            vec!["(no value yet)"]
        } else {
            d.copies.iter().map(|c| c.server.as_str()).collect()
        };
        for server in servers {
            let sum = sums.entry((server, d.owner.as_str())).or_default();
            sum.0 += 1;
            sum.1 += bytes;
        }
    }
    let mut out = String::new();
    for ((server, owner), (handles, bytes)) in sums {
        let _ = writeln!(
            out,
            "  {server:<22} {owner:<28} {handles:>5} handles {bytes:>14} B"
        );
    }
    out
}
