//! The stages every call goes through, whichever way its bytes arrive and leave (gRPC
//! messages in [`crate::invoke`], the bulk port's socket or shared memory in [`crate::bulk`]):
//! admitted into the gang table with the server's own cores held ([`admit`]), given any
//! cores it may borrow ([`Admitted::lend`]), run with its time on the processors measured
//! ([`measured`]), its cores given back ([`Admitted::release`]) and its timing reported
//! ([`timing`]). How inputs reach the executable and outputs leave it stays with each path.

use std::future::Future;
use std::time::Instant;

use ninf_proto::v1;
use tonic::Status;

use crate::gang::claims::{Lent, OwnHeld};
use crate::gang::{GangError, JobTicket};
use crate::state::ServerState;

/// A call admitted into the gang table: its job, how long it queued, the cores it holds.
pub struct Admitted {
    pub ticket: JobTicket,
    pub queue_seconds: f64,
    own_cores: OwnHeld,
    lent: Lent,
}

/// Admits a call of `processors` ranks into the gang table (or keeps the job `held` from
/// the call before it in a batch) and holds the server's own cores for it.
pub async fn admit(
    state: &ServerState,
    name: &str,
    processors: u32,
    held: Option<JobTicket>,
) -> Result<Admitted, Status> {
    let queue_start = Instant::now();
    if held.is_none() && state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        // UNAVAILABLE: the proxy runs the call elsewhere, as for a server that went away.
        return Err(Status::unavailable(format!(
            "server {} is draining: it takes no new calls before it leaves",
            state.advertise
        )));
    }
    let ticket = match held {
        Some(ticket) => ticket,
        None => state
            .gang
            .admit(name, processors)
            .await
            .map_err(|e| gang_status(name, e))?,
    };
    let own_cores = state.hold_own_cores(name).await?;
    Ok(Admitted {
        ticket,
        queue_seconds: queue_start.elapsed().as_secs_f64(),
        own_cores,
        lent: Lent::default(),
    })
}

impl Admitted {
    /// Lends the call the cores it may borrow (see [`lend_cores`]).
    pub fn lend(&mut self, state: &ServerState, routine: Routine, alone: bool) {
        self.lent = lend_cores(state, routine, alone);
    }

    /// The cores lent to the call (none unless [`Admitted::lend`] lent some).
    pub fn lent(&self) -> &Lent {
        &self.lent
    }

    /// Gives the lent and own cores back once the routine has run, and counts the lending;
    /// the job, and the threads the call was lent.
    pub fn release(self, state: &ServerState) -> (JobTicket, u32) {
        let threads = self.lent.threads;
        drop((self.lent, self.own_cores));
        state.metrics.lent(threads);
        (self.ticket, threads)
    }
}

/// What lending cores to a call depends on, of its routine: how it runs and what the call
/// costs.
#[derive(Debug, Clone, Copy)]
pub struct Routine<'a> {
    pub parallelism: &'a ninf_idl::Parallelism,
    pub flops: f64,
}

/// A routine's time: how long it took, and of that how long its job was stopped by the
/// gang table for other jobs.
#[derive(Debug, Clone, Copy)]
pub struct ComputeTime {
    pub compute_seconds: f64,
    pub stopped_seconds: f64,
}

/// Runs `run` (the routine, in the job of `ticket`), measuring its time.
pub async fn measured<T>(ticket: &JobTicket, run: impl Future<Output = T>) -> (T, ComputeTime) {
    let start = Instant::now();
    let ran_before = ticket.running_seconds();
    let result = run.await;
    let compute_seconds = start.elapsed().as_secs_f64();
    let stopped_seconds = stopped(compute_seconds, ticket.running_seconds() - ran_before);
    (
        result,
        ComputeTime {
            compute_seconds,
            stopped_seconds,
        },
    )
}

/// The timing a reply reports.
pub fn timing(
    fetch_seconds: f64,
    queue_seconds: f64,
    compute: ComputeTime,
    cold: bool,
    threads: u32,
) -> v1::CallTiming {
    v1::CallTiming {
        fetch_seconds,
        queue_seconds,
        compute_seconds: compute.compute_seconds,
        cold,
        threads,
        stopped_seconds: compute.stopped_seconds,
    }
}

/// Of `compute` seconds, those the job did not run (`ran` by its tables).
fn stopped(compute: f64, ran: f64) -> f64 {
    (compute - ran).clamp(0.0, compute.max(0.0))
}

/// The cores lent to a call: some only for a large call of a `Threads` routine that runs
/// alone in its graph and is the only job of its server (another job's slots would stop it
/// and leave the lent cores idle), on a server that may borrow (`gang/claims.rs`).
fn lend_cores(state: &ServerState, routine: Routine, alone: bool) -> Lent {
    let threaded = *routine.parallelism == ninf_idl::Parallelism::Threads;
    match &state.claims {
        Some(claims)
            if alone
                && threaded
                && routine.flops >= state.gang.settings.lend_min_flops
                && state.gang.jobs() == 1 =>
        {
            claims.lend()
        }
        _ => Lent::default(),
    }
}

pub fn gang_status(function: &str, error: GangError) -> Status {
    match error {
        GangError::Table(e) => Status::invalid_argument(format!("`{function}`: {e}")),
        GangError::Closed => Status::unavailable(format!("`{function}`: {error}")),
    }
}
