//! Per-client limits at the proxy: how many transactions one client may have running at
//! once, and how many bytes of intermediate data they may keep on the servers together, so
//! one client cannot crowd out the others. A client is the identity its library sends
//! ([`ninf_proto::net::CLIENT_ID_METADATA`]) on its address, so programs that share a host
//! or a NAT are counted apart.
//!
//! A transaction over a limit that lifts when the client's running transactions end waits
//! in a bounded queue ([`ClientAdmission::admit_or_wait`]), before anything is scheduled or
//! stored. When the queue is full, or the transaction could never fit, it is refused with
//! RESOURCE_EXHAUSTED naming the limit.
//!
//! A transaction's storage is known before it runs: every output a consumer reads is kept
//! on its producer's server, at the size the IDL gives it (the metaserver refuses a graph
//! whose edge sizes disagree with the IDL, so a client cannot understate them). Client
//! arrays the schedule stages ahead of their calls are stored too; they are counted once
//! the schedule names them, and staged only if they fit ([`Admitted::try_grow`]).
//!
//! An admitted transaction may then wait for one of the proxy's run slots, shared by all
//! clients ([`RunSlots`], `max_running_transactions`), before it is placed.

mod run_slots;

pub use run_slots::{RunSlot, RunSlots};

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use ninf_proto::v1;
use tokio::sync::Notify;
use tonic::Status;

/// The limits, per client, and the waiting room shared by all.
#[derive(Debug, Clone, Copy)]
pub struct ClientLimits {
    pub transactions: usize,
    pub stored_bytes: u64,
    /// Transactions (of all clients together) that may wait for their client's running
    /// ones to end; past this they are refused.
    pub queued: usize,
}

/// What one client has running.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ClientUsage {
    pub transactions: usize,
    pub stored_bytes: u64,
}

/// Running transactions and their storage, per client.
#[derive(Debug)]
pub struct ClientAdmission {
    limits: ClientLimits,
    usage: Mutex<HashMap<String, ClientUsage>>,
    /// Signalled whenever a transaction gives its place back.
    released: Notify,
    waiting: AtomicUsize,
    /// Gives memory back while no transaction runs.
    trimmer: crate::memory::Trimmer,
}

/// A place in the waiting room, given back when dropped (admitted or given up).
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A transaction's place in its client's counts; given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<ClientAdmission>,
    client: String,
    stored_bytes: u64,
}

/// Bytes a graph keeps on the servers while it runs: each kept output once, however many
/// consumers read it.
pub fn stored_bytes(graph: &v1::TaskGraph) -> u64 {
    let mut kept: HashMap<(u32, u32), u64> = HashMap::new();
    for edge in &graph.edges {
        let bytes = kept
            .entry((edge.from_task, edge.from_parameter))
            .or_default();
        *bytes = (*bytes).max(edge.bytes);
    }
    kept.values().fold(0u64, |sum, b| sum.saturating_add(*b))
}

impl ClientAdmission {
    pub fn new(limits: ClientLimits) -> Arc<ClientAdmission> {
        Arc::new(ClientAdmission {
            limits: ClientLimits {
                transactions: limits.transactions.max(1),
                ..limits
            },
            usage: Mutex::new(HashMap::new()),
            released: Notify::new(),
            waiting: AtomicUsize::new(0),
            trimmer: crate::memory::Trimmer::default(),
        })
    }

    /// [`Self::admit`], waiting while the client is at a limit its running transactions
    /// hold, in a room of `limits.queued` places. Refused when the room is full or the
    /// transaction could never fit. Dropping the future gives its place up.
    pub async fn admit_or_wait(
        self: &Arc<Self>,
        client: &str,
        stored_bytes: u64,
    ) -> Result<Admitted, Status> {
        let mut queued = None;
        loop {
            // Registered before trying, so a release between the try and the wait wakes us.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            match self.admit(client, stored_bytes) {
                Err(status) if is_busy(&status) => {
                    if queued.is_none() {
                        queued = Some(self.enqueue(&status)?);
                    }
                    released.await;
                }
                decided => return decided,
            }
        }
    }

    /// Takes a place in the waiting room, or refuses with why the transaction had to wait.
    fn enqueue(&self, why: &Status) -> Result<Queued<'_>, Status> {
        let room = self.limits.queued;
        let taken = self
            .waiting
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |w| {
                (w < room).then_some(w + 1)
            });
        match taken {
            Ok(_) => Ok(Queued(&self.waiting)),
            Err(full) => Err(Status::resource_exhausted(format!(
                "{}; the proxy's queue already holds {full} waiting transactions, its limit \
                 (max_queued_transactions)",
                why.message().trim_end_matches("; wait for one to finish")
            ))),
        }
    }

    /// Transactions waiting for their client's running ones to end.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    fn usage_map(&self) -> std::sync::MutexGuard<'_, HashMap<String, ClientUsage>> {
        // Every update is one add or subtract under the lock: a poisoned map is consistent.
        ninf_proto::sync::lock(&self.usage)
    }

    /// Counts a new transaction of `client` that keeps `stored_bytes` on the servers, or
    /// refuses it when the client is at a limit.
    pub fn admit(self: &Arc<Self>, client: &str, stored_bytes: u64) -> Result<Admitted, Status> {
        let mut map = self.usage_map();
        let usage = map.entry(client.to_string()).or_default();
        if usage.transactions >= self.limits.transactions {
            return Err(busy(Status::resource_exhausted(format!(
                "client {client} already runs {} transactions, the proxy's limit \
                 (max_transactions_per_client); wait for one to finish",
                usage.transactions
            ))));
        }
        let total = usage.stored_bytes.saturating_add(stored_bytes);
        if total > self.limits.stored_bytes {
            let held = usage.stored_bytes;
            if usage.transactions == 0 {
                map.remove(client);
            }
            let context = if held == 0 {
                String::new()
            } else {
                format!(" (with the {held} bytes its running transactions keep, {total})")
            };
            let refusal = Status::resource_exhausted(format!(
                "client {client}'s transaction would keep {stored_bytes} bytes of intermediate \
                 data on the servers{context}, over the proxy's quota of {} bytes per client \
                 (max_stored_bytes_per_client)",
                self.limits.stored_bytes
            ));
            // Over the quota only with its running transactions: it fits once they end.
            return Err(if held == 0 { refusal } else { busy(refusal) });
        }
        usage.transactions += 1;
        usage.stored_bytes = total;
        Ok(Admitted {
            admission: self.clone(),
            client: client.to_string(),
            stored_bytes,
        })
    }

    /// What gives memory back while no transaction runs.
    pub fn trimmer(&self) -> &crate::memory::Trimmer {
        &self.trimmer
    }

    /// What `client` has running.
    pub fn usage(&self, client: &str) -> ClientUsage {
        self.usage_map().get(client).copied().unwrap_or_default()
    }
}

impl Admitted {
    /// The client it was admitted for.
    pub fn client(&self) -> &str {
        &self.client
    }

    /// Counts `bytes` more for this transaction if its client stays within the quota;
    /// otherwise changes nothing and says so.
    pub fn try_grow(&mut self, bytes: u64) -> bool {
        let mut map = self.admission.usage_map();
        let Some(usage) = map.get_mut(&self.client) else {
            return false;
        };
        let total = usage.stored_bytes.saturating_add(bytes);
        if total > self.admission.limits.stored_bytes {
            return false;
        }
        usage.stored_bytes = total;
        self.stored_bytes = self.stored_bytes.saturating_add(bytes);
        true
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut map = self.admission.usage_map();
        if let Some(usage) = map.get_mut(&self.client) {
            usage.transactions = usage.transactions.saturating_sub(1);
            usage.stored_bytes = usage.stored_bytes.saturating_sub(self.stored_bytes);
            if usage.transactions == 0 {
                map.remove(&self.client);
            }
        }
        let idle = map.is_empty();
        drop(map);
        self.admission.released.notify_waiters();
        if idle {
            self.admission
                .trimmer
                .fell_idle(Arc::downgrade(&self.admission), |admission| {
                    admission.usage_map().is_empty()
                });
        }
    }
}

fn is_busy(status: &Status) -> bool {
    status
        .metadata()
        .contains_key(ninf_proto::net::BUSY_METADATA)
}

/// Marks a refusal that lifts when the client's running transactions end: clients wait and
/// send again ([`ninf_proto::net::BUSY_METADATA`]).
fn busy(mut status: Status) -> Status {
    status.metadata_mut().insert(
        ninf_proto::net::BUSY_METADATA,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    status
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn limits(transactions: usize, stored_bytes: u64) -> ClientLimits {
        ClientLimits {
            transactions,
            stored_bytes,
            queued: 2,
        }
    }

    #[tokio::test]
    async fn over_its_limit_a_transaction_waits_for_its_clients_running_one() {
        let admission = ClientAdmission::new(limits(1, 1000));
        let running = admission.admit("c", 600).unwrap();
        let waiter = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit_or_wait("c", 600).await })
        };
        while admission.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        // Another client is not held up by c's queue.
        let _other = admission.admit_or_wait("d", 600).await.unwrap();
        drop(running);
        let admitted = waiter.await.unwrap().unwrap();
        assert_eq!(admission.waiting(), 0);
        assert_eq!(
            admission.usage("c"),
            ClientUsage {
                transactions: 1,
                stored_bytes: 600
            }
        );
        drop(admitted);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_waiter_is_admitted_in_turn_as_running_transactions_end() {
        let admission = ClientAdmission::new(limits(1, u64::MAX));
        let admission = ClientAdmission::new(ClientLimits {
            queued: 8,
            ..admission.limits
        });
        let runs: Vec<_> = (0..6)
            .map(|_| {
                let admission = admission.clone();
                tokio::spawn(async move {
                    let admitted = admission.admit_or_wait("c", 0).await?;
                    assert_eq!(admission.usage("c").transactions, 1);
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    drop(admitted);
                    Ok::<(), Status>(())
                })
            })
            .collect();
        for run in runs {
            run.await.unwrap().unwrap();
        }
        assert_eq!(admission.usage("c"), ClientUsage::default());
        assert_eq!(admission.waiting(), 0);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_transaction_that_never_fits_is_refused_at_once() {
        let admission = ClientAdmission::new(limits(1, 1000));
        let _running = admission.admit("c", 0).unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let admission = admission.clone();
                tokio::spawn(async move { admission.admit_or_wait("c", 0).await })
            })
            .collect();
        while admission.waiting() < 2 {
            tokio::task::yield_now().await;
        }
        let refused = admission.admit_or_wait("c", 0).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert!(!is_busy(&refused));
        assert_eq!(
            refused.message(),
            "client c already runs 1 transactions, the proxy's limit \
             (max_transactions_per_client); the proxy's queue already holds 2 waiting \
             transactions, its limit (max_queued_transactions)"
        );
        let too_big = admission.admit_or_wait("d", 1001).await.unwrap_err();
        assert_eq!(too_big.code(), tonic::Code::ResourceExhausted);
        // A waiter that gives up gives its place back.
        for waiter in &waiters {
            waiter.abort();
        }
        for waiter in waiters {
            let _ = waiter.await;
        }
        assert_eq!(admission.waiting(), 0);
    }

    #[test]
    fn a_client_at_its_limit_is_refused_until_one_finishes() {
        let admission = ClientAdmission::new(limits(2, u64::MAX));
        let first = admission.admit("10.0.0.1", 0).unwrap();
        let _second = admission.admit("10.0.0.1", 0).unwrap();
        let refused = admission.admit("10.0.0.1", 0).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            refused.message(),
            "client 10.0.0.1 already runs 2 transactions, the proxy's limit \
             (max_transactions_per_client); wait for one to finish"
        );
        // Other clients are not affected.
        let _other = admission.admit("10.0.0.2", 0).unwrap();
        drop(first);
        assert_eq!(admission.usage("10.0.0.1").transactions, 1);
        let _third = admission.admit("10.0.0.1", 0).unwrap();
        assert_eq!(admission.usage("10.0.0.1").transactions, 2);
    }

    #[test]
    fn storage_over_the_quota_is_refused_and_given_back_when_a_transaction_ends() {
        let admission = ClientAdmission::new(limits(10, 1000));
        let alone = admission.admit("c", 1001).unwrap_err();
        assert_eq!(alone.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            alone.message(),
            "client c's transaction would keep 1001 bytes of intermediate data on the \
             servers, over the proxy's quota of 1000 bytes per client \
             (max_stored_bytes_per_client)"
        );
        assert_eq!(admission.usage("c"), ClientUsage::default());
        let first = admission.admit("c", 600).unwrap();
        let second = admission.admit("c", 500).unwrap_err();
        assert_eq!(
            second.message(),
            "client c's transaction would keep 500 bytes of intermediate data on the \
             servers (with the 600 bytes its running transactions keep, 1100), over the \
             proxy's quota of 1000 bytes per client (max_stored_bytes_per_client)"
        );
        let _small = admission.admit("c", 400).unwrap();
        assert_eq!(
            admission.usage("c"),
            ClientUsage {
                transactions: 2,
                stored_bytes: 1000
            }
        );
        // Another client has its own quota.
        let _other = admission.admit("d", 1000).unwrap();
        drop(first);
        assert_eq!(admission.usage("c").stored_bytes, 400);
        let _again = admission.admit("c", 600).unwrap();
    }

    #[test]
    fn a_transaction_grows_only_within_the_quota_and_gives_all_back() {
        let admission = ClientAdmission::new(limits(10, 1000));
        let mut first = admission.admit("c", 300).unwrap();
        assert!(first.try_grow(500));
        assert_eq!(admission.usage("c").stored_bytes, 800);
        // 201 more would pass the quota: refused, and nothing changes.
        assert!(!first.try_grow(201));
        assert_eq!(admission.usage("c").stored_bytes, 800);
        let mut second = admission.admit("c", 100).unwrap();
        assert!(second.try_grow(100));
        assert!(!second.try_grow(1));
        drop(first);
        assert_eq!(admission.usage("c").stored_bytes, 200);
        drop(second);
        assert_eq!(admission.usage("c"), ClientUsage::default());
    }

    #[test]
    fn a_graph_keeps_each_read_output_once() {
        let edge = |from_task, from_parameter, to_task, bytes| v1::GraphEdge {
            from_task,
            from_parameter,
            to_task,
            to_parameter: 0,
            bytes,
        };
        let graph = v1::TaskGraph {
            tasks: vec![v1::GraphTask::default(); 4],
            // Task 0's output 1 feeds two consumers; task 1 keeps two outputs.
            edges: vec![
                edge(0, 1, 2, 800),
                edge(0, 1, 3, 800),
                edge(1, 0, 3, 80),
                edge(1, 2, 3, 8),
            ],
        };
        assert_eq!(stored_bytes(&graph), 888);
        assert_eq!(stored_bytes(&v1::TaskGraph::default()), 0);
    }
}
