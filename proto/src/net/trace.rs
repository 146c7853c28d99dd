//! One trace per transaction across the grid's processes: the W3C trace context
//! (`traceparent` request metadata) travels with every gRPC request the grid sends, so a
//! client's transaction, the proxy's graph, the metaserver's scheduling and each server's call
//! are spans of one trace. Off until a process turns its exporter on
//! (`ninf_telemetry::logging`, `--otlp-endpoint`): until then nothing is added to requests and
//! servers open no span per request.
//!
//! Outgoing requests carry the caller's current span ([`inject`], run by every channel's
//! token interceptor, [`super::auth::AttachToken`]); every grid server opens an `rpc` span for
//! a request that carries a context, as the child of the caller's span ([`request_span`], the
//! servers' `trace_fn`). The handlers' own spans (`graph`, `schedule`, `call`, ...) nest in it.

use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::{Extractor, Injector};
use tonic::codegen::http;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Whether this process exports traces (and so propagates their context).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Starts propagating trace context on this process's requests and opening spans for the
/// requests it serves. Called once the process has a tracer and a propagator installed.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether trace context propagates (the process exports traces).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Writes the current span's trace context into an outgoing request's metadata.
pub fn inject(metadata: &mut MetadataMap) {
    if !enabled() {
        return;
    }
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut MetadataInjector(metadata));
    });
}

/// The span a grid server opens for an incoming request: an `rpc` span, child of the caller's
/// span, when traces are on and the request carries a trace context; no span otherwise (a
/// heartbeat or a health check from a process that does not trace starts no trace).
pub fn request_span(request: &http::Request<()>) -> tracing::Span {
    if !enabled() || !request.headers().contains_key(TRACEPARENT) {
        return tracing::Span::none();
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&HeaderExtractor(request.headers()))
    });
    let path = request.uri().path();
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""));
    let span = tracing::info_span!(
        "rpc",
        otel.name = %path,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    );
    if let Err(e) = span.set_parent(parent) {
        tracing::debug!(error = %e, "cannot link a request's span to its caller");
    }
    span
}

/// The W3C header naming the caller's span.
const TRACEPARENT: &str = "traceparent";

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Nothing in this crate's tests turns traces on: a process that does not export adds
    // nothing to its requests and opens no span for the requests it serves, whatever the
    // caller sent.
    #[test]
    fn off_until_enabled() {
        let mut metadata = MetadataMap::new();
        inject(&mut metadata);
        assert!(metadata.is_empty());
        let request = http::Request::builder()
            .uri("/ninf.v1.Invoke/Call")
            .header(
                TRACEPARENT,
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            )
            .body(())
            .unwrap_or_default();
        assert!(request_span(&request).is_none());
    }
}
