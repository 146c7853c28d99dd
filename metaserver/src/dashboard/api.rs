//! The dashboard's JSON API and its live stream. Each handler reads the metaserver's state
//! or resource DB and answers with a view from [`super::views`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
use serde::Deserialize;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use super::views::{self, Overview};
use super::{Dashboard, gang};
use crate::events::Change;
use crate::unix_now;

/// The most graphs and events one request lists.
const MAX_LISTED: usize = 500;

/// An error as the API answers it: a status and a line of text.
fn failure(status: StatusCode, message: String) -> Response {
    (status, message).into_response()
}

pub async fn overview(State(dashboard): State<Arc<Dashboard>>) -> Json<Overview> {
    let metaserver = &dashboard.metaserver;
    let now = unix_now();
    let queues = metaserver
        .list_queues()
        .iter()
        .map(views::queue_view)
        .collect();
    let state = metaserver.state();
    let servers = state
        .registry
        .servers()
        .iter()
        .map(|s| views::server_view(&state.registry, s, now))
        .collect();
    Json(Overview {
        scheduler: metaserver.config.scheduler.clone(),
        predictor: metaserver.config.predictor.clone(),
        servers,
        running_graphs: state.running.len(),
        last_event: state.events.last_seq(),
        queues,
    })
}

pub async fn network(State(dashboard): State<Arc<Dashboard>>) -> Json<views::NetworkMatrix> {
    let state = dashboard.metaserver.state();
    let servers: Vec<String> = state
        .registry
        .servers()
        .iter()
        .map(|s| s.address.clone())
        .collect();
    Json(views::network_matrix(
        &servers,
        &state.registry.latest_links(),
    ))
}

#[derive(Deserialize)]
pub struct Limit {
    limit: Option<usize>,
}

pub async fn graphs(
    State(dashboard): State<Arc<Dashboard>>,
    Query(Limit { limit }): Query<Limit>,
) -> Response {
    let limit = limit.unwrap_or(50).min(MAX_LISTED) as u32;
    match dashboard.metaserver.db.recent_graphs(limit).await {
        Ok(graphs) => {
            Json(graphs.iter().map(views::graph_view).collect::<Vec<_>>()).into_response()
        }
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

pub async fn graph(State(dashboard): State<Arc<Dashboard>>, Path(id): Path<u64>) -> Response {
    let db = &dashboard.metaserver.db;
    let loaded = async {
        let Some(summary) = db.graph(id).await? else {
            return Ok(None);
        };
        let placements = db.placements(id).await?;
        let edges = db.graph_edges(id).await?;
        Ok::<_, crate::db::DbError>(Some(views::gantt(
            views::graph_view(&summary),
            placements,
            &edges,
        )))
    };
    match loaded.await {
        Ok(Some(gantt)) => Json(gantt).into_response(),
        Ok(None) => failure(
            StatusCode::NOT_FOUND,
            format!("no graph {id} is kept (the oldest are pruned)"),
        ),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

pub async fn data(State(dashboard): State<Arc<Dashboard>>) -> Response {
    let metaserver = &dashboard.metaserver;
    let caps: Vec<(String, u64)> = {
        let state = metaserver.state();
        state
            .registry
            .servers()
            .iter()
            .map(|s| (s.address.clone(), s.info.data_cap_bytes))
            .collect()
    };
    match metaserver.all_data().await {
        Ok(all) => Json(super::data::data_page(&all, &caps, unix_now())).into_response(),
        Err(e) => failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

pub async fn gang_tables(State(dashboard): State<Arc<Dashboard>>) -> Json<Vec<views::GangView>> {
    Json(gang::tables(&dashboard).await)
}

#[derive(Deserialize)]
pub struct Since {
    since: Option<u64>,
    limit: Option<usize>,
}

pub async fn events(
    State(dashboard): State<Arc<Dashboard>>,
    Query(Since { since, limit }): Query<Since>,
) -> Json<Vec<crate::events::Event>> {
    let limit = limit.unwrap_or(200).min(MAX_LISTED);
    Json(dashboard.metaserver.events_since(since.unwrap_or(0), limit))
}

/// Server-sent events: a `change` for every event logged and every graph scheduled or
/// ended, and a `tick` every two seconds (loads and gang slots move without events).
pub async fn stream(
    State(dashboard): State<Arc<Dashboard>>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let changes = BroadcastStream::new(dashboard.metaserver.subscribe()).map(|change| {
        let data = match change {
            Ok(change) => serde_json::to_string(&change).unwrap_or_default(),
            // A slow page missed some: it reloads everything anyway.
            Err(BroadcastStreamRecvError::Lagged(_)) => {
                serde_json::to_string(&Change::Graph { id: 0 }).unwrap_or_default()
            }
        };
        Ok(SseEvent::default().event("change").data(data))
    });
    let ticks =
        tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(Duration::from_secs(2)))
            .map(|_| Ok(SseEvent::default().event("tick").data("{}")));
    Sse::new(changes.merge(ticks)).keep_alive(KeepAlive::default())
}
