//! What a restarted proxy does with the transactions its journal holds: keeps their
//! intermediates alive while their clients may come back, resumes one when its client sends
//! it again (with the objects still held counted done), and gives up the rest after
//! `journal_wait_seconds`: their intermediates deleted, their graphs reported failed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ninf_proto::v1;

use super::JournaledRun;
use crate::Proxy;
use crate::execution::Restored;
use crate::placement::Placed;

/// How long a server has to say whether it still holds a journaled object.
const STAT_TIMEOUT: Duration = Duration::from_secs(5);

impl Proxy {
    /// Picks up a journaled transaction: its placement and owner, and its finished tasks,
    /// with those whose kept objects are gone marked lost; or, for one that had run to its
    /// end, its commit.
    pub(crate) async fn resume(&self, mut run: JournaledRun) -> Placed {
        let mut also_used = run.servers();
        also_used.extend(self.up_addresses().await);
        if let Some(commit) = run.commit.take() {
            tracing::info!(
                transaction = %run.transaction_id,
                graph = run.placement.graph_id,
                writes = commit.writes.len(),
                "finishing a transaction's data writes from the journal"
            );
            return Placed {
                owner: run.owner,
                placement: run.placement,
                also_used,
                restored: None,
                committed: Some(commit),
                schedule_seconds: 0.0,
            };
        }
        let missing = self.missing_objects(&run).await;
        tracing::info!(
            transaction = %run.transaction_id,
            graph = run.placement.graph_id,
            done = run.tasks.len(),
            lost = missing.len(),
            "resuming a transaction from the journal"
        );
        Placed {
            owner: run.owner,
            placement: run.placement,
            also_used,
            restored: Some(Restored {
                done: run.tasks,
                missing,
            }),
            committed: None,
            schedule_seconds: 0.0,
        }
    }

    /// The finished tasks of `run` some of whose kept objects their servers no longer hold
    /// (or cannot say they do).
    async fn missing_objects(&self, run: &JournaledRun) -> HashSet<usize> {
        let checks = run.objects().map(|(task, _, object)| async move {
            let stat = self.cluster.stat(&object.server, &object.object_id);
            let held = matches!(tokio::time::timeout(STAT_TIMEOUT, stat).await, Ok(Ok(())));
            (task, held)
        });
        futures_util::future::join_all(checks)
            .await
            .into_iter()
            .filter(|&(_, held)| !held)
            .map(|(task, _)| task)
            .collect()
    }

    /// The servers the metaserver lists as up (none if it cannot be asked).
    async fn up_addresses(&self) -> Vec<String> {
        self.metaserver
            .up_servers()
            .await
            .map(|up| up.into_iter().map(|c| c.address).collect())
            .unwrap_or_default()
    }

    /// Gives up a journaled transaction: finishes its data writes if it had run to its end
    /// (they were committed; only its reply is lost), deletes what else it stored wherever it
    /// may have, tells the metaserver its graph failed, and forgets it; one whose writes
    /// were finished is kept as answered when `keep_answer` (its client may still come
    /// back for it).
    pub(crate) async fn abandon(&self, run: &JournaledRun, why: &str, keep_answer: bool) {
        tracing::info!(transaction = %run.transaction_id, graph = run.placement.graph_id, why, "giving up a journaled transaction");
        let mut written = false;
        if let Some(commit) = &run.commit {
            match self.apply_commit(&run.client, commit).await {
                Ok(()) => written = true,
                Err(status) => {
                    tracing::warn!(transaction = %run.transaction_id, error = %status.message(), "cannot finish a journaled transaction's data writes");
                }
            }
        }
        let mut servers = run.servers();
        servers.extend(self.up_addresses().await);
        servers.sort();
        servers.dedup();
        for server in &servers {
            self.delete_owner(server, &run.owner).await;
        }
        self.report_actuals(v1::ActualsReport {
            graph_id: run.placement.graph_id,
            error: format!("the proxy restarted and {why}"),
            ..Default::default()
        })
        .await;
        let answer = (run.client.as_str(), run.graph_hash);
        self.journal
            .ended(&run.transaction_id, answer, written && keep_answer);
    }
}

/// Keeps the journal's orphans alive after a restart: renews their leases at once and every
/// `lease_renew_seconds`, and after `journal_wait_seconds` abandons those nobody sent again.
pub fn spawn_orphan_keeper(proxy: Arc<Proxy>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let config = &proxy.config;
        let until = Instant::now() + Duration::from_secs_f64(config.journal_wait_seconds.max(0.0));
        let period = Duration::from_secs_f64(config.lease_renew_seconds.max(0.01));
        loop {
            let orphans = proxy.journal.orphans();
            if orphans.is_empty() {
                return;
            }
            for run in &orphans {
                for server in run.servers() {
                    // Leases only: a server that lost the objects will say so at resume.
                    let _ = proxy.cluster.renew(&server, &run.owner).await;
                }
            }
            let now = Instant::now();
            if now >= until {
                break;
            }
            tokio::time::sleep(period.min(until - now)).await;
        }
        for run in proxy.journal.give_up_orphans() {
            proxy
                .abandon(&run, "its client did not send it again in time", true)
                .await;
        }
    })
}
