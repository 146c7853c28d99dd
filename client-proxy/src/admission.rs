//! Per-client limits at the proxy: how many transactions one client may have running at
//! once. A client over its limit is refused at once with RESOURCE_EXHAUSTED naming the limit,
//! before anything is scheduled or stored, so one client cannot crowd out the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tonic::Status;

/// Running transactions per client.
#[derive(Debug)]
pub struct ClientAdmission {
    limit: usize,
    running: Mutex<HashMap<String, usize>>,
}

/// A transaction's place in its client's count; given back when dropped.
#[derive(Debug)]
pub struct Admitted {
    admission: Arc<ClientAdmission>,
    client: String,
}

impl ClientAdmission {
    pub fn new(limit: usize) -> Arc<ClientAdmission> {
        Arc::new(ClientAdmission {
            limit: limit.max(1),
            running: Mutex::new(HashMap::new()),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // Every update is one increment or decrement: a poisoned map is still consistent.
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts a new transaction of `client`, or refuses it when the client is at its limit.
    pub fn admit(self: &Arc<Self>, client: &str) -> Result<Admitted, Status> {
        let mut counts = self.counts();
        let running = counts.entry(client.to_string()).or_insert(0);
        if *running >= self.limit {
            return Err(Status::resource_exhausted(format!(
                "client {client} already runs {} transactions, the proxy's limit \
                 (max_transactions_per_client); wait for one to finish",
                *running
            )));
        }
        *running += 1;
        Ok(Admitted {
            admission: self.clone(),
            client: client.to_string(),
        })
    }

    /// Transactions `client` has running.
    pub fn running(&self, client: &str) -> usize {
        self.counts().get(client).copied().unwrap_or(0)
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut counts = self.admission.counts();
        if let Some(running) = counts.get_mut(&self.client) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_client_at_its_limit_is_refused_until_one_finishes() {
        let admission = ClientAdmission::new(2);
        let first = admission.admit("10.0.0.1").unwrap();
        let _second = admission.admit("10.0.0.1").unwrap();
        let refused = admission.admit("10.0.0.1").unwrap_err();
        assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            refused.message(),
            "client 10.0.0.1 already runs 2 transactions, the proxy's limit \
             (max_transactions_per_client); wait for one to finish"
        );
        // Other clients are not affected.
        let _other = admission.admit("10.0.0.2").unwrap();
        drop(first);
        assert_eq!(admission.running("10.0.0.1"), 1);
        let _third = admission.admit("10.0.0.1").unwrap();
        assert_eq!(admission.running("10.0.0.1"), 2);
    }
}
