//! Metrics of the Ninf services, for Prometheus: each service keeps its metric families in a
//! `prometheus-client` registry (OpenMetrics text, the format Prometheus scrapes) and serves
//! them at `GET /metrics` on its `metrics_listen` address with [`serve`] (axum, on the
//! service's own runtime). Services define their families in their own `metrics` module;
//! this crate holds what they share, and the HTTP serving itself ([`http`]), which the
//! metaserver's dashboard uses too. [`logging`] sets up every process's log lines and, when
//! asked, exports its spans to an OpenTelemetry collector.

use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::routing::get;
use ninf_proto::net::NetError;

pub mod http;
pub mod logging;

pub use http::{HttpEndpoint, HttpEndpoint as MetricsEndpoint, serve_router};
pub use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
pub use prometheus_client::metrics::counter::Counter;
pub use prometheus_client::metrics::family::Family;
pub use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
pub use prometheus_client::registry::Registry;

/// The content type of OpenMetrics text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Buckets for durations in seconds: 100 µs to about 7 minutes, ×4 each.
pub fn seconds_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(1e-4, 4.0, 12)
}

/// Buckets for ratios such as a prediction's relative error: 1% to about 82×, ×2 each.
pub fn ratio_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.01, 2.0, 14)
}

/// The registry's metrics as OpenMetrics text.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    text
}

/// Serves `registry` at `GET /metrics` on `listen` (port 0 picks a free one).
pub async fn serve(listen: &str, registry: Arc<Registry>) -> Result<MetricsEndpoint, NetError> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let registry = registry.clone();
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], render(&registry)) }
        }),
    );
    http::serve_router(listen, app, None).await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
    struct Labels {
        routine: String,
    }

    #[tokio::test]
    async fn a_scrape_returns_what_was_counted() {
        let calls = Family::<Labels, Counter>::default();
        let mut registry = Registry::default();
        registry.register("ninf_calls", "Calls", calls.clone());
        let endpoint = serve("127.0.0.1:0", Arc::new(registry)).await.unwrap();
        calls
            .get_or_create(&Labels {
                routine: "mmul".into(),
            })
            .inc_by(3);
        let mut stream = tokio::net::TcpStream::connect(&endpoint.address)
            .await
            .unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains(CONTENT_TYPE), "{response}");
        assert!(
            response.contains("ninf_calls_total{routine=\"mmul\"} 3"),
            "{response}"
        );
        endpoint.stop().await;
    }
}
