//! `GangControl`: node agents attach here to receive time tables and report back, check their
//! clocks, and anyone may read the table's status.

use std::pin::Pin;
use std::sync::Arc;

use ninf_gang::Clock;
use ninf_proto::v1;
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use super::clock::MachineClock;
use super::master::GangMaster;

pub struct GangControlService(pub Arc<GangMaster>);

type CommandStream = Pin<Box<dyn Stream<Item = Result<v1::AgentCommand, Status>> + Send>>;

#[tonic::async_trait]
impl v1::gang_control_server::GangControl for GangControlService {
    type AttachStream = CommandStream;

    async fn attach(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<CommandStream>, Status> {
        let mut inbound = request.into_inner();
        let hello = match inbound.message().await? {
            Some(v1::AgentMessage {
                kind: Some(v1::agent_message::Kind::Hello(hello)),
            }) => hello,
            _ => {
                return Err(Status::invalid_argument(
                    "an agent's first message must be its hello",
                ));
            }
        };
        if let Some(&bad) = hello.columns.iter().find(|&&c| c >= self.0.processors) {
            return Err(Status::invalid_argument(format!(
                "agent `{}` claims column {bad}; this server has {} processors",
                hello.node, self.0.processors
            )));
        }
        let master = self.0.clone();
        let node = hello.node.clone();
        let (link, mut commands) = tokio::sync::mpsc::unbounded_channel();
        let attachment = master.attach_node(hello, Box::new(link));
        tracing::info!(node = %node, "node agent attached");

        let (tx, rx) = tokio::sync::mpsc::channel::<Result<v1::AgentCommand, Status>>(4);
        let mut tables = master.tables();
        let forward = tokio::spawn(async move {
            let table = |tables: &mut tokio::sync::watch::Receiver<Arc<v1::TimeTableMessage>>| {
                v1::AgentCommand {
                    kind: Some(v1::agent_command::Kind::Table(
                        (**tables.borrow_and_update()).clone(),
                    )),
                }
            };
            if tx.send(Ok(table(&mut tables))).await.is_err() {
                return;
            }
            loop {
                let command = tokio::select! {
                    changed = tables.changed() => match changed {
                        Ok(()) => table(&mut tables),
                        Err(_) => break,
                    },
                    command = commands.recv() => match command {
                        Some(command) => command,
                        None => break,
                    },
                };
                if tx.send(Ok(command)).await.is_err() {
                    break;
                }
            }
        });
        tokio::spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                match message.kind {
                    Some(v1::agent_message::Kind::Report(report)) => {
                        master.node_report(&node, report)
                    }
                    Some(v1::agent_message::Kind::Opened(job)) => master.node_opened(&node, job),
                    Some(v1::agent_message::Kind::Traffic(traffic)) => {
                        master.node_traffic(&node, traffic)
                    }
                    Some(v1::agent_message::Kind::RankStarted(started)) => {
                        master.node_rank_started(started)
                    }
                    Some(v1::agent_message::Kind::RankResult(result)) => {
                        master.node_rank_result(&node, result)
                    }
                    Some(v1::agent_message::Kind::Lost(lost)) => {
                        master.node_lost_messages(&node, lost)
                    }
                    _ => {}
                }
            }
            forward.abort();
            master.detach_node(&node, attachment);
            tracing::info!(node = %node, "node agent detached");
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn clock(
        &self,
        _request: Request<v1::ClockRequest>,
    ) -> Result<Response<v1::ClockReply>, Status> {
        Ok(Response::new(v1::ClockReply {
            server_seconds: MachineClock.now(),
        }))
    }

    async fn status(
        &self,
        _request: Request<v1::GangStatusRequest>,
    ) -> Result<Response<v1::GangStatus>, Status> {
        Ok(Response::new(self.0.status()))
    }
}
