//! The proxy's own measurements of the paths to every server (the metaserver paper step 2). They stay
//! here, and travel to the metaserver only with a schedule request (step 4), as in the paper,
//! each once: the metaserver keeps them (in its registry and its DB), and a proxy that sent
//! every sample it kept with every graph sent 80,000 of them per graph at 10,000 servers.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use ninf_proto::probe::PathMeasurement;
use ninf_proto::v1;

/// Where the metaserver's network samples start when they are the proxy's.
pub const CLIENT: &str = "client";

/// Whether a path last measured at `measured_at` (never: `None`) needs measuring again.
fn is_due(measured_at: Option<i64>, now_ms: i64, max_age_ms: i64) -> bool {
    measured_at.is_none_or(|at| now_ms.saturating_sub(at) >= max_age_ms)
}

/// A site's servers measured recently, and those due with when each was last measured.
type SiteProbes<'a> = (usize, Vec<(Option<i64>, &'a str)>);

/// Recent measurements per server, oldest first.
#[derive(Debug, Clone, Default)]
pub struct LinkRecord {
    samples: HashMap<String, VecDeque<(PathMeasurement, i64)>>,
    keep: usize,
    /// Per server, the time of the newest sample a metaserver has taken.
    sent: HashMap<String, i64>,
}

impl LinkRecord {
    pub fn new(keep: usize) -> LinkRecord {
        LinkRecord {
            samples: HashMap::new(),
            keep: keep.max(1),
            sent: HashMap::new(),
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
    pub fn retain<'a>(&mut self, servers: impl IntoIterator<Item = &'a str>) {
        // A set: with a list this was N² comparisons for every graph, 10⁸ at 10,000 servers.
        let listed: HashSet<&str> = servers.into_iter().collect();
        self.samples.retain(|s, _| listed.contains(s.as_str()));
        self.sent.retain(|s, _| listed.contains(s.as_str()));
    }

    /// The samples no metaserver has taken yet, as [`LinkRecord::samples`] lists them.
    pub fn unsent(&self) -> Vec<v1::NetworkSample> {
        let mut samples = self.samples();
        samples.retain(|s| {
            self.sent
                .get(&s.to)
                .is_none_or(|&sent| s.measured_unix_ms > sent)
        });
        samples
    }

    /// A metaserver took `samples` (it placed the graph they came with).
    pub fn taken(&mut self, samples: &[v1::NetworkSample]) {
        for s in samples {
            let sent = self.sent.entry(s.to.clone()).or_insert(i64::MIN);
            *sent = (*sent).max(s.measured_unix_ms);
        }
    }

    /// Sends every sample again with the next graph: a request failed, and the metaserver
    /// that answers next may not have what the last one took.
    pub fn send_all_again(&mut self) {
        self.sent.clear();
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
        is_due(self.measured_at(server), now_ms, max_age_ms)
    }

    fn measured_at(&self, server: &str) -> Option<i64> {
        self.samples
            .get(server)
            .and_then(|series| series.back())
            .map(|&(_, at)| at)
    }

    /// Which of `servers` (address and site, each up) to measure at `now_ms`: those
    /// [`LinkRecord::due`], but no more of a site than make `per_site` measured within
    /// `max_age_ms` (the site's others are estimated from them, as the Network Weather
    /// Service's cliques stood for their hosts); of a site's due servers, the longest
    /// unmeasured first, so the role goes round. The sites take turns in the list, so that
    /// a round cut short still reaches every site. `per_site` 0: every due server; a
    /// server with no site named is a site of its own.
    pub fn to_probe(
        &self,
        servers: &[(&str, &str)],
        now_ms: i64,
        max_age_ms: i64,
        per_site: usize,
    ) -> Vec<String> {
        let mut by_site: BTreeMap<&str, SiteProbes> = BTreeMap::new();
        for &(address, site) in servers {
            // No site named (a metaserver from before sites): the server alone.
            let site = if site.is_empty() { address } else { site };
            let (fresh, due) = by_site.entry(site).or_default();
            let measured_at = self.measured_at(address);
            if is_due(measured_at, now_ms, max_age_ms) {
                due.push((measured_at, address));
            } else {
                *fresh += 1;
            }
        }
        let quota = |fresh: usize, due: usize| match per_site {
            0 => due,
            k => k.saturating_sub(fresh).min(due),
        };
        let mut queues: Vec<std::vec::IntoIter<(Option<i64>, &str)>> = by_site
            .into_values()
            .map(|(fresh, mut due)| {
                due.sort();
                due.truncate(quota(fresh, due.len()));
                due.into_iter()
            })
            .collect();
        let mut chosen = Vec::new();
        while !queues.is_empty() {
            queues.retain_mut(|queue| match queue.next() {
                Some((_, address)) => {
                    chosen.push(address.to_string());
                    true
                }
                None => false,
            });
        }
        chosen
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
        record.retain(["a:1"]);
        assert_eq!(record.latest("b:1"), None);
        assert_eq!(record.latest("a:1"), Some(m(2.0)));
    }

    #[test]
    fn each_sample_is_sent_once_unless_a_request_fails() {
        let times = |samples: &[v1::NetworkSample]| -> Vec<(String, i64)> {
            samples
                .iter()
                .map(|s| (s.to.clone(), s.measured_unix_ms))
                .collect()
        };
        let mut record = LinkRecord::new(4);
        record.add("a:1", m(1.0), 10);
        record.add("b:1", m(2.0), 11);
        let first = record.unsent();
        assert_eq!(times(&first), [("a:1".into(), 10), ("b:1".into(), 11)]);
        record.taken(&first);
        assert!(record.unsent().is_empty());
        record.add("b:1", m(3.0), 12);
        assert_eq!(times(&record.unsent()), [("b:1".into(), 12)]);
        record.send_all_again();
        assert_eq!(record.unsent().len(), 3);
    }

    #[test]
    fn a_few_servers_of_each_site_are_measured_longest_unmeasured_first_sites_in_turn() {
        let servers = [
            ("a1:1", "A"),
            ("a2:1", "A"),
            ("a3:1", "A"),
            ("b1:1", "B"),
            ("c1:1", "C"),
            ("c2:1", "C"),
        ];
        let mut record = LinkRecord::new(2);
        // Nothing measured: two of each site, the sites taking turns.
        assert_eq!(
            record.to_probe(&servers, 1_000, 500, 2),
            ["a1:1", "b1:1", "c1:1", "a2:1", "c2:1"]
        );
        assert_eq!(record.to_probe(&servers, 1_000, 500, 0).len(), 6, "0: all");
        let unnamed = servers.map(|(address, _)| (address, ""));
        assert_eq!(
            record.to_probe(&unnamed, 1_000, 500, 1).len(),
            6,
            "each alone"
        );
        for (address, at) in [("a1:1", 900), ("a2:1", 950), ("b1:1", 900), ("c1:1", 800)] {
            record.add(address, m(1.0), at);
        }
        // A has two fresh: none of it; B's one is fresh; C has one fresh: one more, c2.
        assert_eq!(record.to_probe(&servers, 1_000, 500, 2), ["c2:1"]);
        // Later all are old: of A, a3 (never measured) and a1 (the older of the others).
        assert_eq!(
            record.to_probe(&servers, 1_460, 500, 2),
            ["a3:1", "b1:1", "c2:1", "a1:1", "c1:1"]
        );
    }
}
