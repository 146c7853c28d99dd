//! Everything the proxy asks of the metaserver, behind one trait ([`Metaserver`]): a
//! routine's interface, the grid's status (and from it the servers that are up), a graph's
//! placement, and the report of what a graph did. [`GrpcMetaserver`] is the real one, over the
//! list of metaservers of which one answers at a time; tests drive the proxy's whole run of a
//! graph with an in-memory fake (`crate::fake::FakeMetaserver`). How long to wait for a
//! restarting metaserver is the proxy's policy ([`retrying`]), the same for every kind.

use std::future::Future;
use std::time::{Duration, Instant};

use ninf_proto::net::auth::AttachToken;
use ninf_proto::net::failover::{Failover, try_next};
use ninf_proto::v1;
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::config::CALL_LIMIT;
use crate::recovery::{Candidate, backoff};

/// The metaserver as the proxy uses it. Each call is one attempt; an error that another
/// metaserver of the list may not give (unreachable, a standby) says so by
/// [`try_next`], and the next attempt goes to the next metaserver.
#[tonic::async_trait]
pub trait Metaserver: Send + Sync + 'static {
    /// The routine's interface.
    async fn describe(&self, function: &str) -> Result<v1::FunctionInterface, Status>;
    /// The grid's servers alone, none when the list is still the one of `seen` (a reply's
    /// `servers_changes`; 0 for the list whatever it is).
    async fn status(&self, seen: u64) -> Result<v1::GridStatus, Status>;
    /// A graph's placement.
    async fn schedule(&self, request: v1::ScheduleRequest) -> Result<v1::ScheduleReply, Status>;
    /// What a graph did, task by task.
    async fn report_actuals(&self, report: v1::ActualsReport) -> Result<(), Status>;
    /// Data kept on the grid (docs/data.md): one request to the metaserver's records.
    async fn data(&self, request: DataRecordsRequest) -> Result<DataRecordsReply, Status> {
        let _ = request;
        Err(Status::unimplemented(
            "this metaserver keeps no data handles",
        ))
    }
    /// How many metaservers the list has: with more than one, a failed attempt goes to the
    /// next at once instead of waiting.
    fn count(&self) -> usize {
        1
    }

    /// The servers the metaserver lists as up, as candidates for a task that moves.
    async fn up_servers(&self) -> Result<Vec<Candidate>, Status> {
        Ok(self
            .status(0)
            .await?
            .servers
            .into_iter()
            .filter(|s| s.up)
            .map(|s| Candidate {
                mflops: s.mflops * f64::from(s.processors.max(1)),
                load: s.load,
                address: s.address,
                functions: s.functions,
            })
            .collect())
    }
}

/// A request to the metaserver's records of data handles (service `DataRecords`).
#[derive(Debug, Clone)]
pub enum DataRecordsRequest {
    Create(v1::CreateDataRequest),
    AddCopy(v1::AddCopyRequest),
    Lookup(v1::LookupDataRequest),
    Forget(v1::LookupDataRequest),
    List(v1::ListDataRecordsRequest),
    Renew(v1::RenewDataRecordsRequest),
    Repair(v1::RepairDataRequest),
}

/// Its answer, by request.
#[derive(Debug, Clone)]
pub enum DataRecordsReply {
    Created(v1::CreateDataReply),
    CopyAdded(v1::AddCopyReply),
    Info(v1::DataInfo),
    List(v1::ListDataReply),
    Renewed(v1::RenewDataReply),
    Repaired(v1::RepairDataReply),
}

/// Runs `call` against `metaserver`. A metaserver that is restarting (unreachable), a
/// standby, or one that refuses a graph for now (every server for one of its routines is
/// down) is asked again, moving on down the list, with doubling back-off for up to
/// `patience`; any other refusal is final.
pub async fn retrying<T, F, Fut>(
    metaserver: &dyn Metaserver,
    patience: Duration,
    mut call: F,
) -> Result<T, Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let deadline = Instant::now() + patience;
    let mut attempt = 0;
    loop {
        match call().await {
            Ok(reply) => return Ok(reply),
            Err(status) if try_next(&status) && Instant::now() < deadline => {
                attempt += 1;
                if attempt == 1 && metaserver.count() > 1 {
                    // The next metaserver of the list may answer at once.
                    continue;
                }
                let wait = backoff(attempt, Duration::from_millis(100), Duration::from_secs(2));
                tracing::warn!(error = %status.message(), retry_in = ?wait, "metaserver unavailable; asking again");
                tokio::time::sleep(wait).await;
            }
            Err(status) => return Err(status),
        }
    }
}

/// The real metaservers: gRPC to whichever of the list answers now.
pub struct GrpcMetaserver {
    metaservers: Failover,
    token: AttachToken,
}

impl GrpcMetaserver {
    pub fn new(metaservers: Failover, token: Option<&str>) -> GrpcMetaserver {
        GrpcMetaserver {
            metaservers,
            token: AttachToken::new(token),
        }
    }

    /// The scheduling service of the metaserver in use, and which of the list it is.
    fn scheduling(
        &self,
    ) -> (
        usize,
        v1::scheduling_client::SchedulingClient<InterceptedService<Channel, AttachToken>>,
    ) {
        let (used, channel) = self.metaservers.channel();
        let client =
            v1::scheduling_client::SchedulingClient::with_interceptor(channel, self.token.clone())
                .max_decoding_message_size(CALL_LIMIT)
                .max_encoding_message_size(CALL_LIMIT);
        (used, client)
    }

    /// An answer of metaserver `used`: on an error the next may not give, the list moves on.
    fn noted<T>(&self, used: usize, answer: Result<T, Status>) -> Result<T, Status> {
        if let Err(status) = &answer
            && try_next(status)
        {
            self.metaservers.failed(used);
        }
        answer
    }
}

#[tonic::async_trait]
impl Metaserver for GrpcMetaserver {
    async fn describe(&self, function: &str) -> Result<v1::FunctionInterface, Status> {
        let (used, mut client) = self.scheduling();
        let request = v1::DescribeRequest {
            function: function.to_string(),
        };
        let answer = client
            .describe(request)
            .await
            .map(tonic::Response::into_inner);
        self.noted(used, answer)
    }

    async fn status(&self, seen: u64) -> Result<v1::GridStatus, Status> {
        let (used, mut client) = self.scheduling();
        let request = v1::StatusRequest {
            recent_graphs: 0,
            data: false,
            servers_only: true,
            servers_changes_seen: seen,
        };
        let answer = client
            .status(request)
            .await
            .map(tonic::Response::into_inner);
        self.noted(used, answer)
    }

    async fn schedule(&self, request: v1::ScheduleRequest) -> Result<v1::ScheduleReply, Status> {
        let (used, mut client) = self.scheduling();
        let answer = client
            .schedule(request)
            .await
            .map(tonic::Response::into_inner);
        self.noted(used, answer)
    }

    async fn report_actuals(&self, report: v1::ActualsReport) -> Result<(), Status> {
        let (used, mut client) = self.scheduling();
        let answer = client.report_actuals(report).await.map(|_| ());
        self.noted(used, answer)
    }

    async fn data(&self, request: DataRecordsRequest) -> Result<DataRecordsReply, Status> {
        use DataRecordsReply as Reply;
        use DataRecordsRequest as Ask;
        let (used, channel) = self.metaservers.channel();
        let mut client = v1::data_records_client::DataRecordsClient::with_interceptor(
            channel,
            self.token.clone(),
        );
        let answer = match request {
            Ask::Create(r) => client
                .create(r)
                .await
                .map(|a| Reply::Created(a.into_inner())),
            Ask::AddCopy(r) => client
                .add_copy(r)
                .await
                .map(|a| Reply::CopyAdded(a.into_inner())),
            Ask::Lookup(r) => client.lookup(r).await.map(|a| Reply::Info(a.into_inner())),
            Ask::Forget(r) => client.forget(r).await.map(|a| Reply::Info(a.into_inner())),
            Ask::List(r) => client.list(r).await.map(|a| Reply::List(a.into_inner())),
            Ask::Renew(r) => client
                .renew(r)
                .await
                .map(|a| Reply::Renewed(a.into_inner())),
            Ask::Repair(r) => client
                .repair(r)
                .await
                .map(|a| Reply::Repaired(a.into_inner())),
        };
        self.noted(used, answer)
    }

    fn count(&self) -> usize {
        self.metaservers.len()
    }
}
