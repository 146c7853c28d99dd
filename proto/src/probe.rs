//! Measuring a network path to a server with its `Monitor.Probe` RPC: the fastest of a few
//! empty probes gives the latency, a probe carrying a payload gives the throughput once that
//! latency is taken off. Servers use it towards their peers (the metaserver paper step 1) and client
//! proxies towards every server (step 2).

use std::time::Instant;

use bytes::Bytes;

use crate::net::auth::Authorized;
use crate::v1;

/// One measurement of a path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathMeasurement {
    pub throughput_bytes_per_second: f64,
    pub latency_seconds: f64,
}

/// Empty probes sent to find the latency; the fastest counts.
const LATENCY_PROBES: usize = 3;

/// Measures the path to the server behind `channel` with a payload of `payload_bytes`.
pub async fn measure(
    channel: Authorized,
    payload_bytes: usize,
) -> Result<PathMeasurement, tonic::Status> {
    let limit = payload_bytes.saturating_add(1 << 16);
    let mut client = v1::monitor_client::MonitorClient::new(channel)
        .max_encoding_message_size(limit)
        .max_decoding_message_size(limit);
    let mut latency = f64::INFINITY;
    for _ in 0..LATENCY_PROBES {
        let start = Instant::now();
        client
            .probe(v1::ProbeRequest {
                payload: Bytes::new(),
            })
            .await?;
        latency = latency.min(start.elapsed().as_secs_f64());
    }
    let payload = Bytes::from(vec![0u8; payload_bytes]);
    let start = Instant::now();
    let reply = client
        .probe(v1::ProbeRequest { payload })
        .await?
        .into_inner();
    let elapsed = start.elapsed().as_secs_f64();
    if reply.received_bytes != payload_bytes as u64 {
        return Err(tonic::Status::data_loss(format!(
            "probe sent {payload_bytes} bytes but the server received {}",
            reply.received_bytes
        )));
    }
    // The payload's own time is what the latency probes did not pay; never below a tenth of
    // the total, so a jittery latency cannot make the throughput infinite.
    let transfer = (elapsed - latency).max(elapsed / 10.0).max(1e-9);
    Ok(PathMeasurement {
        throughput_bytes_per_second: payload_bytes as f64 / transfer,
        latency_seconds: latency / 2.0,
    })
}
