//! The metaserver's working view of the grid: registered servers with their interfaces, when
//! each last sent a heartbeat, and recent load and network samples. Pure: every method takes
//! the present time, so tests drive it with a fake clock. The resource DB is its durable copy;
//! the registry is rebuilt from it at start-up.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use ninf_idl::FunctionInterface;
use ninf_proto::v1;
use ninf_scheduling::{GridView, History, Link, Location, ServerView};

/// Where a network sample starts or ends when it is the client's site (a proxy).
pub const CLIENT: &str = "client";

/// A measurement the predictor can use: finite, positive throughput and latency >= 0.
fn usable(link: &Link) -> bool {
    link.throughput.is_finite()
        && link.throughput > 0.0
        && link.latency.is_finite()
        && link.latency >= 0.0
}

/// One registered server.
#[derive(Debug, Clone)]
pub struct ServerEntry {
    /// Its row in the resource DB.
    pub id: i64,
    pub address: String,
    pub info: v1::ServerInfo,
    /// Routines it serves, by name. Shared: each graph's planning copies the registry, and
    /// copying the interfaces, which change only when the server registers, took about 5%
    /// of the metaserver's time under `ninf load`.
    pub routines: Arc<BTreeMap<String, FunctionInterface>>,
    /// Modules it could not start, as it last registered.
    pub failed_modules: Vec<v1::FailedModule>,
    /// Unix seconds of the last heartbeat (or registration).
    pub last_heartbeat: f64,
    /// Recent load samples (running plus queued jobs), oldest first.
    pub load: VecDeque<f64>,
    /// The latest sample as received, for status.
    pub latest: Option<v1::LoadSample>,
    /// When the latest load sample arrived (Unix seconds).
    pub load_sampled_at: Option<f64>,
    /// It is leaving (its batch job ends): it takes no new tasks.
    pub draining: bool,
    /// Until when it has work, as far as the metaserver knows (Unix seconds): its latest
    /// placement's predicted finish, or the last sample that showed jobs on it. Allocation
    /// queues let a server go once this is past their idle timeout.
    pub busy_until: f64,
}

/// Servers and monitoring history.
#[derive(Debug, Clone)]
pub struct Registry {
    servers: Vec<ServerEntry>,
    by_address: HashMap<String, usize>,
    /// Recent samples per directed path, oldest first.
    links: HashMap<(String, String), VecDeque<Link>>,
    /// Samples kept per series.
    history: usize,
    /// A server silent for longer is down.
    heartbeat_timeout: f64,
    /// MFLOPS assumed for a server that reports none (it skipped its benchmark).
    default_mflops: f64,
}

impl Registry {
    pub fn new(history: usize, heartbeat_timeout: f64, default_mflops: f64) -> Registry {
        Registry {
            servers: Vec::new(),
            by_address: HashMap::new(),
            links: HashMap::new(),
            history: history.max(1),
            heartbeat_timeout,
            default_mflops,
        }
    }

    /// Adds or replaces a server. Routines whose descriptors do not check are skipped and
    /// returned with the reason, so one bad routine cannot hide a server's others.
    pub fn register(
        &mut self,
        id: i64,
        address: &str,
        info: v1::ServerInfo,
        routines: &[v1::FunctionInterface],
        now: f64,
    ) -> Vec<(String, String)> {
        let mut rejected = Vec::new();
        let mut table = BTreeMap::new();
        for routine in routines {
            match FunctionInterface::try_from(routine) {
                Ok(f) => {
                    table.insert(f.name.clone(), f);
                }
                Err(e) => rejected.push((routine.name.clone(), e.to_string())),
            }
        }
        let entry = ServerEntry {
            id,
            address: address.to_string(),
            info,
            routines: Arc::new(table),
            failed_modules: Vec::new(),
            last_heartbeat: now,
            load: VecDeque::new(),
            latest: None,
            load_sampled_at: None,
            draining: false,
            busy_until: now,
        };
        match self.by_address.get(address) {
            Some(&i) => {
                let load = std::mem::take(&mut self.servers[i].load);
                self.servers[i] = ServerEntry { load, ..entry };
            }
            None => {
                self.by_address
                    .insert(address.to_string(), self.servers.len());
                self.servers.push(entry);
            }
        }
        rejected
    }

    pub fn get(&self, address: &str) -> Option<&ServerEntry> {
        self.by_address.get(address).map(|&i| &self.servers[i])
    }

    /// A server leaving: `draining` takes it out of scheduling while it finishes its calls;
    /// otherwise it is gone (down at once). `false` if it never registered.
    pub fn leave(&mut self, address: &str, draining: bool) -> bool {
        let Some(&i) = self.by_address.get(address) else {
            return false;
        };
        let server = &mut self.servers[i];
        server.draining = true;
        if !draining {
            server.last_heartbeat = f64::NEG_INFINITY;
        }
        true
    }

    /// Notes that `address` has work until `until` (Unix seconds).
    pub fn busy_until(&mut self, address: &str, until: f64) {
        if let Some(&i) = self.by_address.get(address) {
            let server = &mut self.servers[i];
            server.busy_until = server.busy_until.max(until);
        }
    }

    /// When each server must have finished its tasks, relative to `now` (seconds): its
    /// job's end less the longer of `margin` and the time it drains before the end; by
    /// server index, `None` for servers without an end.
    pub fn deadlines(&self, now: f64, margin: f64) -> Vec<Option<f64>> {
        self.servers
            .iter()
            .map(|s| {
                let before = margin.max(s.info.drain_seconds);
                (s.info.walltime_end > 0.0).then_some(s.info.walltime_end - before - now)
            })
            .collect()
    }

    pub fn servers(&self) -> &[ServerEntry] {
        &self.servers
    }

    /// Records a heartbeat; `false` if the address is not registered.
    pub fn heartbeat(&mut self, address: &str, sample: Option<&v1::LoadSample>, now: f64) -> bool {
        let Some(&i) = self.by_address.get(address) else {
            return false;
        };
        let history = self.history;
        let server = &mut self.servers[i];
        server.last_heartbeat = now;
        if let Some(sample) = sample {
            server.load.push_back(demand(sample));
            while server.load.len() > history {
                server.load.pop_front();
            }
            server.latest = Some(*sample);
            server.load_sampled_at = Some(now);
            if sample.running_jobs + sample.queued_jobs > 0 {
                server.busy_until = server.busy_until.max(now);
            }
        }
        true
    }

    /// Seeds a server's load history (at start-up, from the DB).
    pub fn restore_load(&mut self, address: &str, samples: impl IntoIterator<Item = f64>) {
        if let Some(&i) = self.by_address.get(address) {
            let history = self.history;
            let load = &mut self.servers[i].load;
            load.extend(samples);
            while load.len() > history {
                load.pop_front();
            }
        }
    }

    pub fn is_up(&self, server: &ServerEntry, now: f64) -> bool {
        now - server.last_heartbeat <= self.heartbeat_timeout
    }

    /// Up to `limit` addresses of servers that are up, other than `except`: those that follow
    /// it in registration order, wrapping around, starting `turn · limit` places on. Asked
    /// with a turn that moves on (the heartbeat's time), a server is shown every peer in
    /// turn, `limit` at a time: the servers' measurements grow as N · limit, not N².
    pub fn peers_window(&self, except: &str, now: f64, limit: usize, turn: usize) -> Vec<String> {
        let n = self.servers.len();
        if n == 0 {
            return Vec::new();
        }
        let own = self.by_address.get(except).copied().unwrap_or(0);
        let start = own + 1 + turn.wrapping_mul(limit) % n;
        (0..n)
            .map(|k| &self.servers[(start + k) % n])
            .filter(|s| s.address != except && self.is_up(s, now))
            .take(limit)
            .map(|s| s.address.clone())
            .collect()
    }

    /// Addresses of the servers that are up, other than `except`.
    pub fn peers(&self, except: &str, now: f64) -> Vec<String> {
        self.servers
            .iter()
            .filter(|s| s.address != except && self.is_up(s, now))
            .map(|s| s.address.clone())
            .collect()
    }

    /// Records a network sample; `from` and `to` are addresses or [`CLIENT`].
    pub fn add_link(&mut self, from: &str, to: &str, link: Link) {
        if !usable(&link) {
            return;
        }
        let series = self
            .links
            .entry((from.to_string(), to.to_string()))
            .or_default();
        series.push_back(link);
        while series.len() > self.history {
            series.pop_front();
        }
    }

    /// The latest sample of every measured path.
    pub fn latest_links(&self) -> Vec<(String, String, Link)> {
        let mut out: Vec<_> = self
            .links
            .iter()
            .filter_map(|((from, to), s)| s.back().map(|l| (from.clone(), to.clone(), *l)))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// A routine's descriptor as some up server registered it (any server if none is up).
    pub fn describe(&self, function: &str, now: f64) -> Option<&FunctionInterface> {
        let mut any = None;
        for s in &self.servers {
            if let Some(f) = s.routines.get(function) {
                if self.is_up(s, now) {
                    return Some(f);
                }
                any.get_or_insert(f);
            }
        }
        any
    }

    /// Records the modules `address` could not start (its registration says so).
    pub fn set_failed_modules(&mut self, address: &str, failed: Vec<v1::FailedModule>) {
        if let Some(&i) = self.by_address.get(address) {
            self.servers[i].failed_modules = failed;
        }
    }

    /// What the schedulers see: every registered server (down ones marked so) in
    /// registration order, so a server's index is its [`ninf_scheduling::ServerId`].
    pub fn grid_view(&self, now: f64) -> GridView {
        GridView {
            servers: self
                .servers
                .iter()
                .map(|s| ServerView {
                    name: s.address.clone(),
                    flops_per_processor: self.flops_per_processor(s),
                    processors: s.info.processors.max(1),
                    functions: s.routines.keys().cloned().collect::<BTreeSet<_>>(),
                    up: self.is_up(s, now) && !s.draining,
                })
                .collect(),
        }
    }

    /// The speed of one of `server`'s processors the predictor assumes: its benchmark's, or
    /// the configured default when it reported none.
    pub fn flops_per_processor(&self, server: &ServerEntry) -> f64 {
        let mflops = if server.info.mflops > 0.0 {
            server.info.mflops
        } else {
            self.default_mflops
        };
        mflops * 1e6
    }

    /// Monitoring history in the schedulers' terms, with the proxy's own recent
    /// measurements (`client_links`: server address and sample, oldest first) added.
    pub fn history(&self, client_links: &[(String, Link)]) -> History {
        let location = |name: &str| -> Option<Location> {
            if name == CLIENT {
                Some(Location::Client)
            } else {
                self.by_address.get(name).map(|&i| Location::Server(i))
            }
        };
        let mut links: HashMap<(Location, Location), Vec<Link>> = HashMap::new();
        for ((from, to), series) in &self.links {
            if let (Some(a), Some(b)) = (location(from), location(to)) {
                links
                    .entry((a, b))
                    .or_default()
                    .extend(series.iter().copied());
            }
        }
        for (server, link) in client_links {
            if let Some(b) = location(server)
                && usable(link)
            {
                links.entry((Location::Client, b)).or_default().push(*link);
            }
        }
        History {
            load: self
                .servers
                .iter()
                .map(|s| s.load.iter().copied().collect())
                .collect(),
            links,
        }
    }

    /// Index of a server by address.
    pub fn index_of(&self, address: &str) -> Option<usize> {
        self.by_address.get(address).copied()
    }
}

/// The load a sample stands for, in processors wanted, which is what the predictor divides a
/// server's processors by. A gang-scheduled server reports its time table: k busy rows of P
/// processors are k·P wanted, so a job needing all P processors is predicted 1/(k+1) of them
/// (each row gets one slot in k+1), plus one for each queued job. A server without a table
/// counts its running and queued jobs.
pub fn demand(sample: &v1::LoadSample) -> f64 {
    if sample.processors > 0 {
        f64::from(sample.busy_rows) * f64::from(sample.processors) + f64::from(sample.queued_jobs)
    } else {
        f64::from(sample.running_jobs) + f64::from(sample.queued_jobs)
    }
}
