//! The grid's dashboard, served by the metaserver on `dashboard_listen`: pages for servers
//! (speed, processors, state, modules, load sparkline), the network (a heat map of measured
//! throughput), graphs (recent transactions; a graph's Gantt chart of predicted against
//! actual times, edges that crossed servers highlighted), data kept on the grid (by server,
//! by owner, by handle), gang time tables and events. The
//! page, its script and its style are compiled into the binary (hand-drawn SVG, no chart
//! library, no Node toolchain); it updates live from server-sent events.
//!
//! [`access`] decides who may open it, [`api`] answers its JSON requests from the pure
//! [`views`] and [`data`], and [`gang`] asks servers for their time tables.

pub mod access;
pub mod api;
pub mod data;
pub mod gang;
mod shared;
pub mod views;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use ninf_proto::net::auth::CheckToken;
use ninf_telemetry::HttpEndpoint;

use crate::{Metaserver, MetaserverError};
pub use shared::Dashboard;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// The dashboard's routes, behind the token check.
pub fn router(metaserver: Arc<Metaserver>, https: bool) -> Router {
    let guard = access::Guard {
        check: CheckToken::new("dashboard", metaserver.token.as_deref()),
        https,
    };
    let dashboard = Arc::new(Dashboard::new(metaserver));
    Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/assets/style.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .route("/api/overview", get(api::overview))
        .route("/api/network", get(api::network))
        .route("/api/graphs", get(api::graphs))
        .route("/api/graphs/{id}", get(api::graph))
        .route("/api/data", get(api::data))
        .route("/api/gang", get(api::gang_tables))
        .route("/api/events", get(api::events))
        .route("/api/stream", get(api::stream))
        .with_state(dashboard)
        .layer(axum::middleware::from_fn_with_state(guard, access::guard))
}

/// Serves the dashboard on `listen`: HTTPS with the metaserver's certificate when it has
/// `[tls]`, plain HTTP otherwise.
pub async fn serve(
    metaserver: Arc<Metaserver>,
    listen: &str,
) -> Result<HttpEndpoint, MetaserverError> {
    let tls = match &metaserver.config.tls {
        Some(files) => Some(ninf_telemetry::http::https_config(files).map_err(|e| {
            MetaserverError::Config(crate::config::ConfigError::Invalid(format!(
                "dashboard TLS: {e}"
            )))
        })?),
        None => None,
    };
    let open = metaserver.token.is_none();
    let endpoint =
        ninf_telemetry::serve_router(listen, router(metaserver, tls.is_some()), tls).await?;
    let loopback = endpoint
        .address
        .parse::<SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    if open && !loopback {
        tracing::warn!(address = %endpoint.address, "the dashboard is reachable from other hosts and the grid has no token: anyone there can read it");
    }
    tracing::info!(url = %endpoint.url(), "dashboard serving");
    Ok(endpoint)
}
