//! The metaserver's working view of the grid: registered servers with their interfaces, when
//! each last sent a heartbeat, and recent load and network samples. Pure: every method takes
//! the present time, so tests drive it with a fake clock. The resource DB is its durable copy;
//! the registry is rebuilt from it at start-up.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use ninf_idl::FunctionInterface;
use ninf_proto::v1;
use ninf_scheduling::{GridView, History, Link, Location, ServerView, Site};

use crate::sites::{self, SiteLinks, Sites};

/// Where a network sample starts or ends when it is the client's site (a proxy).
pub const CLIENT: &str = "client";

/// Whether a path's end named `name` is a client's (a proxy's) rather than a server's.
/// Paths from one server whose series are kept: those it measured most recently (a proxy's
/// paths, one to every server, are all kept).
pub const PATHS_KEPT_PER_SERVER: usize = 64;

fn is_client_end(name: &str) -> bool {
    name == CLIENT
        || name
            .strip_prefix(CLIENT)
            .is_some_and(|rest| rest.starts_with(':'))
}

/// The names of the sites `servers` are in.
fn kept_sites<'a>(servers: &[ServerEntry], sites: &'a Sites) -> HashSet<&'a str> {
    servers
        .iter()
        .filter_map(|s| sites.name(s.site).map(|name| &**name))
        .collect()
}

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
    /// Its site, by index in the registry's [`Sites`] (see [`crate::sites`]).
    pub site: u32,
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

/// What ranking a server for a graph's shortlist reads, kept beside the entries and
/// compact: ranking 10,000 servers through their entries, each field a cache miss away
/// from the last, took 9-15 ms a graph ([`crate::shortlist`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rank {
    pub last_heartbeat: f64,
    pub draining: bool,
    pub processors: f64,
    pub flops_per_processor: f64,
    /// The latest load sample's demand ([`demand`]), 0 without one.
    pub demand: f64,
}

/// Servers and monitoring history.
#[derive(Debug, Clone)]
pub struct Registry {
    servers: Vec<ServerEntry>,
    /// By server index, as [`Registry::refresh_rank`] last set it.
    ranks: Vec<Rank>,
    by_address: HashMap<String, usize>,
    /// The servers that registered each routine, by index, ascending: a graph's shortlist
    /// ranks these, not the whole grid ([`crate::shortlist`]).
    by_routine: HashMap<String, Vec<usize>>,
    /// Recent samples per directed path (from, then to), oldest first. Nested so that a
    /// planning's copy of a few servers' paths is looked up by address, without the whole
    /// map: at 10,000 servers heartbeats held 160,000 paths.
    links: HashMap<String, HashMap<String, VecDeque<Link>>>,
    /// Per server, the ends of its paths kept in `links`, least recently measured first
    /// ([`PATHS_KEPT_PER_SERVER`]).
    recent_ends: HashMap<String, VecDeque<String>>,
    /// The sites servers are in, and the samples between them: the estimates of the paths
    /// that have no samples of their own.
    sites: Sites,
    site_links: SiteLinks,
    /// Samples kept per series.
    history: usize,
    /// A server silent for longer is down.
    heartbeat_timeout: f64,
    /// MFLOPS assumed for a server that reports none (it skipped its benchmark).
    default_mflops: f64,
    /// Counts the changes to which servers there are and which are up (registrations,
    /// leaves, servers found silent or back): a proxy holding the list as of one count
    /// need not be sent it again.
    changes: u64,
}

impl Registry {
    pub fn new(history: usize, heartbeat_timeout: f64, default_mflops: f64) -> Registry {
        Registry {
            servers: Vec::new(),
            ranks: Vec::new(),
            by_address: HashMap::new(),
            by_routine: HashMap::new(),
            links: HashMap::new(),
            recent_ends: HashMap::new(),
            sites: Sites::default(),
            site_links: SiteLinks::default(),
            history: history.max(1),
            heartbeat_timeout,
            default_mflops,
            changes: 0,
        }
    }

    /// How many times the server list has changed ([`Registry::changed`]).
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Notes a change to the server list that the registry cannot see by itself: servers
    /// found silent.
    pub fn changed(&mut self) {
        self.changes += 1;
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
        let index = self
            .by_address
            .get(address)
            .copied()
            .unwrap_or(self.servers.len());
        if let Some(old) = self.servers.get(index) {
            self.sites.leave(old.site, index);
        }
        let site = self.sites.join(&sites::site_of(address, &info.site), index);
        let entry = ServerEntry {
            id,
            address: address.to_string(),
            site,
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
        let index = match self.by_address.get(address) {
            Some(&i) => {
                self.unindex_routines(i);
                let load = std::mem::take(&mut self.servers[i].load);
                self.servers[i] = ServerEntry { load, ..entry };
                i
            }
            None => {
                let i = self.servers.len();
                self.by_address.insert(address.to_string(), i);
                self.servers.push(entry);
                i
            }
        };
        self.index_routines(index);
        self.refresh_rank(index);
        self.changed();
        rejected
    }

    /// Sets server `index`'s [`Rank`] from its entry.
    fn refresh_rank(&mut self, index: usize) {
        let Some(server) = self.servers.get(index) else {
            return;
        };
        let rank = Rank {
            last_heartbeat: server.last_heartbeat,
            draining: server.draining,
            processors: f64::from(server.info.processors.max(1)),
            flops_per_processor: self.flops_per_processor(server),
            demand: server.load.back().copied().unwrap_or(0.0),
        };
        if index >= self.ranks.len() {
            self.ranks.resize(index + 1, rank);
        }
        self.ranks[index] = rank;
    }

    /// Server `index`'s [`Rank`].
    pub fn rank(&self, index: usize) -> Option<&Rank> {
        self.ranks.get(index)
    }

    /// Whether a server whose rank is `rank` is up at `now` ([`Registry::is_up`]).
    pub fn rank_is_up(&self, rank: &Rank, now: f64) -> bool {
        now - rank.last_heartbeat <= self.heartbeat_timeout
    }

    fn index_routines(&mut self, index: usize) {
        for name in self.servers[index].routines.keys() {
            let servers = self.by_routine.entry(name.clone()).or_default();
            if let Err(at) = servers.binary_search(&index) {
                servers.insert(at, index);
            }
        }
    }

    fn unindex_routines(&mut self, index: usize) {
        for name in self.servers[index].routines.keys() {
            if let Some(servers) = self.by_routine.get_mut(name)
                && let Ok(at) = servers.binary_search(&index)
            {
                servers.remove(at);
            }
        }
    }

    /// The servers that registered `function`, by index, ascending (up or not).
    pub fn serving(&self, function: &str) -> &[usize] {
        self.by_routine.get(function).map_or(&[], Vec::as_slice)
    }

    /// A registry of only the servers at `indices` (ascending, each once), in that order,
    /// with the paths measured between them and the client: what one graph is planned on.
    pub fn subset(&self, indices: &[usize]) -> Registry {
        let servers: Vec<ServerEntry> = indices
            .iter()
            .filter_map(|&i| self.servers.get(i).cloned())
            .collect();
        let by_address: HashMap<String, usize> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| (s.address.clone(), i))
            .collect();
        let sites = self.sites.of_subset(servers.iter().map(|s| s.site));
        let present: HashSet<&str> = kept_sites(&servers, &self.sites);
        let site_links = self
            .site_links
            .among(|end| present.contains(end) || is_client_end(end));
        let mut kept = Registry {
            servers,
            ranks: Vec::new(),
            by_address,
            by_routine: HashMap::new(),
            links: HashMap::new(),
            recent_ends: HashMap::new(),
            sites,
            site_links,
            ..*self
        };
        for i in 0..kept.servers.len() {
            kept.index_routines(i);
            kept.refresh_rank(i);
        }
        kept.links = self.links_among(&kept.by_address);
        kept
    }

    /// The measured paths whose both ends are among `ends` or the client.
    fn links_among(
        &self,
        ends: &HashMap<String, usize>,
    ) -> HashMap<String, HashMap<String, VecDeque<Link>>> {
        let kept = |name: &str| name == CLIENT || ends.contains_key(name);
        let mut out = HashMap::new();
        let froms = ends.keys().map(String::as_str).chain([CLIENT]);
        for from in froms {
            let Some(tos) = self.links.get(from) else {
                continue;
            };
            // The client's paths reach every server a proxy measured: look those up from
            // the few ends rather than walk them all.
            let series: HashMap<String, VecDeque<Link>> = if tos.len() <= ends.len() + 1 {
                tos.iter()
                    .filter(|(to, _)| kept(to))
                    .map(|(to, s)| (to.clone(), s.clone()))
                    .collect()
            } else {
                ends.keys()
                    .map(String::as_str)
                    .chain([CLIENT])
                    .filter_map(|to| tos.get(to).map(|s| (to.to_string(), s.clone())))
                    .collect()
            };
            if !series.is_empty() {
                out.insert(from.to_string(), series);
            }
        }
        out
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
        self.refresh_rank(i);
        self.changed();
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
        if !self.is_up(&self.servers[i], now) {
            self.changed();
        }
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
        self.refresh_rank(i);
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
            self.refresh_rank(i);
        }
    }

    pub fn is_up(&self, server: &ServerEntry, now: f64) -> bool {
        now - server.last_heartbeat <= self.heartbeat_timeout
    }

    /// The peers `address` is to measure its paths to this `turn` ([`crate::sites`]): up to
    /// `limit` of its own site's servers that are up, in a window that moves on each turn,
    /// and, when it is its site's representative this turn, up to `limit` other sites'
    /// representatives, in a window of sites that moves on likewise. Asked with a turn that
    /// moves on (the heartbeat's time), a server is shown every peer of its site in turn and
    /// every site's representative is shown every other's: the measurements grow as
    /// N · limit, not N².
    pub fn peers_to_probe(
        &self,
        address: &str,
        now: f64,
        limit: usize,
        turn: usize,
    ) -> Vec<String> {
        let Some(&own) = self.by_address.get(address) else {
            return Vec::new();
        };
        let site = self.servers[own].site;
        let up = |i: usize| self.is_up(&self.servers[i], now);
        let members = self.sites.members(site);
        let at = members.binary_search(&own).unwrap_or(0);
        let mut peers = sites::window(members, at, turn, limit, |i| i != own && up(i));
        if sites::representative(members, turn, up) == Some(own) {
            let others: Vec<u32> = (0..self.sites.len() as u32).collect();
            let representatives = sites::window(&others, site as usize, turn, limit, |s| {
                s != site && sites::representative(self.sites.members(s), turn, up).is_some()
            });
            peers.extend(
                representatives
                    .into_iter()
                    .filter_map(|s| sites::representative(self.sites.members(s), turn, up)),
            );
        }
        peers
            .into_iter()
            .map(|i| self.servers[i].address.clone())
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
            .entry(from.to_string())
            .or_default()
            .entry(to.to_string())
            .or_default();
        sites::push_latest(series, link, self.history);
        if !is_client_end(from) {
            self.keep_recent(from, to);
        }
        if let (Some(a), Some(b)) = (self.site_end(from), self.site_end(to)) {
            self.site_links.add(&a, &b, link, self.history);
        }
    }

    /// Notes that `from` measured its path to `to` last, and forgets the series of its path
    /// measured longest ago beyond [`PATHS_KEPT_PER_SERVER`]: servers measuring the peers
    /// of their site in turn reach every pair of it, 2.5 million at 10,000 servers in sites
    /// of 250: the metaserver's memory grew to 605 MiB in a 540 s `ninf scale`, 449 MiB
    /// with the cap. A path forgotten is estimated from its sites' series, as one never
    /// measured is.
    fn keep_recent(&mut self, from: &str, to: &str) {
        let ends = self.recent_ends.entry(from.to_string()).or_default();
        if let Some(at) = ends.iter().position(|end| end == to) {
            ends.remove(at);
        }
        ends.push_back(to.to_string());
        while ends.len() > PATHS_KEPT_PER_SERVER {
            if let (Some(oldest), Some(tos)) = (ends.pop_front(), self.links.get_mut(from)) {
                tos.remove(&oldest);
            }
        }
    }

    /// The end of the paths between sites that a path's end `name` belongs to: a server's
    /// site, or a client's own end; `None` for an address nobody registered.
    fn site_end(&self, name: &str) -> Option<Arc<str>> {
        match self.by_address.get(name) {
            Some(&i) => self.sites.name(self.servers[i].site).cloned(),
            None => is_client_end(name).then(|| Arc::from(name)),
        }
    }

    /// Makes `client`'s paths between sites the planning's client's ([`CLIENT`]), as the
    /// planning is given the proxy's own samples: for a copy that plans `client`'s graph.
    pub fn plan_for_client(&mut self, client: &str) {
        self.site_links.rename_from(client, CLIENT);
    }

    /// The latest sample of every measured path.
    pub fn latest_links(&self) -> Vec<(String, String, Link)> {
        let mut out: Vec<_> = self
            .links
            .iter()
            .flat_map(|(from, tos)| {
                tos.iter()
                    .filter_map(|(to, s)| s.back().map(|l| (from.clone(), to.clone(), *l)))
            })
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        out
    }

    /// The samples of the paths from `from` to each of `servers` (by address), oldest
    /// first: a proxy's own measurements, as the planning takes them.
    pub fn series_from(&self, from: &str, servers: &[ServerEntry]) -> Vec<(String, Link)> {
        let Some(tos) = self.links.get(from) else {
            return Vec::new();
        };
        servers
            .iter()
            .filter_map(|s| tos.get(&s.address).map(|series| (s, series)))
            .flat_map(|(s, series)| series.iter().map(|l| (s.address.clone(), *l)))
            .collect()
    }

    /// The latest sample of each path measured from `from` (an address or [`CLIENT`]).
    pub fn latest_from(&self, from: &str) -> impl Iterator<Item = (&str, &Link)> {
        self.links
            .get(from)
            .into_iter()
            .flatten()
            .filter_map(|(to, s)| s.back().map(|l| (to.as_str(), l)))
    }

    /// A routine's descriptor as some up server registered it (any server if none is up).
    pub fn describe(&self, function: &str, now: f64) -> Option<&FunctionInterface> {
        let mut any = None;
        for s in self.serving(function).iter().map(|&i| &self.servers[i]) {
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
        for (from, tos) in &self.links {
            let Some(a) = location(from) else { continue };
            for (to, series) in tos {
                if let Some(b) = location(to) {
                    links
                        .entry((a, b))
                        .or_default()
                        .extend(series.iter().copied());
                }
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
            sites: self.servers.iter().map(|s| s.site).collect(),
            site_links: self.site_history(),
        }
    }

    /// The samples between sites as the predictor names their ends.
    fn site_history(&self) -> HashMap<(Site, Site), Vec<Link>> {
        let end = |name: &str| -> Option<Site> {
            if name == CLIENT {
                Some(Site::Client)
            } else {
                self.sites.index_of(name).map(Site::Servers)
            }
        };
        self.site_links
            .series()
            .filter_map(|(from, to, series)| {
                Some(((end(from)?, end(to)?), series.iter().copied().collect()))
            })
            .collect()
    }

    /// Index of a server by address.
    pub fn index_of(&self, address: &str) -> Option<usize> {
        self.by_address.get(address).copied()
    }

    /// The other servers up at `now` on the host of server `index` (the same
    /// `ServerInfo.host`, when it says one): they read its stored arrays where they lie.
    pub fn same_host(&self, index: usize, now: f64) -> Vec<usize> {
        let Some(host) = self
            .servers
            .get(index)
            .map(|s| s.info.host.as_str())
            .filter(|host| !host.is_empty())
        else {
            return Vec::new();
        };
        self.servers
            .iter()
            .enumerate()
            .filter(|(i, s)| *i != index && s.info.host == host && self.is_up(s, now))
            .map(|(i, _)| i)
            .collect()
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
