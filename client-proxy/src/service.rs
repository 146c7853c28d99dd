//! The gRPC shell around [`crate::Proxy`].

use std::sync::Arc;

use ninf_proto::v1;
use tonic::{Request, Response, Status};

use crate::Proxy;

pub struct ProxyService(pub Arc<Proxy>);

#[tonic::async_trait]
impl v1::proxy_server::Proxy for ProxyService {
    async fn run(
        &self,
        request: Request<v1::RunRequest>,
    ) -> Result<Response<v1::RunReply>, Status> {
        let client = request
            .remote_addr()
            .map_or_else(|| "unknown".to_string(), |a| a.ip().to_string());
        let stored = request
            .get_ref()
            .graph
            .as_ref()
            .map_or(0, crate::admission::stored_bytes);
        let mut admitted = self
            .0
            .admission
            .admit(&client, stored)
            .inspect_err(|status| {
                tracing::warn!(%client, error = %status.message(), "transaction refused");
            })?;
        let request = request.into_inner();
        let bytes_in = prost::Message::encoded_len(&request) as u64;
        let result = self.0.run_graph(request, &mut admitted).await;
        let bytes_out = result
            .as_ref()
            .map_or(0, |reply| prost::Message::encoded_len(reply) as u64);
        self.0.metrics.client_bytes(bytes_in, bytes_out);
        if let Err(status) = &result {
            tracing::info!(code = ?status.code(), error = %status.message(), "graph failed");
        }
        Ok(Response::new(result?))
    }

    async fn describe(
        &self,
        request: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::FunctionInterface>, Status> {
        Ok(Response::new(
            self.0.describe(request.into_inner().function).await?,
        ))
    }
}
