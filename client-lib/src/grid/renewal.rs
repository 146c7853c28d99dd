//! The background renewal of a client's data handles (docs/data.md, "Leases"): started with
//! its first handle, it renews every handle of the client a few times per lease, and stops
//! when the last clone of the client goes, so a dead client's handles run out.

use std::sync::{Arc, Mutex};

use ninf_proto::net::auth::AttachToken;
use ninf_proto::v1;
use tonic::transport::Channel;

/// The background renewal of a client's handles: started with its first handle, stopped
/// when the last clone of the client goes.
#[derive(Default)]
pub(crate) struct Renewal(Mutex<Option<tokio::task::JoinHandle<()>>>);

impl Drop for Renewal {
    fn drop(&mut self) {
        if let Some(task) = ninf_proto::sync::lock(&self.0).take() {
            task.abort();
        }
    }
}

impl Renewal {
    pub(crate) fn start(
        &self,
        (channel, token, identity): (Channel, AttachToken, tonic::metadata::AsciiMetadataValue),
        lease_seconds: f64,
    ) {
        let mut task = ninf_proto::sync::lock(&self.0);
        if task.is_some() {
            return;
        }
        let period = std::time::Duration::from_secs_f64((lease_seconds / 4.0).max(0.05));
        *task = Some(tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.tick().await;
            loop {
                ticker.tick().await;
                let mut proxy =
                    v1::proxy_client::ProxyClient::with_interceptor(channel.clone(), token.clone());
                let mut request = tonic::Request::new(v1::RenewDataRequest { ids: Vec::new() });
                request
                    .metadata_mut()
                    .insert(ninf_proto::net::CLIENT_ID_METADATA, identity.clone());
                if let Err(status) = proxy.renew_data(request).await {
                    tracing::debug!(error = %status.message(), "renewing data handles failed");
                }
            }
        }));
    }
}

/// The renewal state every clone of one client shares.
pub(crate) type SharedRenewal = Arc<Renewal>;
