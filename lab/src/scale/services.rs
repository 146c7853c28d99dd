//! What an emulated compute server answers, for every server one emulator process plays: the
//! routines it lists, calls (answered at once, or after `call_ms`, with no compute), probes,
//! and the storage requests a proxy sends after a graph (it stores nothing). Only loopback
//! peers are answered: the emulator listens on every address so that each of its servers
//! can have one of 127.0.0.0/8.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ninf_proto::v1;
use tonic::{Request, Response, Status, Streaming};

/// What every emulated server of one process shares.
pub struct Emulated {
    pub modules: Vec<v1::ModuleInterface>,
    /// How long a call takes (0: answered at once).
    pub call_ms: u64,
    pub calls: AtomicU64,
}

fn loopback_only<T>(request: &Request<T>) -> Result<(), Status> {
    match request.remote_addr() {
        Some(peer) if peer.ip().is_loopback() => Ok(()),
        _ => Err(Status::permission_denied(
            "an emulated server answers this host only",
        )),
    }
}

#[derive(Clone)]
pub struct Services(pub Arc<Emulated>);

impl Services {
    async fn answer(&self) -> v1::CallReply {
        self.0.calls.fetch_add(1, Ordering::Relaxed);
        if self.0.call_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.0.call_ms)).await;
        }
        v1::CallReply {
            timing: Some(v1::CallTiming {
                compute_seconds: self.0.call_ms as f64 / 1000.0,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

#[tonic::async_trait]
impl v1::interface_server::Interface for Services {
    async fn describe(
        &self,
        request: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::FunctionInterface>, Status> {
        loopback_only(&request)?;
        let name = request.into_inner().function;
        self.0
            .modules
            .iter()
            .flat_map(|m| &m.functions)
            .find(|f| f.name == name)
            .cloned()
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("no routine `{name}`")))
    }

    async fn list(
        &self,
        request: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        loopback_only(&request)?;
        Ok(Response::new(v1::ListResponse {
            modules: self.0.modules.clone(),
        }))
    }
}

#[tonic::async_trait]
impl v1::invoke_server::Invoke for Services {
    async fn call(
        &self,
        request: Request<v1::CallRequest>,
    ) -> Result<Response<v1::CallReply>, Status> {
        loopback_only(&request)?;
        Ok(Response::new(self.answer().await))
    }

    async fn call_batch(
        &self,
        request: Request<v1::CallBatchRequest>,
    ) -> Result<Response<v1::CallBatchReply>, Status> {
        loopback_only(&request)?;
        let mut results = Vec::new();
        for _ in request.into_inner().calls {
            results.push(v1::CallResult {
                result: Some(v1::call_result::Result::Reply(self.answer().await)),
            });
        }
        Ok(Response::new(v1::CallBatchReply { results }))
    }
}

#[tonic::async_trait]
impl v1::monitor_server::Monitor for Services {
    async fn load(
        &self,
        request: Request<v1::LoadRequest>,
    ) -> Result<Response<v1::LoadSample>, Status> {
        loopback_only(&request)?;
        Ok(Response::new(sample()))
    }

    async fn info(
        &self,
        request: Request<v1::InfoRequest>,
    ) -> Result<Response<v1::ServerInfo>, Status> {
        loopback_only(&request)?;
        Ok(Response::new(info()))
    }

    async fn probe(
        &self,
        request: Request<v1::ProbeRequest>,
    ) -> Result<Response<v1::ProbeReply>, Status> {
        loopback_only(&request)?;
        let received_bytes = request.into_inner().payload.len() as u64;
        Ok(Response::new(v1::ProbeReply { received_bytes }))
    }
}

type Chunks = Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::DataChunk, Status>> + Send>>;

fn stores_nothing() -> Status {
    Status::unimplemented("an emulated server stores nothing")
}

#[tonic::async_trait]
impl v1::storage_server::Storage for Services {
    async fn put(
        &self,
        _request: Request<Streaming<v1::PutChunk>>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        Err(stores_nothing())
    }

    type GetStream = Chunks;

    async fn get(
        &self,
        _request: Request<v1::GetRequest>,
    ) -> Result<Response<Self::GetStream>, Status> {
        Err(stores_nothing())
    }

    async fn stat(
        &self,
        request: Request<v1::StatRequest>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        let id = request.into_inner().object_id;
        Err(Status::not_found(format!("no object {id}")))
    }

    async fn delete(
        &self,
        _request: Request<v1::DeleteRequest>,
    ) -> Result<Response<v1::DeleteReply>, Status> {
        Ok(Response::new(v1::DeleteReply::default()))
    }

    async fn delete_owner(
        &self,
        _request: Request<v1::DeleteOwnerRequest>,
    ) -> Result<Response<v1::DeleteReply>, Status> {
        Ok(Response::new(v1::DeleteReply::default()))
    }

    async fn renew(
        &self,
        _request: Request<v1::RenewRequest>,
    ) -> Result<Response<v1::RenewReply>, Status> {
        Ok(Response::new(v1::RenewReply::default()))
    }

    async fn adopt(
        &self,
        _request: Request<v1::AdoptRequest>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        Err(stores_nothing())
    }

    async fn copy_from(
        &self,
        _request: Request<v1::CopyFromRequest>,
    ) -> Result<Response<v1::ObjectInfo>, Status> {
        Err(stores_nothing())
    }
}

/// An emulated server's figures: one processor of 1 GFLOPS, 4 GiB.
pub fn info() -> v1::ServerInfo {
    v1::ServerInfo {
        mflops: 1000.0,
        cpus: 1,
        processors: 1,
        memory_bytes: 4 << 30,
        ..Default::default()
    }
}

/// An idle server's load sample, now.
pub fn sample() -> v1::LoadSample {
    v1::LoadSample {
        free_memory_bytes: 4 << 30,
        processors: 1,
        max_rows: 4,
        sampled_unix_ms: ninf_proto::clock::unix_ms(),
        ..Default::default()
    }
}
