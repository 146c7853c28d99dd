//! The metaserver's metrics (served at `metrics_listen`, see `ninf-telemetry`): graphs by
//! scheduler and outcome, how far each graph's predicted makespan was from the actual one,
//! servers by state, and replicas of data handles evicted under servers' data caps.

use ninf_telemetry::{Counter, EncodeLabelSet, Family, Gauge, Histogram, Registry, ratio_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GraphLabels {
    pub scheduler: String,
    /// `ok` or `failed`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// `up` or `down`.
    pub state: &'static str,
}

/// Every metric the metaserver keeps.
pub struct MetaserverMetrics {
    graphs: Family<GraphLabels, Counter>,
    prediction_error: Histogram,
    servers: Family<StateLabels, Gauge>,
    data_evictions: Counter,
}

impl MetaserverMetrics {
    /// The metrics, registered in a new registry.
    pub fn new() -> (MetaserverMetrics, Registry) {
        let metrics = MetaserverMetrics {
            graphs: Family::default(),
            prediction_error: Histogram::new(ratio_buckets()),
            servers: Family::default(),
            data_evictions: Counter::default(),
        };
        let mut registry = Registry::default();
        registry.register(
            "ninf_graphs",
            "Graphs reported, by scheduler and outcome",
            metrics.graphs.clone(),
        );
        registry.register(
            "ninf_prediction_error_ratio",
            "|predicted - actual| / actual makespan of each graph reported",
            metrics.prediction_error.clone(),
        );
        registry.register(
            "ninf_servers",
            "Registered servers, by state",
            metrics.servers.clone(),
        );
        registry.register(
            "ninf_data_evictions",
            "Replicas of data handles evicted to make room under a server's data cap",
            metrics.data_evictions.clone(),
        );
        (metrics, registry)
    }

    /// A replica was evicted under a data cap.
    pub fn data_evicted(&self) {
        self.data_evictions.inc();
    }

    /// A graph ended: counted under its scheduler, and its prediction's error observed.
    pub fn graph(&self, scheduler: &str, failed: bool, predicted: f64, actual: f64) {
        let labels = GraphLabels {
            scheduler: scheduler.to_string(),
            outcome: if failed { "failed" } else { "ok" },
        };
        self.graphs.get_or_create(&labels).inc();
        if !failed && actual > 0.0 {
            self.prediction_error
                .observe((predicted - actual).abs() / actual);
        }
    }

    /// Servers up and down now.
    pub fn servers(&self, up: usize, down: usize) {
        for (state, count) in [("up", up), ("down", down)] {
            let gauge = self.servers.get_or_create(&StateLabels { state });
            gauge.set(count as i64);
        }
    }
}
