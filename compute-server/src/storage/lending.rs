//! Stored arrays lent to the other servers of this host (docs/bulk-protocol.md, "Stored
//! arrays lent between servers"). A server whose call needs an array another server of its
//! host keeps would otherwise fetch it through `Storage.Get` (gRPC over loopback: about five
//! copies) and copy it again into its executable's region. Instead it asks on this server's
//! store socket (`ServerInfo.store_local`, an abstract Unix socket); the answer says where
//! the array lies in this server's store region, and the region's memory file comes with the
//! first answer on the connection. The borrower's executable maps that file and reads the
//! array where it lies ([`super::borrowing`]).
//!
//! A loan holds the array's bytes (and so its room in the region) until the borrower returns
//! it or its connection closes: a stored array deleted meanwhile keeps its pages until the
//! routine reading them is done. Only a process of this server's own user that carries the
//! grid's token is answered, since the file shows the whole region.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::sync::Arc;

use bytes::Bytes;
use ninf_proto::descriptor::element_type_to_proto;
use ninf_proto::net::local;
use ninf_proto::v1;
use tokio::net::{UnixListener, UnixStream};
use tonic::Status;

use crate::state::ServerState;

/// Loans one connection may hold at once; past it the borrower fetches through gRPC.
pub const MAX_LOANS: usize = 256;

/// The largest borrow frame read (an object id and the loans returned).
const MAX_FRAME: usize = 1 << 20;

/// Accepts the host's other servers until the task is dropped.
pub async fn serve(listener: UnixListener, state: Arc<ServerState>) {
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        if let Err(refused) = same_user(&socket) {
            tracing::warn!(%refused, "store socket: connection refused");
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(socket, &state).await {
                tracing::debug!(error = %e, "store socket connection closed");
            }
        });
    }
}

/// Whether the peer runs as this server's user: the region's file shows every stored array.
fn same_user(socket: &UnixStream) -> Result<(), String> {
    let peer = socket
        .peer_cred()
        .map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = unsafe { libc::geteuid() };
    if peer.uid() == own {
        Ok(())
    } else {
        Err(format!(
            "the peer runs as user {}, this server as {own}",
            peer.uid()
        ))
    }
}

/// One borrower's connection: the loans it holds, by number.
struct Loans {
    held: HashMap<u64, Bytes>,
    next: u64,
    /// Whether the region's file went to the borrower already.
    handed: bool,
}

async fn connection(socket: UnixStream, state: &ServerState) -> std::io::Result<()> {
    let mut loans = Loans {
        held: HashMap::new(),
        next: 0,
        handed: false,
    };
    loop {
        let frame = match local::receive_message::<v1::StoreBorrow>(&socket, MAX_FRAME).await {
            Ok((frame, _)) => frame,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let given = (!frame.authorization.is_empty()).then_some(frame.authorization.as_bytes());
        if let Err(status) = state.check().verify(given, "local") {
            let reply = refusal(&status);
            return local::send_message(&socket, &reply, None).await;
        }
        for loan in &frame.returned {
            loans.held.remove(loan);
        }
        if frame.object_id.is_empty() {
            continue;
        }
        let reply = match lend(state, &frame.object_id, &mut loans) {
            Ok(loan) => v1::StoreBorrowReply {
                result: Some(v1::store_borrow_reply::Result::Loan(loan)),
            },
            Err(status) => refusal(&status),
        };
        let lent = matches!(reply.result, Some(v1::store_borrow_reply::Result::Loan(_)));
        let file = state
            .store_region
            .as_ref()
            .filter(|_| lent && !loans.handed)
            .map(|region| region.file().as_fd());
        local::send_message(&socket, &reply, file).await?;
        loans.handed |= file.is_some();
    }
}

fn refusal(status: &Status) -> v1::StoreBorrowReply {
    v1::StoreBorrowReply {
        result: Some(v1::store_borrow_reply::Result::Error(v1::BulkError {
            code: status.code() as i32,
            message: status.message().to_string(),
        })),
    }
}

/// Lends `object_id` where it lies in the store region, holding its bytes under a new loan.
fn lend(state: &ServerState, object_id: &str, loans: &mut Loans) -> Result<v1::StoreLoan, Status> {
    let Some(region) = &state.store_region else {
        return Err(Status::unavailable("this server has no store region"));
    };
    if loans.held.len() >= MAX_LOANS {
        return Err(Status::resource_exhausted(format!(
            "{MAX_LOANS} loans outstanding on this connection"
        )));
    }
    let (info, data) = state
        .store
        .get(object_id)
        .map_err(crate::storage::StorageError::status)?;
    let Some(offset) = region.window().offset_of(&data) else {
        return Err(Status::failed_precondition(format!(
            "object `{object_id}` is not in the store region (spilled, or small)"
        )));
    };
    loans.next += 1;
    let bytes = data.len() as u64;
    loans.held.insert(loans.next, data);
    state.metrics.store_region("lent_to_peer", bytes);
    Ok(v1::StoreLoan {
        loan: loans.next,
        element_type: element_type_to_proto(info.element_type).into(),
        offset,
        bytes,
    })
}
