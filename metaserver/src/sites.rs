//! Sites: the network neighbourhoods servers are grouped in, as the Network Weather Service
//! grouped hosts into cliques. Servers measure their paths to the servers of their own site,
//! and one representative per site measures the paths to the other sites' representatives;
//! a path nobody measured is estimated by the samples between its ends' sites. Every server
//! measuring every other was N² paths (10⁸ at 10,000 servers); within sites and between
//! representatives it is the sum of the sites' sizes squared plus the sites squared.
//!
//! A server names its site in its configuration (`site`); one that names none is placed by
//! its address: the /24 of an IPv4 address, the /64 of an IPv6 one, or its host name.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;

use ninf_scheduling::Link;

/// The site of the server at `address` (`host:port`) that declared `declared` (empty: none).
pub fn site_of(address: &str, declared: &str) -> String {
    if !declared.is_empty() {
        return declared.to_string();
    }
    let host = host_of(address);
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            let [a, b, c, _] = ip.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        Ok(IpAddr::V6(ip)) => {
            let s = ip.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
        Err(_) => host.to_string(),
    }
}

/// The host part of `host:port` (`[v6]:port` too); the whole of it when it has no port.
fn host_of(address: &str) -> &str {
    if let Some(rest) = address.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match address.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.parse::<u16>().is_ok() => host,
        _ => address,
    }
}

/// The sites servers have joined, by index in the order they were first seen, with their
/// members (server indices, ascending).
#[derive(Debug, Clone, Default)]
pub struct Sites {
    names: Vec<Arc<str>>,
    index: HashMap<Arc<str>, u32>,
    members: Vec<Vec<usize>>,
}

impl Sites {
    /// Puts `server` in the site `name` (made if new); returns the site's index.
    pub fn join(&mut self, name: &str, server: usize) -> u32 {
        let site = match self.index.get(name) {
            Some(&site) => site,
            None => {
                let site = self.names.len() as u32;
                let name: Arc<str> = Arc::from(name);
                self.names.push(name.clone());
                self.index.insert(name, site);
                self.members.push(Vec::new());
                site
            }
        };
        let members = &mut self.members[site as usize];
        if let Err(at) = members.binary_search(&server) {
            members.insert(at, server);
        }
        site
    }

    /// Takes `server` out of site `site`'s members.
    pub fn leave(&mut self, site: u32, server: usize) {
        if let Some(members) = self.members.get_mut(site as usize)
            && let Ok(at) = members.binary_search(&server)
        {
            members.remove(at);
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn name(&self, site: u32) -> Option<&Arc<str>> {
        self.names.get(site as usize)
    }

    pub fn index_of(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// The servers of site `site`, ascending.
    pub fn members(&self, site: u32) -> &[usize] {
        self.members.get(site as usize).map_or(&[], Vec::as_slice)
    }

    /// The same sites (names and indices) with the servers of a subset as their members:
    /// `sites[k]` is the site of the subset's server `k`. Built from the subset alone, since
    /// a graph's shortlist of 40 servers is cut from 10,000 for every placement.
    pub fn of_subset(&self, sites: impl Iterator<Item = u32>) -> Sites {
        let mut members = vec![Vec::new(); self.names.len()];
        for (server, site) in sites.enumerate() {
            if let Some(m) = members.get_mut(site as usize) {
                m.push(server);
            }
        }
        Sites {
            names: self.names.clone(),
            index: self.index.clone(),
            members,
        }
    }
}

/// The member of `members` (ascending server indices) that represents its site at `turn`:
/// the first one `is_up` from the turn's place on, wrapping around. The role moves from
/// member to member turn by turn, so a representative that dies is replaced at the next
/// turn, and the paths between sites are measured from every member in time.
pub fn representative(
    members: &[usize],
    turn: usize,
    is_up: impl Fn(usize) -> bool,
) -> Option<usize> {
    let n = members.len();
    (0..n)
        .map(|k| members[(turn + k) % n])
        .find(|&server| is_up(server))
}

/// Up to `limit` of `items` other than those `skip` refuses, starting `turn · limit` places
/// after `after` (wrapping): over successive turns every item is shown, `limit` at a time.
pub fn window<T: Copy>(
    items: &[T],
    after: usize,
    turn: usize,
    limit: usize,
    keep: impl Fn(T) -> bool,
) -> Vec<T> {
    let n = items.len();
    if n == 0 {
        return Vec::new();
    }
    let start = after + 1 + turn.wrapping_mul(limit) % n;
    (0..n)
        .map(|k| items[(start + k) % n])
        .filter(|&item| keep(item))
        .take(limit)
        .collect()
}

/// Appends `link` to a path's series, keeping the latest `history` samples.
pub fn push_latest(series: &mut VecDeque<Link>, link: Link, history: usize) {
    series.push_back(link);
    while series.len() > history {
        series.pop_front();
    }
}

/// Network samples between sites, by (from end, to end), oldest first: an end is a site's
/// name, or a client's end of a path (a proxy's, [`crate::registry::CLIENT`] in a planning
/// copy). What a path with no samples of its own is estimated by.
#[derive(Debug, Clone, Default)]
pub struct SiteLinks {
    series: HashMap<Arc<str>, HashMap<Arc<str>, VecDeque<Link>>>,
}

impl SiteLinks {
    /// Adds a sample, keeping the latest `history` of its series.
    pub fn add(&mut self, from: &Arc<str>, to: &Arc<str>, link: Link, history: usize) {
        let series = self
            .series
            .entry(from.clone())
            .or_default()
            .entry(to.clone())
            .or_default();
        push_latest(series, link, history);
    }

    /// The series whose both ends `keep` accepts.
    pub fn among(&self, keep: impl Fn(&str) -> bool) -> SiteLinks {
        let series = self
            .series
            .iter()
            .filter(|(from, _)| keep(from))
            .map(|(from, tos)| {
                let tos = tos
                    .iter()
                    .filter(|(to, _)| keep(to))
                    .map(|(to, s)| (to.clone(), s.clone()))
                    .collect();
                (from.clone(), tos)
            })
            .collect();
        SiteLinks { series }
    }

    /// Every series: (from end, to end, samples).
    pub fn series(&self) -> impl Iterator<Item = (&str, &str, &VecDeque<Link>)> {
        self.series
            .iter()
            .flat_map(|(from, tos)| tos.iter().map(move |(to, s)| (&**from, &**to, s)))
    }

    /// Names the paths from the end `from` as from `to` instead (a proxy's end as the
    /// planning's client), those `to` had before replaced.
    pub fn rename_from(&mut self, from: &str, to: &str) {
        if let Some(tos) = self.series.remove(from) {
            self.series.insert(Arc::from(to), tos);
        }
    }
}
