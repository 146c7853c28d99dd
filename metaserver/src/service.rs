//! The gRPC shell around [`crate::Metaserver`]: each method unwraps the request, calls the
//! operation and maps its error to a status.

use std::sync::Arc;

use ninf_proto::v1;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::Metaserver;

/// Largest message accepted or sent: graphs of 100,000 tasks fit comfortably.
pub const MESSAGE_LIMIT: usize = 256 << 20;

/// Compute servers' side.
pub struct RegistryService(pub Arc<Metaserver>);

/// Proxies' and people's side.
pub struct SchedulingService(pub Arc<Metaserver>);

#[tonic::async_trait]
impl v1::registry_server::Registry for RegistryService {
    async fn register(
        &self,
        request: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterReply>, Status> {
        self.0.serving()?;
        Ok(Response::new(self.0.register(request.into_inner()).await?))
    }

    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatReply>, Status> {
        self.0.serving()?;
        Ok(Response::new(self.0.heartbeat(request.into_inner()).await?))
    }

    async fn report_network(
        &self,
        request: Request<v1::NetworkReport>,
    ) -> Result<Response<v1::NetworkReportReply>, Status> {
        self.0.serving()?;
        self.0.report_network(request.into_inner()).await?;
        Ok(Response::new(v1::NetworkReportReply {}))
    }

    async fn leave(
        &self,
        request: Request<v1::LeaveRequest>,
    ) -> Result<Response<v1::LeaveReply>, Status> {
        self.0.serving()?;
        self.0.leave(request.into_inner()).await?;
        Ok(Response::new(v1::LeaveReply {}))
    }
}

/// `ninf alloc`'s side: allocation queues.
pub struct AllocationService(pub Arc<Metaserver>);

#[tonic::async_trait]
impl v1::allocation_server::Allocation for AllocationService {
    async fn add_queue(
        &self,
        request: Request<v1::AllocQueueSpec>,
    ) -> Result<Response<v1::AllocQueue>, Status> {
        self.0.serving()?;
        Ok(Response::new(self.0.add_queue(request.into_inner()).await?))
    }

    async fn list_queues(
        &self,
        _request: Request<v1::ListQueuesRequest>,
    ) -> Result<Response<v1::ListQueuesReply>, Status> {
        self.0.serving()?;
        Ok(Response::new(v1::ListQueuesReply {
            queues: self.0.list_queues(),
        }))
    }

    async fn remove_queue(
        &self,
        request: Request<v1::QueueName>,
    ) -> Result<Response<v1::AllocQueue>, Status> {
        self.0.serving()?;
        let name = request.into_inner().name;
        Ok(Response::new(self.0.remove_queue(&name).await?))
    }

    async fn pause_queue(
        &self,
        request: Request<v1::QueueName>,
    ) -> Result<Response<v1::AllocQueue>, Status> {
        self.0.serving()?;
        let name = request.into_inner().name;
        Ok(Response::new(self.0.pause_queue(&name, true).await?))
    }

    async fn resume_queue(
        &self,
        request: Request<v1::QueueName>,
    ) -> Result<Response<v1::AllocQueue>, Status> {
        self.0.serving()?;
        let name = request.into_inner().name;
        Ok(Response::new(self.0.pause_queue(&name, false).await?))
    }
}

/// Proxies' side of data kept on the grid (docs/data.md).
pub struct DataRecordsService(pub Arc<Metaserver>);

#[tonic::async_trait]
impl v1::data_records_server::DataRecords for DataRecordsService {
    async fn create(
        &self,
        request: Request<v1::CreateDataRequest>,
    ) -> Result<Response<v1::CreateDataReply>, Status> {
        self.0.serving()?;
        Ok(Response::new(
            self.0.create_data(request.into_inner()).await?,
        ))
    }

    async fn add_copy(
        &self,
        request: Request<v1::AddCopyRequest>,
    ) -> Result<Response<v1::AddCopyReply>, Status> {
        self.0.serving()?;
        Ok(Response::new(
            self.0.add_data_copy(request.into_inner()).await?,
        ))
    }

    async fn lookup(
        &self,
        request: Request<v1::LookupDataRequest>,
    ) -> Result<Response<v1::DataInfo>, Status> {
        self.0.serving()?;
        let r = request.into_inner();
        Ok(Response::new(self.0.use_data(&r.id, &r.owner).await?))
    }

    async fn forget(
        &self,
        request: Request<v1::LookupDataRequest>,
    ) -> Result<Response<v1::DataInfo>, Status> {
        self.0.serving()?;
        let r = request.into_inner();
        Ok(Response::new(self.0.forget_data(&r.id, &r.owner).await?))
    }

    async fn list(
        &self,
        request: Request<v1::ListDataRecordsRequest>,
    ) -> Result<Response<v1::ListDataReply>, Status> {
        self.0.serving()?;
        let owner = request.into_inner().owner;
        Ok(Response::new(v1::ListDataReply {
            data: self.0.list_data(&owner).await?,
        }))
    }

    async fn renew(
        &self,
        request: Request<v1::RenewDataRecordsRequest>,
    ) -> Result<Response<v1::RenewDataReply>, Status> {
        self.0.serving()?;
        let r = request.into_inner();
        Ok(Response::new(self.0.renew_data(&r.owner, &r.ids).await?))
    }

    async fn repair(
        &self,
        request: Request<v1::RepairDataRequest>,
    ) -> Result<Response<v1::RepairDataReply>, Status> {
        self.0.serving()?;
        Ok(Response::new(
            self.0.repair_data_handle(request.into_inner()).await?,
        ))
    }
}

#[tonic::async_trait]
impl v1::scheduling_server::Scheduling for SchedulingService {
    async fn schedule(
        &self,
        request: Request<v1::ScheduleRequest>,
    ) -> Result<Response<v1::ScheduleReply>, Status> {
        self.0.serving()?;
        let request = request.into_inner();
        let span = tracing::info_span!(
            "schedule",
            proxy = %request.proxy,
            tasks = request.graph.as_ref().map_or(0, |g| g.tasks.len()),
            graph_id = tracing::field::Empty,
        );
        let reply = self.0.schedule(request).instrument(span.clone()).await?;
        span.record("graph_id", reply.graph_id);
        Ok(Response::new(reply))
    }

    async fn report_actuals(
        &self,
        request: Request<v1::ActualsReport>,
    ) -> Result<Response<v1::ActualsReply>, Status> {
        self.0.serving()?;
        let report = request.into_inner();
        let span = tracing::info_span!("report_actuals", graph_id = report.graph_id);
        self.0.report_actuals(report).instrument(span).await?;
        Ok(Response::new(v1::ActualsReply {}))
    }

    async fn describe(
        &self,
        request: Request<v1::DescribeRequest>,
    ) -> Result<Response<v1::FunctionInterface>, Status> {
        self.0.serving()?;
        let function = request.into_inner().function;
        let since = std::time::Instant::now();
        loop {
            if let Some(found) = self.0.describe(&function) {
                return Ok(Response::new(found));
            }
            // An allocation queue may yet bring a server that has it.
            if !self.0.wait_for_capacity(since).await {
                return Err(Status::not_found(format!(
                    "no server has registered a routine `{function}`"
                )));
            }
        }
    }

    async fn status(
        &self,
        request: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::GridStatus>, Status> {
        self.0.serving()?;
        let request = request.into_inner();
        if request.servers_only {
            return Ok(Response::new(
                self.0.servers_status(request.servers_changes_seen),
            ));
        }
        let mut status = self.0.status(request.recent_graphs.min(1000)).await?;
        if request.data {
            status.data = self.0.all_data().await?;
        }
        Ok(Response::new(status))
    }
}
