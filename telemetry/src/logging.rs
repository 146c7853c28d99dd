//! Every Ninf process's logging, and its traces when asked: log lines on standard error
//! filtered by `RUST_LOG` (or the process's default level), and, with an OTLP endpoint
//! (`--otlp-endpoint http://collector:4317`), the spans of the grid's crates exported to an
//! OpenTelemetry collector over gRPC, with W3C trace context propagated on every request
//! (`ninf_proto::net::trace`), so one transaction is one trace across client, proxy,
//! metaserver and compute servers. Off by default: no exporter, no context on the wire.
//!
//! Chosen: `opentelemetry-otlp` over tonic (the grid already speaks gRPC through tonic, so
//! no second HTTP client comes in) and `tracing-opentelemetry`, so the spans the code already
//! opens with `tracing` are what is exported.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, Registry};

/// How often exported spans are sent in a batch: soon enough that a collector shows a
/// transaction while its user still looks at it.
const EXPORT_DELAY: Duration = Duration::from_secs(1);

/// What a process logs and where its traces go.
#[derive(Debug, Clone)]
pub struct LogOptions<'a> {
    /// The log level when `RUST_LOG` is not set (`"info"`, `"warn"`).
    pub default_level: &'a str,
    /// The OpenTelemetry `service.name` of this process's spans (`ninf-proxy`, ...).
    pub service_name: &'a str,
    /// Where to export spans (an OTLP/gRPC endpoint such as `http://127.0.0.1:4317`); `None`
    /// exports nothing.
    pub otlp_endpoint: Option<&'a str>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error("cannot start the runtime of the trace exporter: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot set up the OTLP exporter for {endpoint}: {message}")]
    Exporter { endpoint: String, message: String },
    #[error("a logger is already installed in this process")]
    AlreadyInstalled,
}

/// Keeps the trace exporter alive; dropping it sends the spans not yet exported (the
/// process's last spans, such as a command's whole transaction, would be lost otherwise).
pub struct LogGuard {
    exporter: Option<(SdkTracerProvider, tokio::runtime::Runtime)>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some((provider, runtime)) = self.exporter.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("warning: not every span reached the collector: {e}");
            }
            runtime.shutdown_background();
        }
    }
}

/// Installs the process's logger (and tracer, with an endpoint). Call once, first thing.
pub fn init(options: &LogOptions<'_>) -> Result<LogGuard, LoggingError> {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(options.default_level));
    let log_lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let Some(endpoint) = options.otlp_endpoint else {
        Registry::default()
            .with(log_lines)
            .try_init()
            .map_err(|_| LoggingError::AlreadyInstalled)?;
        return Ok(LogGuard { exporter: None });
    };
    let (provider, runtime) = exporter(endpoint, options.service_name)?;
    // The grid's own spans, whatever the log level: `ninf` prefixes every crate of the grid.
    let spans = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("ninf"))
        .with_filter(Targets::new().with_target("ninf", LevelFilter::INFO));
    Registry::default()
        .with(log_lines)
        .with(spans)
        .try_init()
        .map_err(|_| LoggingError::AlreadyInstalled)?;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    ninf_proto::net::trace::enable();
    tracing::info!(%endpoint, service = options.service_name, "exporting traces");
    Ok(LogGuard {
        exporter: Some((provider, runtime)),
    })
}

/// A tracer provider exporting to `endpoint` in batches, and the runtime its gRPC channel
/// lives on (the processes' own runtimes come and go; a command may have none).
fn exporter(
    endpoint: &str,
    service_name: &str,
) -> Result<(SdkTracerProvider, tokio::runtime::Runtime), LoggingError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-exporter")
        .enable_all()
        .build()
        .map_err(LoggingError::Runtime)?;
    let entered = runtime.enter();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| LoggingError::Exporter {
            endpoint: endpoint.to_string(),
            message: e.to_string(),
        })?;
    let batches = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(EXPORT_DELAY)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batches)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_string())
                .build(),
        )
        .build();
    drop(entered);
    Ok((provider, runtime))
}
