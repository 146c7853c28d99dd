//! Step 1: server-to-server network samples, into the registry's link history and the DB.

use ninf_proto::v1;
use ninf_scheduling::Link;

use crate::db::StoredLink;
use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    /// Step 1: server-to-server network samples.
    pub async fn report_network(&self, report: v1::NetworkReport) -> Result<(), MetaserverError> {
        let now = unix_now();
        let samples = {
            let mut state = self.state();
            let mut samples = Vec::new();
            for s in &report.samples {
                if state.registry.get(&s.from).is_none() {
                    return Err(MetaserverError::UnknownServer(s.from.clone()));
                }
                let link = Link {
                    throughput: s.throughput_bytes_per_second,
                    latency: s.latency_seconds,
                };
                state.registry.add_link(&s.from, &s.to, link);
                samples.push(stored_link(s, now));
            }
            samples
        };
        self.db.add_links(&samples).await?;
        Ok(())
    }
}

/// A sample as the DB stores it, timed by the measurement when it says when it was taken.
pub(crate) fn stored_link(s: &v1::NetworkSample, now: f64) -> StoredLink {
    StoredLink {
        from: s.from.clone(),
        to: s.to.clone(),
        throughput: s.throughput_bytes_per_second,
        latency: s.latency_seconds,
        time: if s.measured_unix_ms > 0 {
            s.measured_unix_ms as f64 / 1000.0
        } else {
            now
        },
    }
}
