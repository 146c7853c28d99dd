//! The proxy's own measurements of the paths to every server (the metaserver paper step 2). They stay
//! here, and travel to the metaserver only with a schedule request (step 4), as in the paper.

use std::collections::{HashMap, VecDeque};

use ninf_proto::probe::PathMeasurement;
use ninf_proto::v1;

/// Where the metaserver's network samples start when they are the proxy's.
pub const CLIENT: &str = "client";

/// Recent measurements per server, oldest first.
#[derive(Debug, Clone, Default)]
pub struct LinkRecord {
    samples: HashMap<String, VecDeque<(PathMeasurement, i64)>>,
    keep: usize,
}

impl LinkRecord {
    pub fn new(keep: usize) -> LinkRecord {
        LinkRecord {
            samples: HashMap::new(),
            keep: keep.max(1),
        }
    }

    /// Adds a measurement taken at `unix_ms`.
    pub fn add(&mut self, server: &str, measurement: PathMeasurement, unix_ms: i64) {
        let series = self.samples.entry(server.to_string()).or_default();
        series.push_back((measurement, unix_ms));
        while series.len() > self.keep {
            series.pop_front();
        }
    }

    /// Forgets servers that are no longer listed.
    pub fn retain(&mut self, servers: &[String]) {
        self.samples.retain(|s, _| servers.contains(s));
    }

    /// Every sample, as the metaserver takes them.
    pub fn samples(&self) -> Vec<v1::NetworkSample> {
        let mut servers: Vec<&String> = self.samples.keys().collect();
        servers.sort();
        servers
            .into_iter()
            .flat_map(|server| {
                self.samples[server]
                    .iter()
                    .map(move |(m, at)| v1::NetworkSample {
                        from: CLIENT.to_string(),
                        to: server.clone(),
                        throughput_bytes_per_second: m.throughput_bytes_per_second,
                        latency_seconds: m.latency_seconds,
                        measured_unix_ms: *at,
                    })
            })
            .collect()
    }

    /// The latest measurement of a server's path.
    pub fn latest(&self, server: &str) -> Option<PathMeasurement> {
        self.samples.get(server)?.back().map(|(m, _)| *m)
    }

    /// Whether a server's path needs measuring at `now_ms`: never measured, or last
    /// measured `max_age_ms` or longer ago.
    pub fn due(&self, server: &str, now_ms: i64, max_age_ms: i64) -> bool {
        self.samples
            .get(server)
            .and_then(|series| series.back())
            .is_none_or(|&(_, at)| now_ms.saturating_sub(at) >= max_age_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(throughput: f64) -> PathMeasurement {
        PathMeasurement {
            throughput_bytes_per_second: throughput,
            latency_seconds: 0.001,
        }
    }

    #[test]
    fn a_path_is_due_when_never_measured_or_old() {
        let mut record = LinkRecord::new(3);
        assert!(record.due("s:1", 5_000, 1_000));
        record.add("s:1", m(1e6), 5_000);
        assert!(!record.due("s:1", 5_999, 1_000));
        assert!(record.due("s:1", 6_000, 1_000));
        assert!(
            !record.due("s:1", 1_000_000, i64::MAX),
            "measured once is enough"
        );
        assert!(record.due("s:2", 1_000_000, i64::MAX));
    }

    #[test]
    fn keeps_the_latest_samples_per_server_in_order() {
        let mut record = LinkRecord::new(2);
        record.add("b:1", m(1.0), 10);
        record.add("a:1", m(2.0), 11);
        record.add("b:1", m(3.0), 12);
        record.add("b:1", m(4.0), 13);
        let samples = record.samples();
        let summary: Vec<(&str, f64, i64)> = samples
            .iter()
            .map(|s| {
                (
                    s.to.as_str(),
                    s.throughput_bytes_per_second,
                    s.measured_unix_ms,
                )
            })
            .collect();
        assert_eq!(
            summary,
            vec![("a:1", 2.0, 11), ("b:1", 3.0, 12), ("b:1", 4.0, 13)]
        );
        assert!(samples.iter().all(|s| s.from == CLIENT));
        record.retain(&["a:1".to_string()]);
        assert_eq!(record.latest("b:1"), None);
        assert_eq!(record.latest("a:1"), Some(m(2.0)));
    }
}
