//! Step 1: server-to-server network samples, into the registry's link history and the DB.

use std::collections::HashMap;

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
        self.network_log
            .record(samples)
            .await
            .map_err(MetaserverError::Recording)
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

/// The newest sample stored per (proxy, server), in Unix milliseconds.
pub(crate) type StoredSamples = HashMap<(String, String), i64>;

/// The samples of a proxy's schedule request that the DB does not hold yet, as it stores
/// them, and the newest time stored per path once they are. A proxy sends every sample it
/// keeps with each request (the metaserver paper's step 4), and under `ninf load` the same samples
/// were written again for every graph: rows the DB wrote inside the one-at-a-time
/// scheduling, and that crowded a restarted metaserver's history of the path with copies
/// of one measurement. A sample without a time (`measured_unix_ms` 0, "now") is always new.
/// Where a proxy's samples start in the registry and the DB: `client:<proxy>`.
pub(crate) fn client_end(proxy: &str) -> String {
    format!("{}:{proxy}", crate::CLIENT)
}

pub(crate) fn unstored_client_links(
    request: &v1::ScheduleRequest,
    stored: &StoredSamples,
    now: f64,
) -> (Vec<StoredLink>, StoredSamples) {
    let mut fresh = Vec::new();
    let mut newest = StoredSamples::new();
    for s in &request.client_links {
        let path = (request.proxy.clone(), s.to.clone());
        let known = stored.get(&path).copied().unwrap_or(i64::MIN);
        if s.measured_unix_ms > 0 && s.measured_unix_ms <= known {
            continue;
        }
        let latest = newest.entry(path).or_insert(known);
        *latest = (*latest).max(s.measured_unix_ms);
        fresh.push(StoredLink {
            from: client_end(&request.proxy),
            ..stored_link(s, now)
        });
    }
    (fresh, newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(to: &str, measured_unix_ms: i64) -> v1::NetworkSample {
        v1::NetworkSample {
            from: crate::CLIENT.into(),
            to: to.into(),
            throughput_bytes_per_second: 1e8,
            latency_seconds: 1e-4,
            measured_unix_ms,
        }
    }

    #[test]
    fn a_proxy_sample_is_stored_once_however_many_requests_carry_it() {
        let request = |samples: Vec<v1::NetworkSample>| v1::ScheduleRequest {
            proxy: "p".into(),
            client_links: samples,
            ..Default::default()
        };
        let mut stored = StoredSamples::new();
        let first = request(vec![
            sample("a:1", 1_000),
            sample("a:1", 2_000),
            sample("b:1", 1_500),
        ]);
        let (fresh, newest) = unstored_client_links(&first, &stored, 5.0);
        assert_eq!(fresh.len(), 3);
        assert!(fresh.iter().all(|l| l.from == "client:p"));
        stored.extend(newest);
        // The next request carries the same samples and one new one.
        let second = request(vec![
            sample("a:1", 1_000),
            sample("a:1", 2_000),
            sample("a:1", 3_000),
            sample("b:1", 1_500),
        ]);
        let (fresh, newest) = unstored_client_links(&second, &stored, 6.0);
        assert_eq!(fresh.len(), 1);
        assert_eq!((fresh[0].to.as_str(), fresh[0].time), ("a:1", 3.0));
        stored.extend(newest);
        assert_eq!(stored[&("p".to_string(), "a:1".to_string())], 3_000);
        assert_eq!(stored[&("p".to_string(), "b:1".to_string())], 1_500);
        // Another proxy's samples of the same server are its own; an untimed one is "now".
        let other = v1::ScheduleRequest {
            proxy: "q".into(),
            ..request(vec![
                sample("a:1", 1_000),
                sample("a:1", 0),
                sample("a:1", 0),
            ])
        };
        let (fresh, _) = unstored_client_links(&other, &stored, 7.0);
        assert_eq!(fresh.len(), 3);
        assert_eq!(fresh[2].time, 7.0);
    }
}
