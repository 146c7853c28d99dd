//! Which servers one graph is planned on. The schedulers weigh every server they are given
//! for every task, and the planning copies each server's history and paths first: at 10,000
//! emulated servers a 10-task graph waited 171 ms for its placement at the median and
//! 618 ms at p99 (`ninf scale`), nearly all of it spent on servers no task could want.
//!
//! So a graph on a large grid is planned on a shortlist: for each routine it calls, the
//! [`Shortlist::per_routine`] servers serving it that should run it soonest (the most
//! processor speed for the load they carry, counting the placements made since their last
//! load sample, which no sample shows yet), the [`Shortlist::near_client`] of them with the
//! fastest measured path from the client, and every server holding data the graph reads or
//! writes. Servers that are down, draining or to be avoided come last, so a routine only
//! they serve still finds them and fails as it would on the whole grid. Ties, which a grid
//! of identical idle servers is made of, are broken by a rotation that moves on with every
//! graph, so a burst of graphs spreads over the grid instead of meeting on the servers that
//! registered first. A grid of at most [`Shortlist::whole_grid_up_to`] servers is planned
//! whole. Pure: the time and the turn are parameters.

use std::collections::{BTreeSet, HashMap};

use ninf_proto::v1;

use crate::registry::Registry;

/// How many servers a graph is planned on (the metaserver's `[shortlist]`).
///
/// ```toml
/// [shortlist]
/// per_routine = 32         # servers kept for each routine a graph calls, by predicted speed
/// near_client = 8          # and by their measured path from the client
/// whole_grid_up_to = 256   # a grid of at most this many servers is planned whole
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Shortlist {
    /// Servers kept for each routine the graph calls, by predicted speed.
    pub per_routine: usize,
    /// Servers kept for each routine by their measured path from the client.
    pub near_client: usize,
    /// A grid of at most this many servers is planned whole, as the papers' schedulers did.
    pub whole_grid_up_to: usize,
}

impl Default for Shortlist {
    fn default() -> Shortlist {
        Shortlist {
            per_routine: 32,
            near_client: 8,
            whole_grid_up_to: 256,
        }
    }
}

/// What a shortlist is drawn from besides the registry.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub graph: &'a v1::TaskGraph,
    /// The asking proxy's end of its measured paths in the registry (`client:<proxy>`).
    pub client: &'a str,
    /// Servers the proxy asked to be placed around, by address.
    pub avoid: &'a [String],
    /// Processors of placements made on each server (by address) since its last load
    /// sample: load the metaserver knows of and the sample does not show yet.
    pub placed_since_sample: &'a HashMap<&'a str, u32>,
    /// Moves on with every graph: where the rotation that breaks ties starts.
    pub turn: u64,
    pub now: f64,
}

impl Shortlist {
    /// The indices (ascending) of the servers to plan `asked.graph` on, or `None` when the
    /// grid is small enough to plan whole.
    pub fn choose(&self, registry: &Registry, asked: &Asked<'_>) -> Option<Vec<usize>> {
        let servers = registry.servers();
        if servers.len() <= self.whole_grid_up_to {
            return None;
        }
        let mut chosen = BTreeSet::new();
        let functions: BTreeSet<&str> = asked
            .graph
            .tasks
            .iter()
            .map(|t| t.function.as_str())
            .collect();
        let pool = self.near_client.saturating_mul(16).max(64);
        let near = client_throughputs(registry, asked.client, pool);
        // By index, so that ranking 10,000 servers hashes no address.
        let mut placed = vec![0.0; servers.len()];
        for (address, processors) in asked.placed_since_sample {
            if let Some(i) = registry.index_of(address) {
                placed[i] = f64::from(*processors);
            }
        }
        let ranking = Ranking {
            registry,
            asked,
            placed,
        };
        for function in functions {
            let serving = registry.serving(function);
            chosen.extend(self.fastest(&ranking, serving));
            chosen.extend(nearest(&ranking, serving, &near, self.near_client));
        }
        let holders = asked.graph.tasks.iter().flat_map(|t| &t.data);
        for address in holders.flat_map(|d| &d.servers) {
            chosen.extend(registry.index_of(address));
        }
        Some(chosen.into_iter().collect())
    }

    /// The `per_routine` of `serving` predicted to run a call soonest.
    fn fastest(&self, ranking: &Ranking<'_>, serving: &[usize]) -> Vec<usize> {
        let n = ranking.registry.servers().len().max(1);
        let start = (ranking.asked.turn as usize).wrapping_mul(self.per_routine) % n;
        let mut ranked: Vec<(u8, f64, usize, usize)> = serving
            .iter()
            .map(|&i| {
                let (tier, seconds) = ranking.cost(i);
                (tier, seconds, (i + n - start) % n, i)
            })
            .collect();
        let by_rank = |a: &(u8, f64, usize, usize), b: &(u8, f64, usize, usize)| {
            a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2))
        };
        let keep = self.per_routine.min(ranked.len());
        if keep < ranked.len() {
            ranked.select_nth_unstable_by(keep, by_rank);
            ranked.truncate(keep);
        }
        ranked.into_iter().map(|(.., i)| i).collect()
    }
}

/// What servers are ranked by.
struct Ranking<'a> {
    registry: &'a Registry,
    asked: &'a Asked<'a>,
    /// Processors placed since each server's sample, by index.
    placed: Vec<f64>,
}

impl Ranking<'_> {
    /// How a server ranks for a call: its tier (0 takes tasks, 1 is to be avoided, 2 takes
    /// none: down or draining), then the seconds a gigaflop would take on it with the load
    /// it carries (its latest sample's demand plus what was placed since).
    fn cost(&self, index: usize) -> (u8, f64) {
        let (registry, asked) = (self.registry, self.asked);
        let Some(rank) = registry.rank(index) else {
            return (2, f64::MAX);
        };
        let tier = if !registry.rank_is_up(rank, asked.now) || rank.draining {
            2
        } else if !asked.avoid.is_empty()
            && asked.avoid.contains(&registry.servers()[index].address)
        {
            1
        } else {
            0
        };
        let placed = self.placed.get(index).copied().unwrap_or(0.0);
        let share = rank.processors / (rank.processors + rank.demand + placed).max(rank.processors);
        let speed = rank.flops_per_processor * rank.processors * share;
        (tier, if speed > 0.0 { 1e9 / speed } else { f64::MAX })
    }
}

/// The servers with the fastest latest measured path from the client, fastest first, as
/// (throughput, index): the asking proxy's measurements and those of the client's site in
/// general, at most `pool` of them. Found before any address is looked up: looking up each
/// of 10,000 measured paths' servers was most of a shortlist's time.
fn client_throughputs(registry: &Registry, client: &str, pool: usize) -> Vec<(f64, usize)> {
    let mut measured: Vec<(f64, &str)> = registry
        .latest_from(crate::registry::CLIENT)
        .chain(registry.latest_from(client))
        .filter(|(_, link)| link.throughput.is_finite() && link.throughput > 0.0)
        .map(|(to, link)| (link.throughput, to))
        .collect();
    let fastest_first = |a: &(f64, &str), b: &(f64, &str)| b.0.total_cmp(&a.0).then(a.1.cmp(b.1));
    if pool < measured.len() {
        measured.select_nth_unstable_by(pool, fastest_first);
        measured.truncate(pool);
    }
    measured.sort_by(fastest_first);
    let mut seen = BTreeSet::new();
    measured
        .into_iter()
        .filter_map(|(t, to)| Some((t, registry.index_of(to)?)))
        .filter(|(_, i)| seen.insert(*i))
        .collect()
}

/// The `limit` of `serving` that take tasks with the fastest measured path from the client.
fn nearest(
    ranking: &Ranking<'_>,
    serving: &[usize],
    near: &[(f64, usize)],
    limit: usize,
) -> Vec<usize> {
    near.iter()
        .filter(|(_, i)| serving.binary_search(i).is_ok() && ranking.cost(*i).0 == 0)
        .take(limit)
        .map(|&(_, i)| i)
        .collect()
}
