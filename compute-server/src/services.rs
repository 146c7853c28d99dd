//! The gRPC services: thin shells that translate between protobuf and the server's state.

use std::pin::Pin;
use std::sync::Arc;

use ninf_proto::descriptor::element_type_to_proto;
use ninf_proto::v1;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use crate::state::ServerState;
use crate::storage::region::Arriving;
use crate::storage::{ObjectInfo, StorageError};

/// Objects are streamed in chunks of this size.
const CHUNK_BYTES: usize = 1 << 20;

#[derive(Clone)]
pub struct InterfaceService(pub Arc<ServerState>);

#[tonic::async_trait]
impl v1::interface_server::Interface for InterfaceService {
    async fn describe(
        &self,
        request: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::FunctionInterface>, Status> {
        let name = request.into_inner().function;
        let routine = crate::invoke::find(&self.0, &name)?;
        Ok(Response::new(routine.interface().into()))
    }

    async fn list(
        &self,
        _: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        Ok(Response::new(v1::ListResponse {
            modules: self
                .0
                .catalog()
                .modules
                .iter()
                .map(|m| (&m.interface).into())
                .collect(),
        }))
    }
}

#[derive(Clone)]
pub struct InvokeService(pub Arc<ServerState>);

#[tonic::async_trait]
impl v1::invoke_server::Invoke for InvokeService {
    async fn call(
        &self,
        request: Request<v1::CallRequest>,
    ) -> Result<Response<v1::CallReply>, Status> {
        let request = request.into_inner();
        let function = request.function.clone();
        let bytes_in = prost::Message::encoded_len(&request) as u64;
        let started = std::time::Instant::now();
        let state = self.0.clone();
        // The call's span names its owner: a transaction's owner is its proxy and graph.
        let span = tracing::info_span!("call", %function, owner = %request.owner);
        let outcome = if request.call_key.is_empty() {
            until_the_caller_leaves(
                async move { crate::invoke::call(&state, request).await },
                span,
            )
            .await
            .and_then(|outcome| outcome)
        } else {
            self.outliving_the_caller(request, span).await
        };
        self.record(
            &function,
            &outcome,
            started.elapsed().as_secs_f64(),
            bytes_in,
        );
        outcome.map(Response::new)
    }

    async fn call_batch(
        &self,
        request: Request<v1::CallBatchRequest>,
    ) -> Result<Response<v1::CallBatchReply>, Status> {
        let calls = request.into_inner().calls;
        if !calls.is_empty() {
            // An empty one only asks whether the server knows batches.
            self.0.metrics.call_batch();
        }
        let described: Vec<(String, u64)> = calls
            .iter()
            .map(|c| (c.function.clone(), prost::Message::encoded_len(c) as u64))
            .collect();
        let started = std::time::Instant::now();
        let state = self.0.clone();
        let span = tracing::info_span!("call_batch", calls = calls.len());
        let outcomes = until_the_caller_leaves(
            async move { crate::invoke::call_batch(&state, calls).await },
            span,
        )
        .await?;
        // Each call's own time when it ran; a failed one is charged the batch's average.
        let average = started.elapsed().as_secs_f64() / outcomes.len().max(1) as f64;
        let mut results = Vec::with_capacity(outcomes.len());
        for ((function, bytes_in), outcome) in described.iter().zip(outcomes) {
            let seconds = outcome
                .as_ref()
                .ok()
                .and_then(|reply| reply.timing)
                .map_or(average, |t| {
                    t.fetch_seconds + t.queue_seconds + t.compute_seconds
                });
            self.record(function, &outcome, seconds, *bytes_in);
            results.push(v1::CallResult {
                result: Some(match outcome {
                    Ok(reply) => v1::call_result::Result::Reply(reply),
                    Err(status) => v1::call_result::Result::Error(v1::CallError {
                        code: status.code() as i32,
                        message: status.message().to_string(),
                    }),
                }),
            });
        }
        Ok(Response::new(v1::CallBatchReply { results }))
    }
}

impl InvokeService {
    /// Counts a call in the server's metrics and logs how it ended.
    fn record(
        &self,
        function: &str,
        outcome: &Result<v1::CallReply, Status>,
        seconds: f64,
        bytes_in: u64,
    ) {
        let bytes_out = outcome
            .as_ref()
            .map_or(0, |reply| prost::Message::encoded_len(reply) as u64);
        let traffic = (crate::metrics::Path::Grpc, bytes_in, bytes_out);
        self.0
            .metrics
            .call(function, outcome.is_ok(), seconds, traffic);
        match outcome {
            Ok(reply) => tracing::debug!(%function, status = reply.status, "call done"),
            Err(status) => {
                tracing::info!(%function, code = ?status.code(), message = status.message(), "call failed")
            }
        }
    }
}

impl InvokeService {
    /// A keyed call: answered by the run an earlier request with its key started, if there
    /// is one, else run on its own, going on if the caller goes away.
    async fn outliving_the_caller(
        &self,
        request: v1::CallRequest,
        span: tracing::Span,
    ) -> Result<v1::CallReply, Status> {
        let (key, owner) = (request.call_key.clone(), request.owner.clone());
        let state = self.0.clone();
        let work = async move { crate::invoke::call(&state, request).await }.instrument(span);
        let answer = self.0.detached.call(key, owner, work).await;
        if answer.rejoined {
            self.0.metrics.call_rejoined();
        }
        answer.outcome
    }
}

/// Runs `work` on its own task, cancelled when the caller goes away (a proxy whose client
/// cancelled, or that died): the executable is killed and replaced, the gang table lets the
/// job go, and nothing is stored for a run that no longer exists.
async fn until_the_caller_leaves<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
    span: tracing::Span,
) -> Result<T, Status> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let on_drop = cancel.clone().drop_guard();
    let outcome = tokio::spawn(
        async move {
            tokio::select! {
                outcome = work => Ok(outcome),
                () = cancel.cancelled() => Err(Status::cancelled("the caller went away")),
            }
        }
        .instrument(span),
    )
    .await
    .map_err(|e| Status::internal(format!("call task failed: {e}")))?;
    on_drop.disarm();
    outcome
}

#[derive(Clone)]
pub struct StorageService(pub Arc<ServerState>);

fn info_to_proto(info: ObjectInfo) -> v1::ObjectInfo {
    v1::ObjectInfo {
        object_id: info.id,
        owner: info.owner,
        element_type: element_type_to_proto(info.element_type).into(),
        bytes: info.bytes,
        spilled: info.spilled,
    }
}

fn storage_status(error: StorageError) -> Status {
    error.status()
}

type ChunkStream = Pin<Box<dyn Stream<Item = Result<v1::DataChunk, Status>> + Send>>;

#[tonic::async_trait]
impl v1::storage_server::Storage for StorageService {
    async fn put(
        &self,
        request: Request<Streaming<v1::PutChunk>>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        let mut stream = request.into_inner();
        let mut header: Option<(String, i32, u64)> = None;
        let region = self.0.store_region.as_ref();
        let mut data = Arriving::Heap(Default::default());
        while let Some(chunk) = stream.message().await? {
            if header.is_none() {
                header = Some((chunk.owner.clone(), chunk.element_type, chunk.total_bytes));
                if chunk.total_bytes <= self.0.max_request_bytes {
                    data = Arriving::new(region, chunk.total_bytes);
                }
            }
            if (data.len() + chunk.data.len()) as u64 > self.0.max_request_bytes {
                return Err(Status::resource_exhausted(format!(
                    "object exceeds this server's limit of {} bytes",
                    self.0.max_request_bytes
                )));
            }
            data.extend(&chunk.data).map_err(Status::invalid_argument)?;
        }
        let (owner, element_type, total_bytes) = header.unwrap_or_default();
        // A sender whose stream ended early (it stopped before all its bytes came) must
        // not leave part of an array stored as the whole of it (0: no length announced).
        if total_bytes > 0 && data.len() as u64 != total_bytes {
            return Err(Status::invalid_argument(format!(
                "{} bytes came of the {total_bytes} the first chunk announced",
                data.len()
            )));
        }
        let element_type = crate::storage::put::element_type(element_type).ok_or_else(|| {
            Status::invalid_argument("the first chunk must name an array element type")
        })?;
        let info = crate::storage::put::store(&self.0, (&owner, element_type), data, "grpc")?;
        Ok(Response::new(info_to_proto(info)))
    }

    type GetStream = ChunkStream;

    async fn get(&self, request: Request<v1::GetRequest>) -> Result<Response<ChunkStream>, Status> {
        let id = request.into_inner().object_id;
        let (info, data) = self.0.store.get(&id).map_err(storage_status)?;
        let element_type: i32 = element_type_to_proto(info.element_type).into();
        let total = data.len();
        let chunks: Vec<Result<v1::DataChunk, Status>> = (0..total.max(1))
            .step_by(CHUNK_BYTES)
            .enumerate()
            .map(|(i, start)| {
                let end = (start + CHUNK_BYTES).min(total);
                Ok(v1::DataChunk {
                    element_type: if i == 0 { element_type } else { 0 },
                    total_bytes: if i == 0 { total as u64 } else { 0 },
                    data: data.slice(start.min(total)..end),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
    }

    async fn stat(
        &self,
        request: Request<v1::StatRequest>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        let info = self
            .0
            .store
            .stat(&request.into_inner().object_id)
            .map_err(storage_status)?;
        Ok(Response::new(info_to_proto(info)))
    }

    async fn delete(
        &self,
        request: Request<v1::DeleteRequest>,
    ) -> Result<Response<v1::DeleteReply>, Status> {
        let bytes = self
            .0
            .store
            .delete(&request.into_inner().object_id)
            .map_err(storage_status)?;
        Ok(Response::new(v1::DeleteReply { objects: 1, bytes }))
    }

    async fn delete_owner(
        &self,
        request: Request<v1::DeleteOwnerRequest>,
    ) -> Result<Response<v1::DeleteReply>, Status> {
        let owner = request.into_inner().owner;
        self.0.detached.forget_owner(&owner);
        let (objects, bytes) = self.0.store.delete_owner(&owner);
        Ok(Response::new(v1::DeleteReply { objects, bytes }))
    }

    async fn adopt(
        &self,
        request: Request<v1::AdoptRequest>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        let request = request.into_inner();
        if request.owner.is_empty() {
            return Err(Status::invalid_argument("an adoption must name an owner"));
        }
        let info = self
            .0
            .store
            .adopt(&request.object_id, &request.owner)
            .map_err(storage_status)?;
        // The new owner's lease starts now.
        self.0.touch(&request.owner);
        Ok(Response::new(info_to_proto(info)))
    }

    async fn copy_from(
        &self,
        request: Request<v1::CopyFromRequest>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        let request = request.into_inner();
        let Some(source) = request.source.filter(|s| !s.object_id.is_empty()) else {
            return Err(Status::invalid_argument(
                "a copy must name the object it copies",
            ));
        };
        if request.owner.is_empty() {
            return Err(Status::invalid_argument("a copy must name an owner"));
        }
        let array = crate::invoke::fetch(&self.0, &source).await.map_err(|e| {
            Status::failed_precondition(format!(
                "cannot fetch object `{}` from {}: {e}",
                source.object_id, source.server
            ))
        })?;
        let kept = crate::invoke::keep_output(&self.0, &request.owner, &array, false)?;
        let info = self.0.store.stat(&kept.object_id).map_err(storage_status)?;
        Ok(Response::new(info_to_proto(info)))
    }

    async fn renew(
        &self,
        request: Request<v1::RenewRequest>,
    ) -> Result<Response<v1::RenewReply>, Status> {
        let owner = request.into_inner().owner;
        if owner.is_empty() {
            return Err(Status::invalid_argument("a renewal must name an owner"));
        }
        Ok(Response::new(v1::RenewReply {
            objects: self.0.touch(&owner),
            lease_seconds: self.0.lease.as_secs_f64(),
        }))
    }
}

#[derive(Clone)]
pub struct MonitorService(pub Arc<ServerState>);

#[tonic::async_trait]
impl v1::monitor_server::Monitor for MonitorService {
    async fn load(&self, _: Request<v1::LoadRequest>) -> Result<Response<v1::LoadSample>, Status> {
        Ok(Response::new(self.0.sample_load()))
    }

    async fn info(&self, _: Request<v1::InfoRequest>) -> Result<Response<v1::ServerInfo>, Status> {
        Ok(Response::new(self.0.info.clone()))
    }

    async fn probe(
        &self,
        request: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeReply>, Status> {
        Ok(Response::new(v1::ProbeReply {
            received_bytes: request.into_inner().payload.len() as u64,
        }))
    }
}
