//! Each server's gang time table, asked of the server itself (the gang master's `Status`):
//! slots switch every quantum, far faster than heartbeats, so the page asks when it draws.

use std::time::Duration;

use ninf_proto::net::auth::AttachToken;
use ninf_proto::net::{ConnectionSettings, connect_lazy};
use ninf_proto::v1;
use ninf_proto::v1::gang_control_client::GangControlClient;

use super::Dashboard;
use super::views::{self, GangView};
use crate::unix_now;

/// How long a server has to answer before the page shows it as unreachable.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// The tables of every server that is up, in registration order.
pub async fn tables(dashboard: &Dashboard) -> Vec<GangView> {
    let up: Vec<String> = {
        let state = dashboard.metaserver.state();
        let now = unix_now();
        state
            .registry
            .servers()
            .iter()
            .filter(|s| state.registry.is_up(s, now))
            .map(|s| s.address.clone())
            .collect()
    };
    let asks = up.iter().map(|server| async move {
        match ask(dashboard, server).await {
            Ok(status) => views::gang_view(server, &status),
            Err(error) => views::gang_unreachable(server, error),
        }
    });
    futures_util::future::join_all(asks).await
}

async fn ask(dashboard: &Dashboard, server: &str) -> Result<v1::GangStatus, String> {
    let channel = {
        let mut channels = ninf_proto::sync::lock(&dashboard.channels);
        match channels.get(server) {
            Some(channel) => channel.clone(),
            None => {
                let settings = ConnectionSettings {
                    connect_timeout: ASK_TIMEOUT,
                    ..ConnectionSettings::default()
                };
                let channel = connect_lazy(server, dashboard.metaserver.tls.as_ref(), settings)
                    .map_err(|e| e.to_string())?;
                channels.insert(server.to_string(), channel.clone());
                channel
            }
        }
    };
    let token = AttachToken::new(dashboard.metaserver.token.as_deref());
    let mut client = GangControlClient::with_interceptor(channel, token);
    match tokio::time::timeout(ASK_TIMEOUT, client.status(v1::GangStatusRequest {})).await {
        Ok(Ok(reply)) => Ok(reply.into_inner()),
        Ok(Err(status)) => Err(status.message().to_string()),
        Err(_) => Err(format!("no answer within {} s", ASK_TIMEOUT.as_secs())),
    }
}
