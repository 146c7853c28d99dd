//! The gRPC shell around [`crate::Proxy`].

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use ninf_proto::net::answer;
use ninf_proto::v1;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::Proxy;
use crate::admission::Admitted;
use crate::data::upload::Upload;
use crate::progress::ProgressSink;
use crate::same_host::{OutputRegion, SharedRegions};

pub struct ProxyService(pub Arc<Proxy>);

/// Updates a followed run sends: progress, then the reply or the error.
type UpdateStream = Pin<Box<dyn Stream<Item = Result<v1::RunUpdate, Status>> + Send>>;

/// A run request whose shared arrays are resolved, how many bytes they held, and the
/// region its reply's large arrays go into, if the client gave one.
struct Shared {
    request: v1::RunRequest,
    shared: u64,
    output: Option<OutputRegion>,
}

impl Shared {
    fn of(request: Request<Shared>) -> Shared {
        request.into_inner()
    }
}

impl ProxyService {
    /// The request with its shared arrays in place (their regions leased until it is
    /// dropped), keeping its metadata for admission.
    #[allow(clippy::result_large_err)]
    fn resolve(&self, request: Request<v1::RunRequest>) -> Result<Request<Shared>, Status> {
        let (metadata, extensions, mut request) = request.into_parts();
        let regions = &self.0.shared_regions;
        let limit = self.0.config.max_request_bytes;
        let shared = regions.resolve(&mut request, limit).map_err(answer)?;
        let output = regions.lease_output(&request).map_err(answer)?;
        let shared = Shared {
            request,
            shared,
            output,
        };
        Ok(Request::from_parts(metadata, extensions, shared))
    }

    /// Admits a run request from its client (its limits), waiting in the proxy's queue
    /// while the client's running transactions hold them, or says why not.
    async fn admit(&self, request: &Request<Shared>) -> Result<Admitted, Status> {
        let client = client_of(request);
        let stored = request
            .get_ref()
            .request
            .graph
            .as_ref()
            .map_or(0, crate::admission::stored_bytes);
        self.0
            .admission
            .admit_or_wait(&client, stored)
            .await
            .inspect_err(|status| {
                tracing::warn!(%client, error = %status.message(), "transaction refused");
            })
    }
}

/// Who sent a request: the identity its client library sends, on the caller's address (an
/// identity cannot pass for a client on another host); the address alone without one.
fn client_of<T>(request: &Request<T>) -> String {
    let address = request
        .remote_addr()
        .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string());
    let identity = request
        .metadata()
        .get(ninf_proto::net::CLIENT_ID_METADATA)
        .and_then(|v| v.to_str().ok())
        .map(|id| {
            id.chars()
                .filter(|c| c.is_ascii_graphic())
                .take(ninf_proto::net::CLIENT_ID_MAX)
                .collect::<String>()
        })
        .filter(|id| !id.is_empty());
    match identity {
        Some(id) => format!("{address}/{id}"),
        None => address,
    }
}

/// The span of one graph's run at the proxy (its id recorded once the metaserver placed it):
/// a child of the client's `transaction` when the request carried its trace context. At
/// `info` when the proxy exports traces; at `debug` otherwise, since each enabled span keeps
/// a formatted copy of its fields in the subscriber's slab, and those of a burst of 100
/// transactions stayed scattered over the heap (0.6-0.8 MiB). The events logged while a
/// graph runs name it themselves (`graph=PROXY/graph-ID`).
fn graph_span() -> tracing::Span {
    if ninf_proto::net::trace::enabled() {
        tracing::info_span!("graph", graph_id = tracing::field::Empty)
    } else {
        tracing::debug_span!("graph", graph_id = tracing::field::Empty)
    }
}

/// Runs an admitted graph, counting the client's bytes and logging a failure.
async fn run_admitted(
    proxy: &Proxy,
    request: Shared,
    mut admitted: Admitted,
    progress: &ProgressSink,
    cancel: &CancellationToken,
) -> Result<v1::RunReply, Status> {
    let Shared {
        request,
        shared,
        output,
    } = request;
    let bytes_in = (prost::Message::encoded_len(&request) as u64).saturating_sub(shared);
    proxy.metrics.shared_bytes("in", shared);
    let mut result = proxy
        .run_graph(request, &mut admitted, progress, cancel)
        .instrument(graph_span())
        .await;
    if let (Ok(reply), Some(output)) = (&mut result, output) {
        proxy
            .metrics
            .shared_bytes("out", output.write_outputs(reply));
    }
    let bytes_out = result
        .as_ref()
        .map_or(0, |reply| prost::Message::encoded_len(reply) as u64);
    proxy.metrics.client_bytes(bytes_in, bytes_out);
    if let Err(status) = &result {
        tracing::info!(code = ?status.code(), error = %status.message(), "graph failed");
    }
    result
}

/// Runs an admitted graph in a task of its own, so that a client going away (the request's
/// future dropped) cancels it and its clean-up still runs to the end.
async fn run_detached(
    proxy: Arc<Proxy>,
    request: Shared,
    admitted: Admitted,
) -> Result<v1::RunReply, Status> {
    let cancel = CancellationToken::new();
    let on_drop = cancel.clone().drop_guard();
    let run = tokio::spawn(
        async move { run_admitted(&proxy, request, admitted, &ProgressSink::none(), &cancel).await }
            .in_current_span(),
    );
    let result = run
        .await
        .unwrap_or_else(|e| Err(Status::internal(format!("the run's task ended: {e}"))));
    on_drop.disarm();
    result
}

/// Runs the graph, sending its progress as it changes and then the reply. A client that goes
/// away cancels the run, as it does a unary `Run`.
async fn follow(
    proxy: Arc<Proxy>,
    request: Shared,
    admitted: Admitted,
    updates: mpsc::Sender<Result<v1::RunUpdate, Status>>,
) {
    let (sink, mut progress) = ProgressSink::channel();
    let cancel = CancellationToken::new();
    let run = run_admitted(&proxy, request, admitted, &sink, &cancel);
    tokio::pin!(run);
    let result = loop {
        tokio::select! {
            result = &mut run => break result,
            () = updates.closed(), if !cancel.is_cancelled() => {
                tracing::info!("the client stopped following its run; it is cancelled");
                cancel.cancel();
            }
            Ok(()) = progress.changed() => {
                let update = v1::run_update::Update::Progress(*progress.borrow_and_update());
                if updates.send(Ok(v1::RunUpdate { update: Some(update) })).await.is_err() {
                    cancel.cancel();
                }
            }
        }
    };
    let last = result.map_err(answer).map(|reply| v1::RunUpdate {
        update: Some(v1::run_update::Update::Reply(reply)),
    });
    let _ = updates.send(last).await;
}

#[tonic::async_trait]
impl v1::proxy_server::Proxy for ProxyService {
    async fn run(
        &self,
        request: Request<v1::RunRequest>,
    ) -> Result<Response<v1::RunReply>, Status> {
        let request = self.resolve(request)?;
        let admitted = self.admit(&request).await.map_err(answer)?;
        let reply = run_detached(self.0.clone(), Shared::of(request), admitted)
            .await
            .map_err(answer)?;
        Ok(Response::new(reply))
    }

    type RunWithProgressStream = UpdateStream;

    async fn run_with_progress(
        &self,
        request: Request<v1::RunRequest>,
    ) -> Result<Response<UpdateStream>, Status> {
        let request = self.resolve(request)?;
        let admitted = self.admit(&request).await.map_err(answer)?;
        let (updates, received) = mpsc::channel(4);
        tokio::spawn(
            follow(self.0.clone(), Shared::of(request), admitted, updates).in_current_span(),
        );
        let stream = tokio_stream::wrappers::ReceiverStream::new(received);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn describe(
        &self,
        request: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::FunctionInterface>, Status> {
        Ok(Response::new(
            self.0.describe(request.into_inner().function).await?,
        ))
    }

    async fn same_host(
        &self,
        _request: Request<v1::SameHostRequest>,
    ) -> Result<Response<v1::SameHostReply>, Status> {
        Ok(Response::new(v1::SameHostReply {
            socket: self.0.same_host_socket().unwrap_or_default().to_string(),
        }))
    }

    async fn functions(
        &self,
        _request: Request<v1::FunctionsRequest>,
    ) -> Result<Response<v1::FunctionsReply>, Status> {
        Ok(Response::new(v1::FunctionsReply {
            functions: self.0.functions().await?,
        }))
    }

    async fn put_data(
        &self,
        request: Request<tonic::Streaming<v1::DataUpload>>,
    ) -> Result<Response<v1::DataInfo>, Status> {
        let owner = client_of(&request);
        let limit = self.0.config.max_request_bytes;
        let (spec, upload, shared) =
            receive_upload(request.into_inner(), limit, &self.0.shared_regions)
                .await
                .map_err(answer)?;
        self.0.metrics.shared_bytes("in", shared);
        let info = self
            .0
            .put_data(&owner, spec, upload)
            .await
            .map_err(answer)?;
        Ok(Response::new(info))
    }

    type GetDataStream = Pin<Box<dyn Stream<Item = Result<v1::DataChunk, Status>> + Send>>;

    async fn get_data(
        &self,
        request: Request<v1::DataHandle>,
    ) -> Result<Response<Self::GetDataStream>, Status> {
        let owner = client_of(&request);
        let id = request.into_inner().id;
        let (_, array) = self.0.get_data(&owner, &id).await.map_err(answer)?;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            data_chunks(array).into_iter().map(Ok),
        ))))
    }

    async fn free_data(
        &self,
        request: Request<v1::DataHandle>,
    ) -> Result<Response<v1::DataInfo>, Status> {
        let owner = client_of(&request);
        let id = request.into_inner().id;
        Ok(Response::new(
            self.0.free_data(&owner, &id).await.map_err(answer)?,
        ))
    }

    async fn list_data(
        &self,
        request: Request<v1::ListDataRequest>,
    ) -> Result<Response<v1::ListDataReply>, Status> {
        let owner = client_of(&request);
        let ids = request.into_inner().ids;
        let data = if ids.is_empty() {
            self.0.list_data(&owner).await.map_err(answer)?
        } else {
            self.0.find_data(&owner, &ids).await.map_err(answer)?
        };
        Ok(Response::new(v1::ListDataReply { data }))
    }

    async fn renew_data(
        &self,
        request: Request<v1::RenewDataRequest>,
    ) -> Result<Response<v1::RenewDataReply>, Status> {
        let owner = client_of(&request);
        let ids = request.into_inner().ids;
        Ok(Response::new(
            self.0.renew_data(&owner, ids).await.map_err(answer)?,
        ))
    }
}

/// A put's spec and bytes, at most `limit` of them: streamed by the client, or lying in a
/// region it shared with the proxy (then also how many bytes, for the metrics).
async fn receive_upload(
    mut stream: tonic::Streaming<v1::DataUpload>,
    limit: usize,
    regions: &SharedRegions,
) -> Result<(v1::DataSpec, Upload, u64), Status> {
    let first = stream
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("a put must send its spec first"))?;
    // Leased before any check, so that a refused put still says `released` to its client.
    let shared = first
        .shared
        .as_ref()
        .map(|shared| regions.resolve_array(shared))
        .transpose()?;
    let spec = first
        .spec
        .ok_or_else(|| Status::invalid_argument("a put must send its spec first"))?;
    if spec.bytes > limit as u64 {
        return Err(Status::resource_exhausted(format!(
            "a put of {} bytes is over the proxy's limit of {limit} bytes",
            spec.bytes
        )));
    }
    let bytes = if spec.empty { 0 } else { spec.bytes };
    let Some(shared) = shared else {
        let rest = stream.map(|upload| upload.map(|u| u.data));
        return Ok((spec, Upload::receive(bytes, first.data, rest), 0));
    };
    if shared.len() as u64 != bytes || !first.data.is_empty() {
        return Err(Status::invalid_argument(format!(
            "a put of {bytes} bytes named {} bytes in shared memory and sent {} more",
            shared.len(),
            first.data.len()
        )));
    }
    if stream.message().await?.is_some() {
        return Err(Status::invalid_argument(
            "a put in shared memory sends nothing after its first message",
        ));
    }
    Ok((spec, Upload::whole(shared), bytes))
}

/// An array as the chunks a stream of it carries (the first with its type and size).
fn data_chunks(array: v1::Array) -> Vec<v1::DataChunk> {
    let total = array.data.len() as u64;
    ninf_proto::chunks::stream_chunks(&array.data)
        .map(|(offset, data)| v1::DataChunk {
            element_type: if offset == 0 { array.element_type } else { 0 },
            total_bytes: if offset == 0 { total } else { 0 },
            data,
        })
        .collect()
}
