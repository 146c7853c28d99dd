//! `ninf status`: the running grid's servers, network matrix and recent graphs.

use std::path::PathBuf;

use anyhow::Context;
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
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let StatusArgs {
        json,
        data_dir,
        graphs,
    } = args;
    let data_dir = data_dir.unwrap_or_else(ninf_grid::default_data_dir);
    let endpoints = Endpoints::read(&data_dir)?;
    let status = super::runtime()?.block_on(async {
        let tls = endpoints.tls()?;
        let channel = ninf_proto::net::connect(
            &endpoints.metaserver,
            tls.as_ref(),
            ninf_proto::net::ConnectionSettings::default(),
        )
        .await
        .with_context(|| format!("cannot reach the metaserver at {}", endpoints.metaserver))?;
        let token = ninf_proto::net::auth::AttachToken::new(endpoints.token()?.as_deref());
        let reply = v1::scheduling_client::SchedulingClient::with_interceptor(channel, token)
            .status(v1::StatusRequest {
                recent_graphs: graphs,
            })
            .await
            .map_err(|s| anyhow::anyhow!("metaserver: {}", s.message()))?;
        anyhow::Ok(reply.into_inner())
    })?;
    if json {
        let value = serde_json::json!({
            "metaserver": endpoints.metaserver,
            "proxy": endpoints.proxy,
            "scheduler": status.scheduler,
            "predictor": status.predictor,
            "servers": status.servers.iter().map(|s| serde_json::json!({
                "address": s.address, "up": s.up, "mflops": s.mflops,
                "processors": s.processors, "load": s.load, "stored_bytes": s.stored_bytes,
                "seconds_since_heartbeat": s.seconds_since_heartbeat,
                "routines": s.functions,
            })).collect::<Vec<_>>(),
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
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!(
        "metaserver {} (scheduler {}, predictor {}), proxy {}",
        endpoints.metaserver, status.scheduler, status.predictor, endpoints.proxy
    );
    println!(
        "\n{:<22} {:<5} {:>8} {:>5} {:>6} {:>12} {:>10}",
        "server", "state", "MFLOPS", "procs", "load", "stored (B)", "heartbeat"
    );
    for s in &status.servers {
        println!(
            "{:<22} {:<5} {:>8.0} {:>5} {:>6.1} {:>12} {:>9.1}s",
            s.address,
            if s.up { "up" } else { "down" },
            s.mflops,
            s.processors,
            s.load,
            s.stored_bytes,
            s.seconds_since_heartbeat
        );
    }
    println!("\nnetwork (latest samples)");
    for n in &status.network {
        println!(
            "  {:<22} -> {:<22} {:>10.1} MB/s {:>8.3} ms",
            n.from,
            n.to,
            n.throughput_bytes_per_second / 1e6,
            n.latency_seconds * 1e3
        );
    }
    println!("\nrecent graphs");
    for g in &status.graphs {
        println!(
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
    Ok(())
}
