//! What the metaserver knows, for proxies and people: a routine's interface, and the grid's
//! servers, network and recent graphs (`ninf status`).

use ninf_proto::v1;

use crate::{Metaserver, MetaserverError, unix_now};

impl Metaserver {
    pub fn describe(&self, function: &str) -> Option<v1::FunctionInterface> {
        let state = self.state();
        state
            .registry
            .describe(function, unix_now())
            .map(v1::FunctionInterface::from)
    }

    pub async fn status(&self, recent_graphs: u32) -> Result<v1::GridStatus, MetaserverError> {
        let mut status = self.servers_status(0);
        status.network = {
            let state = self.state();
            state
                .registry
                .latest_links()
                .into_iter()
                .map(|(from, to, link)| v1::NetworkSample {
                    from,
                    to,
                    throughput_bytes_per_second: link.throughput,
                    latency_seconds: link.latency,
                    measured_unix_ms: 0,
                })
                .collect()
        };
        status.graphs = self.db.recent_graphs(recent_graphs).await?;
        status.queues = self.list_queues();
        Ok(status)
    }

    /// The servers alone, unless the asker holds the list as of `seen` (a reply's
    /// `servers_changes`) and nothing has changed since: then none, `servers_unchanged`.
    pub fn servers_status(&self, seen: u64) -> v1::GridStatus {
        let now = unix_now();
        let state = self.state();
        let changes = self
            .servers_epoch
            .wrapping_add(state.registry.changes())
            .max(1);
        let mut status = v1::GridStatus {
            scheduler: self.config.scheduler.clone(),
            predictor: self.config.predictor.clone(),
            servers_changes: changes,
            ..Default::default()
        };
        if seen == changes {
            status.servers_unchanged = true;
            return status;
        }
        status.servers = state
            .registry
            .servers()
            .iter()
            .map(|s| {
                let mut status = server_status(
                    crate::dashboard::views::server_view(&state.registry, s, now),
                    &s.info,
                );
                status.draining = s.draining;
                status
            })
            .collect();
        status
    }
}

/// The status message's row of a server: the dashboard's view of it, its routines by name, and
/// its bulk-data port and same-host socket (where proxies send calls with large arrays).
fn server_status(
    view: crate::dashboard::views::ServerView,
    info: &v1::ServerInfo,
) -> v1::ServerStatus {
    let modules: Vec<String> = view.modules.keys().cloned().collect();
    let mut functions: Vec<String> = view.modules.into_values().flatten().collect();
    functions.sort();
    let failed_modules = view
        .failed_modules
        .into_iter()
        .map(|(executable, reason)| v1::FailedModule { executable, reason })
        .collect();
    let site = crate::sites::site_of(&view.address, &info.site);
    v1::ServerStatus {
        address: view.address,
        up: view.up,
        mflops: view.mflops,
        processors: view.processors,
        cpus: view.cpus,
        load: view.load,
        stored_bytes: view.stored_bytes,
        seconds_since_heartbeat: view.seconds_since_heartbeat,
        functions,
        running_jobs: view.running_jobs,
        queued_jobs: view.queued_jobs,
        modules,
        failed_modules,
        bulk_address: info.bulk_address.clone(),
        bulk_local: info.bulk_local.clone(),
        walltime_end: info.walltime_end,
        batch_job: info.batch_job.clone(),
        allocation: info.allocation.clone(),
        draining: false,
        data_cap_bytes: info.data_cap_bytes,
        site,
    }
}
