//! The compute server's metrics (served at `metrics_listen`, see `ninf-telemetry`): calls by
//! routine and outcome, their durations, bytes in and out by path, the gang scheduler's
//! queue and switches, what storage holds, and the stored arrays that skipped a copy.

use ninf_telemetry::{
    Counter, EncodeLabelSet, EncodeLabelValue, Family, Gauge, Histogram, Registry, seconds_buckets,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    ok,
    error,
}

/// How a call came: gRPC `Invoke.Call` or the bulk-data port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    Grpc,
    Bulk,
    /// The same-host bulk path: arrays in memory shared with the client.
    Local,
}

impl Path {
    pub fn label(self) -> &'static str {
        match self {
            Path::Grpc => "grpc",
            Path::Bulk => "bulk",
            Path::Local => "local",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub routine: String,
    pub server: String,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoutineLabels {
    pub routine: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreRegionLabels {
    /// `written_in_place` (kept outputs the routine wrote into the store region),
    /// `copied_in` (kept outputs the server copied there), `read_in_place` (stored inputs
    /// an executable read where they lie), `lent_to_peer` (stored arrays lent to another
    /// server of this host, `crate::storage::lending`) or `read_from_peer` (another server's
    /// stored arrays an executable here read where they lie there).
    pub array: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PutLabels {
    /// `grpc` (`Storage.Put`), `bulk` (a put frame on the TCP bulk port), `local` (on the
    /// same-host socket, through the connection's region) or `lent` (read where a same-host
    /// client put it, in a region its proxy lent on).
    pub path: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BytesLabels {
    /// `in` (arguments received) or `out` (results sent).
    pub direction: &'static str,
    pub path: &'static str,
}

fn seconds_histogram() -> Histogram {
    Histogram::new(seconds_buckets())
}

/// Every metric a compute server keeps.
pub struct ServerMetrics {
    /// The address calls are counted under (the server's advertised address).
    server: String,
    calls: Family<CallLabels, Counter>,
    call_seconds: Family<RoutineLabels, Histogram>,
    bytes: Family<BytesLabels, Counter>,
    queue_length: Gauge,
    gang_switches: Counter,
    storage_bytes: Gauge,
    store_region: Family<StoreRegionLabels, Counter>,
    lent_input: Counter,
    lent_output: Counter,
    puts: Family<PutLabels, Counter>,
    call_batches: Counter,
    calls_rejoined: Counter,
    lent_threads: Counter,
    /// Switches already counted, from the agents' reports.
    switches_seen: std::sync::atomic::AtomicU64,
}

impl ServerMetrics {
    /// The metrics, registered in a new registry.
    pub fn new(server: &str) -> (ServerMetrics, Registry) {
        let metrics = ServerMetrics {
            server: server.to_string(),
            calls: Family::default(),
            call_seconds: Family::new_with_constructor(seconds_histogram),
            bytes: Family::default(),
            queue_length: Gauge::default(),
            gang_switches: Counter::default(),
            storage_bytes: Gauge::default(),
            store_region: Family::default(),
            lent_input: Counter::default(),
            lent_output: Counter::default(),
            puts: Family::default(),
            call_batches: Counter::default(),
            calls_rejoined: Counter::default(),
            lent_threads: Counter::default(),
            switches_seen: Default::default(),
        };
        let mut registry = Registry::default();
        let r = &mut registry;
        r.register(
            "ninf_calls",
            "Calls served, by routine and outcome",
            metrics.calls.clone(),
        );
        r.register(
            "ninf_call_seconds",
            "Duration of calls served, by routine",
            metrics.call_seconds.clone(),
        );
        r.register(
            "ninf_bytes",
            "Argument bytes received and result bytes sent, by path",
            metrics.bytes.clone(),
        );
        r.register(
            "ninf_queue_length",
            "Jobs waiting for the gang scheduler",
            metrics.queue_length.clone(),
        );
        r.register(
            "ninf_gang_switches",
            "Slot switches the node agents made",
            metrics.gang_switches.clone(),
        );
        r.register(
            "ninf_storage_bytes",
            "Bytes held in storage (memory and spill)",
            metrics.storage_bytes.clone(),
        );
        r.register(
            "ninf_store_region_bytes",
            "Bytes of stored arrays the routines wrote into the store region, the server copied there, the routines read from it in place, lent to the host's other servers, and read in place from theirs",
            metrics.store_region.clone(),
        );
        r.register(
            "ninf_lent_input_bytes",
            "Bytes of inputs the routines read where a same-host client put them, in a region its proxy lent on (docs/bulk-protocol.md, \"Regions lent on\")",
            metrics.lent_input.clone(),
        );
        r.register(
            "ninf_lent_output_bytes",
            "Bytes of outputs the routines wrote straight into the region a same-host client reads them from (docs/bulk-protocol.md, \"Regions lent on\")",
            metrics.lent_output.clone(),
        );
        r.register(
            "ninf_put_bytes",
            "Bytes of arrays stored by puts, by the path they came (docs/bulk-protocol.md, \"Puts\")",
            metrics.puts.clone(),
        );
        r.register(
            "ninf_call_batches",
            "CallBatch requests of one call or more received (their calls count in ninf_calls once served)",
            metrics.call_batches.clone(),
        );
        r.register(
            "ninf_calls_rejoined",
            "Keyed calls answered by the run an earlier request with the same key started, without running them again (a proxy restarted on its journal came back for them)",
            metrics.calls_rejoined.clone(),
        );
        r.register(
            "ninf_lent_threads",
            "Threads calls computed with on cores other servers of this host lent them, one per lent core per call (docs/gang.md)",
            metrics.lent_threads.clone(),
        );
        (metrics, registry)
    }

    /// A call computed with `threads` threads, all but one on lent cores.
    pub fn lent(&self, threads: u32) {
        self.lent_threads
            .inc_by(u64::from(threads.saturating_sub(1)));
    }

    /// Threads on lent cores so far.
    pub fn lent_threads(&self) -> u64 {
        self.lent_threads.get()
    }

    /// `bytes` of inputs the routine read in a region lent on.
    pub fn lent_input(&self, bytes: u64) {
        self.lent_input.inc_by(bytes);
    }

    /// `bytes` of outputs the routine wrote into a region lent on.
    pub fn lent_output(&self, bytes: u64) {
        self.lent_output.inc_by(bytes);
    }

    /// Bytes of outputs routines wrote into regions lent on, so far.
    pub fn lent_output_bytes(&self) -> u64 {
        self.lent_output.get()
    }

    /// Bytes of inputs routines read in regions lent on, so far.
    pub fn lent_input_bytes(&self) -> u64 {
        self.lent_input.get()
    }

    /// A put of `bytes` stored, its bytes come by `path` (see [`PutLabels`]).
    pub fn put(&self, path: &'static str, bytes: u64) {
        self.puts.get_or_create(&PutLabels { path }).inc_by(bytes);
    }

    /// Bytes of puts stored so far that came by `path`.
    pub fn put_bytes(&self, path: &'static str) -> u64 {
        self.puts.get_or_create(&PutLabels { path }).get()
    }

    /// `bytes` of stored arrays that went `array` (see [`StoreRegionLabels`]).
    pub fn store_region(&self, array: &'static str, bytes: u64) {
        self.store_region
            .get_or_create(&StoreRegionLabels { array })
            .inc_by(bytes);
    }

    /// Bytes counted so far under `array` (see [`StoreRegionLabels`]).
    pub fn store_region_bytes(&self, array: &'static str) -> u64 {
        self.store_region
            .get_or_create(&StoreRegionLabels { array })
            .get()
    }

    /// One `CallBatch` request received.
    pub fn call_batch(&self) {
        self.call_batches.inc();
    }

    /// A keyed call answered by the run an earlier request started (its caller came back).
    pub fn call_rejoined(&self) {
        self.calls_rejoined.inc();
    }

    /// One call served: its routine, whether it succeeded, how long it took, and the bytes
    /// that came in and went out on `path`.
    pub fn call(
        &self,
        routine: &str,
        ok: bool,
        seconds: f64,
        (path, bytes_in, bytes_out): (Path, u64, u64),
    ) {
        let outcome = if ok { Outcome::ok } else { Outcome::error };
        let labels = CallLabels {
            routine: routine.to_string(),
            server: self.server.clone(),
            outcome,
        };
        self.calls.get_or_create(&labels).inc();
        let routine = RoutineLabels {
            routine: routine.to_string(),
        };
        self.call_seconds.get_or_create(&routine).observe(seconds);
        for (direction, bytes) in [("in", bytes_in), ("out", bytes_out)] {
            let labels = BytesLabels {
                direction,
                path: path.label(),
            };
            self.bytes.get_or_create(&labels).inc_by(bytes);
        }
    }

    /// Bytes counted so far in `direction` (`in` or `out`) on `path`.
    pub fn bytes_on(&self, direction: &'static str, path: Path) -> u64 {
        let labels = BytesLabels {
            direction,
            path: path.label(),
        };
        self.bytes.get_or_create(&labels).get()
    }

    /// The latest load sample: queue and storage, and switches since the last sample.
    pub fn sample(&self, queued: usize, stored_bytes: u64, switches: u64) {
        self.queue_length.set(queued as i64);
        self.storage_bytes
            .set(i64::try_from(stored_bytes).unwrap_or(i64::MAX));
        let seen = self
            .switches_seen
            .fetch_max(switches, std::sync::atomic::Ordering::Relaxed);
        if switches > seen {
            self.gang_switches.inc_by(switches - seen);
        }
    }
}
