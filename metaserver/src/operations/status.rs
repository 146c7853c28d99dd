//! What the metaserver knows, for proxies and people: a routine's interface, and the grid's
//! servers, network and recent graphs (`ninf status`).

use ninf_proto::v1;

use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    pub fn describe(&self, function: &str) -> Option<v1::FunctionInterface> {
        let state = self.state();
        state
            .registry
            .describe(function, unix_now())
            .map(v1::FunctionInterface::from)
    }

    pub async fn status(&self, recent_graphs: u32) -> Result<v1::GridStatus, MetaserverError> {
        let now = unix_now();
        let (servers, network) = {
            let state = self.state();
            let servers = state
                .registry
                .servers()
                .iter()
                .map(|s| v1::ServerStatus {
                    address: s.address.clone(),
                    up: state.registry.is_up(s, now),
                    mflops: s.info.mflops,
                    processors: s.info.processors,
                    cpus: s.info.cpus,
                    load: s.load.back().copied().unwrap_or(0.0),
                    stored_bytes: s.latest.map_or(0, |l| l.stored_bytes),
                    running_jobs: s.latest.map_or(0, |l| l.running_jobs),
                    queued_jobs: s.latest.map_or(0, |l| l.queued_jobs),
                    seconds_since_heartbeat: (now - s.last_heartbeat).max(0.0),
                    functions: s.routines.keys().cloned().collect(),
                })
                .collect();
            let network = state
                .registry
                .latest_links()
                .into_iter()
                .map(|(from, to, link)| v1::NetworkSample {
                    from,
                    to,
                    throughput_bytes_per_second: link.throughput,
                    latency_seconds: link.latency,
                    measured_unix_ms: 0,
                })
                .collect();
            (servers, network)
        };
        Ok(v1::GridStatus {
            scheduler: self.config.scheduler.clone(),
            predictor: self.config.predictor.clone(),
            servers,
            network,
            graphs: self.db.recent_graphs(recent_graphs).await?,
        })
    }
}
