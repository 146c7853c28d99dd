//! One trace per transaction across processes: `ninf up` (metaserver, proxy and servers) and
//! `ninf call` (the client) both export to an OpenTelemetry collector, played here by an
//! OTLP/gRPC trace service that keeps what it receives. The call's `transaction` span is the
//! root; the proxy's request, its graph and task spans, the metaserver's scheduling and
//! the server's call are its descendants, every one in the same trace and the graph's id
//! on the spans that know it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};

use crate::common::{ninf, up};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// A span as the collector received it, with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent_span_id: Vec<u8>,
    attributes: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Received>>>);

fn text(attributes: &[KeyValue]) -> HashMap<String, String> {
    attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => s.clone(),
                Value::IntValue(i) => i.to_string(),
                Value::BoolValue(b) => b.to_string(),
                Value::DoubleValue(d) => d.to_string(),
                _ => return None,
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.0.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let resource = resource_spans
                .resource
                .map(|r| text(&r.attributes))
                .unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    kept.push(Received {
                        service: service.clone(),
                        name: span.name,
                        trace_id: span.trace_id,
                        span_id: span.span_id,
                        parent_span_id: span.parent_span_id,
                        attributes: text(&span.attributes),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// Serves the collector on a free loopback port; returns its `http://` endpoint.
fn start_collector(runtime: &tokio::runtime::Runtime, collector: Collector) -> String {
    runtime.block_on(async {
        let listener = ninf_proto::net::listen("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(
            ninf_proto::net::server(None)
                .unwrap()
                .add_service(TraceServiceServer::new(collector))
                .serve_with_incoming(ninf_proto::net::incoming(listener)),
        );
        format!("http://{address}")
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The spans one per line, for a failing assertion's message.
fn listing(spans: &[Received]) -> String {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} {} {} parent {} {} {:?}\n",
                s.service,
                hex(&s.trace_id),
                hex(&s.span_id),
                hex(&s.parent_span_id),
                s.name,
                s.attributes.get("graph_id")
            )
        })
        .collect()
}

/// The one span named `name` in `spans` whose attribute `key` is `value`.
fn one<'a>(spans: &'a [Received], name: &str, key: &str, value: &str) -> &'a Received {
    let found: Vec<&Received> = spans
        .iter()
        .filter(|s| s.name == name && s.attributes.get(key).map(String::as_str) == Some(value))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "spans {name} with {key}={value}: {spans:#?}"
    );
    found[0]
}

/// The one request for `path` (`/package.Service/Method`) whose caller's span is `parent`.
fn rpc_under<'a>(spans: &'a [Received], path: &str, parent: &Received) -> &'a Received {
    let found: Vec<&Received> = spans
        .iter()
        .filter(|s| s.name == path && s.parent_span_id == parent.span_id)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "requests {path} under {}:\n{}",
        hex(&parent.span_id),
        listing(spans)
    );
    found[0]
}

#[test]
fn a_transaction_is_one_trace_from_the_client_to_the_servers() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let collector = Collector::default();
    let endpoint = start_collector(&runtime, collector.clone());
    let dir = tempfile::tempdir().unwrap();
    let mut grid = up(dir.path(), &["--otlp-endpoint", &endpoint]);

    let output = Command::new(ninf())
        .args([
            "--otlp-endpoint",
            &endpoint,
            "call",
            "mmul",
            "2",
            "[1,2,3,4]",
            "[0,1,1,0]",
        ])
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // Column-major, as the IDL has it: A times the swap matrix swaps A's columns.
    assert!(result.to_string().contains("[3.0,4.0,1.0,2.0]"), "{result}");
    grid.stop();

    let spans = collector.0.lock().unwrap().clone();
    let transaction = spans
        .iter()
        .find(|s| s.service == "ninf-call" && s.name == "transaction")
        .unwrap_or_else(|| panic!("no transaction span from ninf-call:\n{}", listing(&spans)));
    assert!(
        transaction.parent_span_id.is_empty(),
        "the transaction is the root"
    );
    let graph_id = transaction.attributes["graph_id"].clone();
    let trace: Vec<Received> = spans
        .iter()
        .filter(|s| s.trace_id == transaction.trace_id)
        .cloned()
        .collect();
    eprintln!("the transaction's trace:\n{}", listing(&trace));
    let grid_spans: Vec<&Received> = trace.iter().filter(|s| s.service == "ninf-up").collect();
    assert!(grid_spans.len() >= 8, "{}", listing(&trace));

    // Client → proxy → graph → metaserver and task → server → call, parent by parent.
    let run = rpc_under(&trace, "/ninf.v1.Proxy/Run", transaction);
    let graph = one(&trace, "graph", "graph_id", &graph_id);
    assert_eq!(graph.parent_span_id, run.span_id);
    let scheduling = rpc_under(&trace, "/ninf.v1.Scheduling/Schedule", graph);
    let schedule = one(&trace, "schedule", "graph_id", &graph_id);
    assert_eq!(schedule.parent_span_id, scheduling.span_id);
    let reporting = rpc_under(&trace, "/ninf.v1.Scheduling/ReportActuals", graph);
    let reported = one(&trace, "report_actuals", "graph_id", &graph_id);
    assert_eq!(reported.parent_span_id, reporting.span_id);
    let task = one(&trace, "task", "routine", "mmul");
    assert_eq!(task.parent_span_id, graph.span_id);
    let invoke = rpc_under(&trace, "/ninf.v1.Invoke/Call", task);
    let call = one(&trace, "call", "function", "mmul");
    assert_eq!(call.parent_span_id, invoke.span_id);
    assert!(
        call.attributes["owner"].ends_with(&format!("/graph-{graph_id}")),
        "{call:?}"
    );
    assert_eq!(invoke.attributes["rpc.service"], "ninf.v1.Invoke");

    // Nothing the grid did for this transaction went to another trace.
    for name in ["graph", "schedule", "task", "call"] {
        let elsewhere = spans
            .iter()
            .filter(|s| s.name == name && s.trace_id != transaction.trace_id)
            .count();
        assert_eq!(elsewhere, 0, "{name} spans outside the transaction's trace");
    }
}
