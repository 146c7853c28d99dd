//! The proxy's metrics (served at `metrics_listen`, see `ninf-telemetry`): calls issued again
//! after a fault, by reason, the bytes its clients sent and received, and the transactions
//! waiting for a run slot.

use ninf_telemetry::{Counter, EncodeLabelSet, Family, Gauge, Registry};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `server` (its server failed), `lost_input` (an input was lost with its server) or
    /// `lost_output` (a kept output the client wants was lost at the end).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    /// `in` (graphs and their inputs from clients) or `out` (replies to them).
    pub direction: &'static str,
    /// `client` (through gRPC) or `shared` (arrays in memory a client on the proxy's host
    /// shared with it).
    pub path: &'static str,
}

/// Every metric the proxy keeps.
pub struct ProxyMetrics {
    retries: Family<ReasonLabels, Counter>,
    bytes: Family<BytesLabels, Counter>,
    /// Admitted transactions waiting for a run slot (`max_running_transactions`).
    pub waiting_to_run: Gauge,
}

impl ProxyMetrics {
    /// The metrics, registered in a new registry.
    pub fn new() -> (ProxyMetrics, Registry) {
        let metrics = ProxyMetrics {
            retries: Family::default(),
            bytes: Family::default(),
            waiting_to_run: Gauge::default(),
        };
        let mut registry = Registry::default();
        registry.register(
            "ninf_retries",
            "Tasks run again after a fault, by reason",
            metrics.retries.clone(),
        );
        registry.register(
            "ninf_bytes",
            "Bytes from and to clients",
            metrics.bytes.clone(),
        );
        registry.register(
            "ninf_transactions_waiting_to_run",
            "Admitted transactions waiting for one of the proxy's run slots \
             (max_running_transactions)",
            metrics.waiting_to_run.clone(),
        );
        (metrics, registry)
    }

    pub fn retry(&self, reason: &'static str) {
        self.retries.get_or_create(&ReasonLabels { reason }).inc();
    }

    /// Array bytes a client on the proxy's host passed in shared memory (`direction` `in`)
    /// or was answered in (`out`).
    pub fn shared_bytes(&self, direction: &'static str, bytes: u64) {
        let labels = BytesLabels {
            direction,
            path: "shared",
        };
        self.bytes.get_or_create(&labels).inc_by(bytes);
    }

    /// One transaction's request and reply sizes.
    pub fn client_bytes(&self, bytes_in: u64, bytes_out: u64) {
        for (direction, bytes) in [("in", bytes_in), ("out", bytes_out)] {
            let labels = BytesLabels {
                direction,
                path: "client",
            };
            self.bytes.get_or_create(&labels).inc_by(bytes);
        }
    }
}
