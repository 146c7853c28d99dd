//! Connections to other compute servers (their storage, for arguments held there; their
//! monitor, for network samples). Connecting happens outside the table's lock, so one dead
//! or unreachable peer, which takes the connect timeout to fail, never holds up fetches from
//! the others; and a peer that just failed is refused at once for a short while instead of
//! making every call that needs it wait out the timeout again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ninf_proto::net::tls::GridTls;
use tonic::transport::Channel;

/// How long a failed connection attempt is remembered.
pub const REMEMBER_FAILURE: Duration = Duration::from_secs(1);

/// Connect failures by peer, with the time they happened. Pure: the caller passes the clock.
#[derive(Debug, Default)]
pub struct FailureMemory {
    failures: HashMap<String, (Instant, String)>,
}

impl FailureMemory {
    pub fn failed(&mut self, peer: &str, now: Instant, reason: String) {
        self.failures.insert(peer.to_string(), (now, reason));
    }

    pub fn connected(&mut self, peer: &str) {
        self.failures.remove(peer);
    }

    /// The failure to report for `peer` at `now`, if one is recent enough to trust.
    pub fn recent(&self, peer: &str, now: Instant) -> Option<String> {
        let (when, reason) = self.failures.get(peer)?;
        let age = now.saturating_duration_since(*when);
        (age < REMEMBER_FAILURE).then(|| {
            format!(
                "{reason} ({:.1} s ago; not retried for {:.0} s)",
                age.as_secs_f64(),
                REMEMBER_FAILURE.as_secs_f64()
            )
        })
    }
}

#[derive(Default)]
struct Table {
    channels: HashMap<String, Channel>,
    failures: FailureMemory,
}

/// The channels to a server's peers, reused across calls.
#[derive(Default)]
pub struct Peers {
    table: Mutex<Table>,
}

impl Peers {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table holds plain data; a panic elsewhere while it was held leaves it usable.
        ninf_proto::sync::lock(&self.table)
    }

    /// A channel to `peer`, connecting (outside the lock) if there is none yet.
    pub async fn channel(&self, peer: &str, tls: Option<&GridTls>) -> Result<Channel, String> {
        {
            let table = self.table();
            if let Some(channel) = table.channels.get(peer) {
                return Ok(channel.clone());
            }
            if let Some(failure) = table.failures.recent(peer, Instant::now()) {
                return Err(failure);
            }
        }
        // Pinged (the network layer's keepalive), so a call reading from a peer that hangs
        // fails, and the proxy regenerates the input, instead of waiting forever.
        let connected =
            ninf_proto::net::connect(peer, tls, ninf_proto::net::ConnectionSettings::default())
                .await;
        let mut table = self.table();
        match connected {
            Ok(channel) => {
                table.failures.connected(peer);
                // Another call may have connected meanwhile; keep one channel per peer.
                Ok(table
                    .channels
                    .entry(peer.to_string())
                    .or_insert(channel)
                    .clone())
            }
            Err(e) => {
                let reason = e.to_string();
                table.failures.failed(peer, Instant::now(), reason.clone());
                Err(reason)
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_remembered_briefly_then_forgotten() {
        let mut memory = FailureMemory::default();
        let t0 = Instant::now();
        memory.failed("a:1", t0, "cannot connect to a:1: refused".into());
        let shown = memory
            .recent("a:1", t0 + Duration::from_millis(300))
            .unwrap();
        assert!(
            shown.starts_with("cannot connect to a:1: refused (0.3 s ago"),
            "{shown}"
        );
        assert!(
            memory.recent("b:1", t0).is_none(),
            "other peers are unaffected"
        );
        assert!(memory.recent("a:1", t0 + REMEMBER_FAILURE).is_none());
        memory.failed("a:1", t0, "x".into());
        memory.connected("a:1");
        assert!(memory.recent("a:1", t0).is_none());
    }

    #[tokio::test]
    async fn a_hung_peer_does_not_hold_up_a_live_one() {
        // Over TLS, a peer whose listener never answers the handshake keeps a connect
        // waiting for the connect timeout. A connection to a live peer meanwhile must not
        // wait behind it.
        let dir = std::env::temp_dir().join(format!("ninf-peers-{}", std::process::id()));
        ninf_proto::net::tls::generate(&dir, &["server"], &["127.0.0.1".into()]).unwrap();
        let tls = GridTls::load(&ninf_proto::net::tls::files_in(&dir, "server", true)).unwrap();
        let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let hung_address = hung.local_addr().unwrap().to_string();
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_address = live.local_addr().unwrap().to_string();
        let (_, health) = tonic_health::server::health_reporter();
        let server = ninf_proto::net::server(Some(&tls))
            .unwrap()
            .add_service(health)
            .serve_with_incoming(ninf_proto::net::incoming(live));
        let serving = tokio::spawn(server);

        let peers = std::sync::Arc::new(Peers::default());
        let stuck = {
            let (peers, tls) = (peers.clone(), tls.clone());
            tokio::spawn(async move { peers.channel(&hung_address, Some(&tls)).await })
        };
        tokio::task::yield_now().await;
        let live_channel = peers.channel(&live_address, Some(&tls)).await;
        assert!(live_channel.is_ok(), "{:?}", live_channel.err());
        assert!(!stuck.is_finished(), "the hung peer is still connecting");
        stuck.abort();
        serving.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
