//! Sites (NWS cliques) under a fake clock: which site a server is in, which peers each
//! heartbeat names for it to measure, and how the paths nobody measured are estimated.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use crate::common::linpack;
use ninf_metaserver::Registry;
use ninf_metaserver::sites::site_of;
use ninf_proto::v1;
use ninf_scheduling::{Link, LoadPredictor, Location, Predictor, PredictorKind};

fn info(site: &str) -> v1::ServerInfo {
    v1::ServerInfo {
        mflops: 500.0,
        processors: 2,
        cpus: 2,
        site: site.to_string(),
        ..Default::default()
    }
}

fn link(throughput: f64) -> Link {
    Link {
        throughput,
        latency: 0.01,
    }
}

/// Three sites of four servers by address (10.0.S.K), registered interleaved.
fn three_sites() -> (Registry, Vec<String>) {
    let mut registry = Registry::new(8, 5.0, 1000.0);
    let mut names = Vec::new();
    for k in 1..=4 {
        for site in 1..=3 {
            let name = format!("10.0.{site}.{k}:7000");
            registry.register(names.len() as i64 + 1, &name, info(""), &linpack(), 0.0);
            names.push(name);
        }
    }
    (registry, names)
}

fn site(name: &str) -> String {
    site_of(name, "")
}

#[test]
fn a_server_is_in_the_site_it_names_else_in_its_addresss_neighbourhood() {
    assert_eq!(site_of("10.1.2.3:7000", ""), "10.1.2.0/24");
    assert_eq!(site_of("10.1.2.200:7001", ""), "10.1.2.0/24");
    assert_eq!(site_of("[2001:db8:1:2::5]:7000", ""), "2001:db8:1:2::/64");
    assert_eq!(site_of("node7.example.org:7000", ""), "node7.example.org");
    assert_eq!(site_of("10.1.2.3:7000", "tokyo"), "tokyo");
}

#[test]
fn servers_measure_their_own_site_and_only_representatives_cross_sites() {
    let (registry, names) = three_sites();
    let now = 1.0;
    let mut crossing = Vec::new();
    let mut seen_in_site: BTreeSet<(String, String)> = BTreeSet::new();
    let mut sites_linked: BTreeSet<(String, String)> = BTreeSet::new();
    for turn in 0..8 {
        let mut representatives = BTreeSet::new();
        for name in &names {
            let peers = registry.peers_to_probe(name, now, 2, turn);
            assert!(!peers.contains(name), "never itself");
            let (own, other): (Vec<&String>, Vec<&String>) =
                peers.iter().partition(|p| site(p) == site(name));
            assert!(own.len() <= 2, "{own:?}");
            seen_in_site.extend(own.iter().map(|p| (name.clone(), (*p).clone())));
            if !other.is_empty() {
                representatives.insert(name.clone());
                sites_linked.extend(other.iter().map(|p| (site(name), site(p))));
            }
        }
        // One representative per site and turn, and the role moves on.
        assert_eq!(representatives.len(), 3, "turn {turn}: {representatives:?}");
        crossing.push(representatives);
    }
    assert_ne!(
        crossing[0], crossing[1],
        "the representatives change from turn to turn"
    );
    // Over the turns every server was shown each peer of its site, and every site every
    // other site: 12 · 3 paths within sites and 3 · 2 between sites, not 12 · 11.
    assert_eq!(seen_in_site.len(), 12 * 3);
    assert_eq!(sites_linked.len(), 3 * 2);
}

#[test]
fn a_silent_representative_is_replaced_and_a_silent_peer_is_not_named() {
    let (mut registry, names) = three_sites();
    // Everyone heartbeats at 4 s but 10.0.1.1, silent since registering at 0.
    for name in names.iter().filter(|n| *n != "10.0.1.1:7000") {
        assert!(registry.heartbeat(name, None, 4.0));
    }
    let now = 6.0;
    for turn in 0..4 {
        for name in &names {
            let peers = registry.peers_to_probe(name, now, 8, turn);
            assert!(
                !peers.contains(&"10.0.1.1:7000".to_string()),
                "{name}: {peers:?}"
            );
        }
        // Site 1 still has a representative every turn (the silent one's turn included).
        let from_site_1: usize = names
            .iter()
            .filter(|n| site(n) == "10.0.1.0/24")
            .filter(|n| {
                registry
                    .peers_to_probe(n, now, 8, turn)
                    .iter()
                    .any(|p| site(p) != "10.0.1.0/24")
            })
            .count();
        assert_eq!(from_site_1, 1, "turn {turn}");
    }
}

#[test]
fn a_path_nobody_measured_is_estimated_by_the_samples_between_its_sites() {
    let (mut registry, _) = three_sites();
    // Site 1's and site 2's representatives measured each other; within site 1 one path;
    // the proxy measured one server of site 3.
    registry.add_link("10.0.1.1:7000", "10.0.2.1:7000", link(4e6));
    registry.add_link("10.0.1.1:7000", "10.0.1.2:7000", link(9e7));
    registry.add_link("client:p", "10.0.3.1:7000", link(2e6));
    registry.plan_for_client("client:p");
    let history = registry.history(&[]);
    let default = link(1e3);
    let grid = registry.grid_view(1.0);
    let p = LoadPredictor::from_history(&grid, &history, PredictorKind::LatestSample, default);
    let at = |name: &str| Location::Server(registry.index_of(name).unwrap());
    // 10.0.1.3 and 10.0.2.4 never measured each other: the sites' sample stands for it.
    assert_eq!(p.link(at("10.0.1.3:7000"), at("10.0.2.4:7000")), link(4e6));
    assert_eq!(p.link(at("10.0.2.2:7000"), at("10.0.1.4:7000")), link(4e6));
    assert_eq!(
        p.link(at("10.0.1.3:7000"), at("10.0.1.4:7000")),
        link(9e7),
        "site 1 within"
    );
    assert_eq!(p.link(Location::Client, at("10.0.3.4:7000")), link(2e6));
    assert_eq!(
        p.link(at("10.0.1.3:7000"), at("10.0.3.4:7000")),
        default,
        "never measured"
    );
    assert_eq!(p.link(Location::Client, at("10.0.1.4:7000")), default);
    // A shortlist's copy keeps the estimates of its servers' sites.
    let indices = [
        registry.index_of("10.0.1.3:7000").unwrap(),
        registry.index_of("10.0.2.4:7000").unwrap(),
    ];
    let subset = registry.subset(&indices);
    let history = subset.history(&[]);
    let p = LoadPredictor::from_history(
        &subset.grid_view(1.0),
        &history,
        PredictorKind::LatestSample,
        default,
    );
    assert_eq!(p.link(Location::Server(0), Location::Server(1)), link(4e6));
}

#[test]
fn a_server_keeps_its_latest_paths_and_one_forgotten_is_estimated_by_its_sites() {
    use ninf_metaserver::registry::PATHS_KEPT_PER_SERVER;
    let mut registry = Registry::new(8, 5.0, 1000.0);
    let peers = PATHS_KEPT_PER_SERVER + 6;
    let name = |k: usize| format!("10.0.{}.{}:7000", 1 + k / 200, 1 + k % 200);
    for k in 0..=peers {
        registry.register(k as i64 + 1, &name(k), info("one"), &linpack(), 0.0);
    }
    // Server 0 measures its peers one after another, peer 1 again last; the proxy measures
    // every server.
    for k in 1..=peers {
        registry.add_link(&name(0), &name(k), link(1e6 * k as f64));
        registry.add_link("client:p", &name(k), link(1e6));
    }
    registry.add_link(&name(0), &name(1), link(5e5));
    let kept: BTreeSet<String> = registry
        .latest_from(&name(0))
        .map(|(to, _)| to.to_string())
        .collect();
    assert_eq!(kept.len(), PATHS_KEPT_PER_SERVER);
    assert!(kept.contains(&name(1)), "measured again last");
    for forgotten in 2..=7 {
        assert!(!kept.contains(&name(forgotten)), "{forgotten}");
    }
    assert_eq!(registry.latest_from("client:p").count(), peers, "all kept");
    // A forgotten path is estimated from the site's samples: here the latest of them.
    let grid = registry.grid_view(1.0);
    let history = registry.history(&[]);
    let p = LoadPredictor::from_history(&grid, &history, PredictorKind::LatestSample, link(1e3));
    let at = |k: usize| Location::Server(registry.index_of(&name(k)).unwrap());
    assert_eq!(p.link(at(0), at(2)), link(5e5));
    assert_eq!(p.link(at(0), at(peers)), link(1e6 * peers as f64), "kept");
}

#[test]
fn the_servers_of_one_host_are_those_up_that_name_the_same_host() {
    let mut registry = Registry::new(8, 5.0, 1000.0);
    let on = |host: &str| v1::ServerInfo {
        host: host.to_string(),
        ..info("")
    };
    for (i, (address, host)) in [
        ("a:1", "h1"),
        ("a:2", "h1"),
        ("b:1", "h2"),
        ("c:1", ""),
        ("c:2", ""),
    ]
    .iter()
    .enumerate()
    {
        registry.register(i as i64 + 1, address, on(host), &linpack(), 0.0);
    }
    assert_eq!(registry.same_host(0, 1.0), vec![1]);
    assert_eq!(registry.same_host(1, 1.0), vec![0]);
    assert_eq!(
        registry.same_host(2, 1.0),
        Vec::<usize>::new(),
        "alone on h2"
    );
    assert_eq!(
        registry.same_host(3, 1.0),
        Vec::<usize>::new(),
        "a server that names no host shares it with none"
    );
    // a:2 falls silent (its heartbeat 5 s old): no longer listed.
    registry.heartbeat("a:1", None, 7.0);
    assert_eq!(registry.same_host(0, 7.0), Vec::<usize>::new());
}
