//! Every call the proxy makes to a compute server (invoke, get, stat, put, delete, renew,
//! health, probe), behind one trait: [`Cluster`] (the metaserver is behind its own,
//! [`crate::metaserver::Metaserver`]).
//! [`GrpcCluster`] is the real one; tests drive the proxy's graph execution and recovery
//! with an in-memory fake (`crate::fake`), with no processes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use futures_util::StreamExt;
use ninf_proto::net::auth::{AttachToken, Authorized, authorized};
use ninf_proto::net::tls::GridTls;
use ninf_proto::net::{ConnectionSettings, Keepalive};
use ninf_proto::probe::PathMeasurement;
use ninf_proto::v1::{self, argument_value::Value as WireValue, call_argument::Source};
use tokio::sync::Semaphore;
use tonic::Status;
use tonic::transport::Channel;

use crate::batching::{CallQueue, Waiting, answer_all, batchable, call_queued};
use crate::bulk::{BULK_THRESHOLD, BulkFailure, BulkPorts, inline_bytes};
use crate::config::{CALL_LIMIT, ProxyConfig};
use crate::connections::ConnectionCache;
use crate::data::upload::Chunks;
use crate::metaserver::Metaserver;

/// The compute servers, as the proxy uses them.
#[tonic::async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Runs one call on `server` (at most `max_in_flight_per_server` at a time per server).
    async fn invoke(&self, server: &str, call: v1::CallRequest) -> Result<v1::CallReply, Status>;
    /// Reads a stored object.
    async fn get(&self, object: &v1::ObjectRef) -> Result<v1::Array, Status>;
    /// Whether `server` still holds `object_id` (an error when it does not or cannot say).
    async fn stat(&self, server: &str, object_id: &str) -> Result<(), Status>;
    /// Stores `array` on `server` under `owner`.
    async fn put(
        &self,
        server: &str,
        owner: &str,
        array: v1::Array,
    ) -> Result<v1::ObjectRef, Status>;
    /// Stores the array of `spec` that `chunks` brings on `server` under `owner`, sending
    /// each chunk as it comes. Dropping the future before it ends stores nothing.
    async fn put_chunks(
        &self,
        server: &str,
        owner: &str,
        spec: &v1::DataSpec,
        chunks: Chunks,
    ) -> Result<v1::ObjectRef, Status> {
        let parts: Vec<bytes::Bytes> = chunks.collect().await;
        let mut data = BytesMut::with_capacity(parts.iter().map(|p| p.len()).sum());
        for part in &parts {
            data.extend_from_slice(part);
        }
        let array = v1::Array {
            element_type: spec.element_type,
            data: data.freeze(),
        };
        self.put(server, owner, array).await
    }
    /// Deletes everything `owner` stored on `server`.
    async fn delete_owner(&self, server: &str, owner: &str) -> Result<(), Status>;
    /// Extends `owner`'s lease on `server`.
    async fn renew(&self, server: &str, owner: &str) -> Result<(), Status>;
    /// Gives a stored object to another owner (a call's output becomes a data handle's).
    async fn adopt(&self, object: &v1::ObjectRef, owner: &str) -> Result<(), Status> {
        let _ = (object, owner);
        Err(Status::unimplemented("this cluster keeps no data handles"))
    }
    /// Deletes one stored object.
    async fn delete(&self, object: &v1::ObjectRef) -> Result<(), Status> {
        let _ = object;
        Err(Status::unimplemented("this cluster keeps no data handles"))
    }
    /// Has `server` copy `source` from its server into its own storage under `owner`.
    async fn copy_from(
        &self,
        server: &str,
        source: &v1::ObjectRef,
        owner: &str,
    ) -> Result<v1::ObjectRef, Status> {
        let _ = (server, source, owner);
        Err(Status::unimplemented("this cluster keeps no data handles"))
    }
    /// Whether `server` answers at all (it lists its modules).
    async fn health(&self, server: &str) -> Result<(), Status>;
    /// Measures the path to `server` with `bytes` of payload.
    async fn probe(&self, server: &str, bytes: usize) -> Result<PathMeasurement, Status>;
    /// Closes the connections to the servers once the calls on them end; the next call
    /// opens new ones. For an idle proxy: a connection's buffers grow to the most calls it
    /// ever carried.
    fn release_connections(&self) {}
}

/// Connections to one server and the calls it may have outstanding. One HTTP/2 connection
/// is driven by one task, which caps the calls per second it carries; tiny tasks need
/// several.
#[derive(Clone)]
struct ServerConnection {
    channels: Arc<Vec<Channel>>,
    next: Arc<AtomicUsize>,
    slots: Arc<Semaphore>,
    /// Small calls waiting for a slot, to leave in batches.
    queue: Arc<CallQueue>,
    /// Whether the server takes `CallBatch` (a server from before it does not), once known.
    batches: Arc<tokio::sync::OnceCell<bool>>,
    /// The grid's token, which servers require when the grid has one.
    token: AttachToken,
}

impl ServerConnection {
    /// The next connection, round robin, presenting the grid's token.
    fn channel(&self) -> Authorized {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        authorized(self.channels[i % self.channels.len()].clone(), &self.token)
    }

    fn invoke_client(&self) -> v1::invoke_client::InvokeClient<Authorized> {
        v1::invoke_client::InvokeClient::new(self.channel())
            .max_decoding_message_size(CALL_LIMIT)
            .max_encoding_message_size(CALL_LIMIT)
    }

    /// Whether the server takes `CallBatch`: asked once, with an empty batch, when the
    /// first batch forms. Until it has answered (it may be down for now), calls go alone.
    async fn takes_batches(&self) -> bool {
        let asked = self
            .batches
            .get_or_try_init(|| async {
                let empty = v1::CallBatchRequest { calls: Vec::new() };
                let mut client = self.invoke_client();
                // On a task of its own, outside every span: the question belongs to no
                // call, and stays out of the calls' traces.
                let answer = tokio::spawn(async move { client.call_batch(empty).await })
                    .await
                    .map_err(|e| Status::internal(format!("asking for batches failed: {e}")))?;
                match answer {
                    Ok(_) => Ok(true),
                    Err(status) if status.code() == tonic::Code::Unimplemented => Ok(false),
                    Err(status) => Err(status),
                }
            })
            .await;
        asked.is_ok_and(|takes| *takes)
    }

    /// The most calls that may leave on one slot: 1 once the server is known not to take
    /// batches.
    fn batch_limit(&self, configured: usize) -> usize {
        if self.batches.get() == Some(&false) {
            1
        } else {
            configured
        }
    }

    /// Sends queued calls, one alone or several as a batch, and hands out the answers. A
    /// request whose callers have all gone (their graphs cancelled or failed) is dropped,
    /// which cancels it on the server: the executable is killed and nothing is kept. A batch
    /// some of whose callers remain runs to its end, their neighbours' answers unread.
    async fn send(&self, batch: Vec<Waiting>) {
        if batch.len() == 1 || !self.takes_batches().await {
            for Waiting {
                call, mut answer, ..
            } in batch
            {
                let mut client = self.invoke_client();
                tokio::select! {
                    reply = client.call(call) => {
                        let _ = answer.send(reply.map(tonic::Response::into_inner));
                    }
                    () = answer.closed() => {}
                }
            }
            return;
        }
        let (calls, mut answers): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|w| (w.call, w.answer)).unzip();
        let mut client = self.invoke_client();
        let reply = {
            let everyone_left =
                futures_util::future::join_all(answers.iter_mut().map(|a| a.closed()));
            tokio::select! {
                reply = client.call_batch(v1::CallBatchRequest { calls }) => reply,
                _ = everyone_left => return,
            }
        };
        answer_all(answers, reply.map(tonic::Response::into_inner));
    }
}

/// The real cluster: gRPC to the servers and the metaserver.
pub struct GrpcCluster {
    servers: Mutex<ConnectionCache<ServerConnection>>,
    /// Asked for the servers' bulk ports.
    metaserver: Arc<dyn Metaserver>,
    token: AttachToken,
    tls: Option<GridTls>,
    settings: ConnectionSettings,
    connections_per_server: usize,
    max_in_flight_per_server: usize,
    max_calls_per_batch: usize,
    /// Servers' bulk ports, for calls with large arrays; `None`: every call by gRPC.
    bulk: Option<BulkPorts>,
    /// How often a call on a bulk port checks that its server still answers, and how long
    /// it waits for the answer (the HTTP/2 pings do this for gRPC calls).
    liveness: (std::time::Duration, std::time::Duration),
}

/// How the proxy's connections behave: the grid's settings with its configured keepalive.
fn connection_settings(config: &ProxyConfig) -> ConnectionSettings {
    ConnectionSettings {
        keepalive: Keepalive::from_seconds(
            config.keepalive_seconds,
            config.keepalive_timeout_seconds,
        ),
        ..ConnectionSettings::default()
    }
}

fn lazy_channel(
    address: &str,
    tls: Option<&GridTls>,
    settings: ConnectionSettings,
) -> Result<Channel, Status> {
    ninf_proto::net::connect_lazy(address, tls, settings)
        .map_err(|e| Status::invalid_argument(e.to_string()))
}

impl GrpcCluster {
    pub fn new(
        config: &ProxyConfig,
        token: Option<&str>,
        tls: Option<GridTls>,
        (metaserver, shared_regions): (Arc<dyn Metaserver>, Arc<crate::same_host::SharedRegions>),
    ) -> GrpcCluster {
        let settings = connection_settings(config);
        // The bulk port speaks plain TCP: a TLS grid keeps every call on gRPC.
        let bulk = (config.bulk_calls && tls.is_none())
            .then(|| BulkPorts::new(config.same_host_calls).with_lender(shared_regions));
        GrpcCluster {
            metaserver,
            servers: Mutex::new(ConnectionCache::new(config.max_connected_servers)),
            token: AttachToken::new(token),
            tls,
            settings,
            connections_per_server: config.connections_per_server.max(1),
            max_in_flight_per_server: config.max_in_flight_per_server.max(1),
            max_calls_per_batch: config.max_calls_per_batch.max(1),
            bulk,
            liveness: (
                std::time::Duration::from_secs_f64(config.keepalive_seconds.max(0.1)),
                std::time::Duration::from_secs_f64(config.keepalive_timeout_seconds.max(0.1)),
            ),
        }
    }

    fn server(&self, address: &str) -> Result<ServerConnection, Status> {
        let mut servers = ninf_proto::sync::lock(&self.servers);
        servers.get_or_open(address, || {
            let channels = (0..self.connections_per_server)
                .map(|_| lazy_channel(address, self.tls.as_ref(), self.settings))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(ServerConnection {
                channels: Arc::new(channels),
                next: Arc::default(),
                slots: Arc::new(Semaphore::new(self.max_in_flight_per_server)),
                queue: Arc::default(),
                batches: Arc::default(),
                token: self.token.clone(),
            })
        })
    }

    fn storage(
        &self,
        server: &str,
    ) -> Result<v1::storage_client::StorageClient<Authorized>, Status> {
        Ok(
            v1::storage_client::StorageClient::new(self.server(server)?.channel())
                .max_decoding_message_size(CALL_LIMIT)
                .max_encoding_message_size(CALL_LIMIT),
        )
    }
}

impl GrpcCluster {
    /// The bulk ports and `server`'s bulk address, when `call` carries enough arrays to
    /// take it; asks the metaserver for the servers' ports the first time.
    async fn bulk_port<'a>(
        &'a self,
        server: &str,
        call: &v1::CallRequest,
    ) -> Option<(&'a BulkPorts, String)> {
        let ports = self.bulk.as_ref()?;
        if inline_bytes(call) < BULK_THRESHOLD && call.output_place.is_none() {
            return None;
        }
        let route = match ports.route(server) {
            Some(route) => route,
            None => match self.server_status().await {
                Ok(status) => ports.learn(&status, server),
                Err(e) => {
                    tracing::debug!(error = %e, "no bulk ports from the metaserver");
                    return None;
                }
            },
        };
        (!route.is_empty()).then_some((ports, route))
    }

    /// A call on `server`'s bulk port, given up (as a gRPC call's lost pings would) when
    /// the server stops answering its health checks meanwhile.
    async fn call_bulk(
        &self,
        ports: &BulkPorts,
        server: &str,
        address: &str,
        call: v1::CallRequest,
    ) -> Result<v1::CallReply, BulkFailure> {
        let exchange = ports.call(server, address, call, self.token.header());
        let (every, patience) = self.liveness;
        let silence = async {
            loop {
                tokio::time::sleep(every).await;
                match tokio::time::timeout(patience, self.health(server)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(status)) => return status,
                    Err(_) => {
                        return Status::unavailable(format!(
                            "{server} did not answer for {patience:?} during a bulk call"
                        ));
                    }
                }
            }
        };
        tokio::select! {
            answer = exchange => answer,
            status = silence => Err(BulkFailure::Call(status)),
        }
    }

    /// A small call: queued, and sent with the calls queued with it when a slot frees.
    async fn invoke_queued(
        &self,
        connection: &ServerConnection,
        call: v1::CallRequest,
    ) -> Result<v1::CallReply, Status> {
        let max = connection.batch_limit(self.max_calls_per_batch);
        let sender = connection.clone();
        let send = move |batch| async move { sender.send(batch).await };
        call_queued(&connection.queue, &connection.slots, max, call, send).await
    }

    /// The servers as the metaserver lists them.
    async fn server_status(&self) -> Result<Vec<v1::ServerStatus>, Status> {
        Ok(self.metaserver.status(0).await?.servers)
    }
}

#[tonic::async_trait]
impl Cluster for GrpcCluster {
    async fn invoke(&self, server: &str, call: v1::CallRequest) -> Result<v1::CallReply, Status> {
        let connection = self.server(server)?;
        // A call lent an output region goes on the bulk path, where the region can be lent.
        if self.max_calls_per_batch > 1 && batchable(&call) && call.output_place.is_none() {
            return self.invoke_queued(&connection, call).await;
        }
        let _slot = connection.slots.clone().acquire_owned().await;
        let mut call = match self.bulk_port(server, &call).await {
            Some((ports, address)) => {
                match self.call_bulk(ports, server, &address, call.clone()).await {
                    Ok(reply) => return Ok(reply),
                    Err(BulkFailure::Call(status)) => return Err(status),
                    Err(BulkFailure::Connect(e)) => {
                        tracing::debug!(server, error = %e, "bulk port unreachable; calling by gRPC");
                        call
                    }
                }
            }
            None => call,
        };
        // Regions are lent only on a same-host socket.
        call.output_place = None;
        Ok(connection.invoke_client().call(call).await?.into_inner())
    }

    async fn get(&self, object: &v1::ObjectRef) -> Result<v1::Array, Status> {
        let request = v1::GetRequest {
            object_id: object.object_id.clone(),
        };
        let mut stream = self
            .storage(&object.server)?
            .get(request)
            .await?
            .into_inner();
        let mut data = BytesMut::new();
        let mut element_type = 0;
        while let Some(chunk) = stream.message().await? {
            if chunk.total_bytes > 0 {
                element_type = chunk.element_type;
                data.reserve(usize::try_from(chunk.total_bytes).unwrap_or(0));
            }
            data.extend_from_slice(&chunk.data);
        }
        Ok(v1::Array {
            element_type,
            data: data.freeze(),
        })
    }

    async fn stat(&self, server: &str, object_id: &str) -> Result<(), Status> {
        let request = v1::StatRequest {
            object_id: object_id.to_string(),
        };
        self.storage(server)?.stat(request).await?;
        Ok(())
    }

    async fn put(
        &self,
        server: &str,
        owner: &str,
        array: v1::Array,
    ) -> Result<v1::ObjectRef, Status> {
        if let Some(stored) = self.put_bulk(server, owner, &array).await {
            return stored;
        }
        let header = put_header(owner, array.element_type, array.data.len() as u64);
        let messages: Vec<v1::PutChunk> = std::iter::once(header.clone())
            .chain(
                ninf_proto::chunks::stream_chunks(&array.data)
                    .filter(|(_, data)| !data.is_empty())
                    .map(|(_, data)| v1::PutChunk {
                        data,
                        ..header.clone()
                    }),
            )
            .collect();
        self.store(server, tokio_stream::iter(messages)).await
    }

    async fn put_chunks(
        &self,
        server: &str,
        owner: &str,
        spec: &v1::DataSpec,
        chunks: Chunks,
    ) -> Result<v1::ObjectRef, Status> {
        let header = put_header(owner, spec.element_type, spec.bytes);
        // Through a channel from a task of its own: tonic's request future holding the
        // chunks' stream itself could not be proven Send. Dropping this future drops the
        // task with it (and so the request's stream, unfinished).
        let (send, receive) = tokio::sync::mpsc::channel(4);
        let template = header.clone();
        let forward = tokio::spawn(async move {
            let mut chunks = chunks;
            while let Some(data) = chunks.next().await {
                let message = v1::PutChunk {
                    data,
                    ..template.clone()
                };
                if send.send(message).await.is_err() {
                    return;
                }
            }
        });
        let _forwarding = AbortOnDrop(forward);
        let messages = futures_util::stream::once(futures_util::future::ready(header))
            .chain(tokio_stream::wrappers::ReceiverStream::new(receive));
        self.store(server, messages).await
    }

    async fn delete_owner(&self, server: &str, owner: &str) -> Result<(), Status> {
        let request = v1::DeleteOwnerRequest {
            owner: owner.to_string(),
        };
        self.storage(server)?.delete_owner(request).await?;
        Ok(())
    }

    async fn renew(&self, server: &str, owner: &str) -> Result<(), Status> {
        let request = v1::RenewRequest {
            owner: owner.to_string(),
        };
        self.storage(server)?.renew(request).await?;
        Ok(())
    }

    async fn adopt(&self, object: &v1::ObjectRef, owner: &str) -> Result<(), Status> {
        let request = v1::AdoptRequest {
            object_id: object.object_id.clone(),
            owner: owner.to_string(),
        };
        self.storage(&object.server)?.adopt(request).await?;
        Ok(())
    }

    async fn delete(&self, object: &v1::ObjectRef) -> Result<(), Status> {
        let request = v1::DeleteRequest {
            object_id: object.object_id.clone(),
        };
        self.storage(&object.server)?.delete(request).await?;
        Ok(())
    }

    async fn copy_from(
        &self,
        server: &str,
        source: &v1::ObjectRef,
        owner: &str,
    ) -> Result<v1::ObjectRef, Status> {
        let request = v1::CopyFromRequest {
            source: Some(source.clone()),
            owner: owner.to_string(),
        };
        let info = self.storage(server)?.copy_from(request).await?.into_inner();
        Ok(v1::ObjectRef {
            server: server.to_string(),
            object_id: info.object_id,
        })
    }

    async fn health(&self, server: &str) -> Result<(), Status> {
        let channel = self.server(server)?.channel();
        v1::interface_client::InterfaceClient::new(channel)
            .list(v1::ListRequest {})
            .await?;
        Ok(())
    }

    async fn probe(&self, server: &str, bytes: usize) -> Result<PathMeasurement, Status> {
        ninf_proto::probe::measure(self.server(server)?.channel(), bytes).await
    }

    fn release_connections(&self) {
        ninf_proto::sync::lock(&self.servers).clear();
        if let Some(ports) = &self.bulk {
            ports.release();
        }
    }
}

/// The first message of a put: it names the owner, type and length even when no bytes
/// follow; the others repeat it with their bytes.
fn put_header(owner: &str, element_type: i32, total_bytes: u64) -> v1::PutChunk {
    v1::PutChunk {
        owner: owner.to_string(),
        element_type,
        data: bytes::Bytes::new(),
        total_bytes,
    }
}

impl GrpcCluster {
    /// A put of `array` on `server`'s bulk port, or its same-host socket where the array is
    /// lent on if it lies in a client's region (docs/bulk-protocol.md, "Puts"), when it is
    /// large enough to take it. `None` when it cannot go there (no port, none reachable, or
    /// a server older than puts on the bulk path): it goes by gRPC then.
    async fn put_bulk(
        &self,
        server: &str,
        owner: &str,
        array: &v1::Array,
    ) -> Option<Result<v1::ObjectRef, Status>> {
        let value = v1::ArgumentValue {
            value: Some(WireValue::Array(array.clone())),
        };
        let put = v1::CallRequest {
            put: Some(v1::BulkPut {
                owner: owner.to_string(),
            }),
            arguments: vec![v1::CallArgument {
                source: Some(Source::Value(value)),
            }],
            ..Default::default()
        };
        let (ports, address) = self.bulk_port(server, &put).await?;
        match self.call_bulk(ports, server, &address, put).await {
            Ok(reply) => Some(stored_object(server, reply)),
            Err(BulkFailure::Connect(e)) => {
                tracing::debug!(server, error = %e, "bulk port unreachable; putting by gRPC");
                None
            }
            // An older server takes the frame for a call of a routine with no name.
            Err(BulkFailure::Call(status)) if status.code() == tonic::Code::NotFound => None,
            Err(BulkFailure::Call(status)) => Some(Err(status)),
        }
    }

    /// Stores the array `messages` carry on `server`.
    async fn store(
        &self,
        server: &str,
        messages: impl futures_util::Stream<Item = v1::PutChunk> + Send + 'static,
    ) -> Result<v1::ObjectRef, Status> {
        let mut storage = self.storage(server)?;
        let info = storage.put(messages).await?.into_inner();
        Ok(v1::ObjectRef {
            server: server.to_string(),
            object_id: info.object_id,
        })
    }
}

/// The object a bulk put's reply names, as stored on `server`.
fn stored_object(server: &str, reply: v1::CallReply) -> Result<v1::ObjectRef, Status> {
    match reply.outputs.into_iter().next().and_then(|o| o.result) {
        Some(v1::call_output::Result::Object(object)) => Ok(v1::ObjectRef {
            server: server.to_string(),
            object_id: object.object_id,
        }),
        other => Err(Status::internal(format!(
            "{server} answered a put with {other:?}, not the object it stored"
        ))),
    }
}

/// A task that ends when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
