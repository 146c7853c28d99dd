//! A wide-area testbed on one machine (issue 5): each site is a Linux network namespace
//! joined to a router namespace by a veth pair, and the bandwidth of each pair of sites is
//! shaped both ways by `htb` classes on the router's interfaces. The kernel here has no
//! `netem`, so a profile's latencies are added in user space: the router sends packets
//! between sites through a TUN device to a delay forwarder ([`crate::latency`], run as
//! `ninf testbed delay` in the router namespace). Sites get 10.77.k.2/24 (k = 1, 2, ... in the profile's order), the router
//! 10.77.k.1. Profiles are TOML (`lab/profiles/*.toml`, or a file).
//!
//! Set-up first tears down anything left by an earlier run with the same prefix, so it is
//! idempotent; tear-down kills every process in the namespaces and deletes them, which also
//! deletes their veth pairs. [`Testbed`] tears down when dropped, so a failed run leaves
//! nothing behind. Everything needs root; without it set-up says so.

use std::collections::BTreeMap;
use std::process::Command;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;

use crate::latency::PairDelay;

/// The router's TUN device that carries packets to the delay forwarder.
pub const DELAY_DEVICE: &str = "ndelay";

/// The router's routing table that sends packets from the sites to [`DELAY_DEVICE`].
const DELAY_TABLE: u32 = 77;
/// Preference of the policy rules that cut a site off: ahead of the delay rules (100).
const CUT_RULE: u32 = 50;

/// A site's part in the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The client, its proxy and the metaserver.
    Client,
    /// A compute server.
    Server,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Site {
    pub name: String,
    pub role: Role,
    /// Processors a server offers.
    #[serde(default = "one")]
    pub processors: u32,
    /// Compute servers the site runs, each with `processors` processors, on ports 7001,
    /// 7002, ... of the site's address. Servers of one site share its /24, so the
    /// metaserver groups them into one site (docs/metaserver.md, "Sites").
    #[serde(default = "one")]
    pub servers: u32,
    /// How many times slower than the host a server's processors are in the modelled
    /// setting (before the profile's `speedup`); see `ninf_executable::slowdown`.
    #[serde(default = "unit")]
    pub cpu_slowdown: f64,
    /// The site's shared access link, Mbit/s each way: every path into or out of the site
    /// shares it. None: each path is limited only by its own rate.
    #[serde(default)]
    pub uplink_mbit: Option<f64>,
}

fn one() -> u32 {
    1
}

fn unit() -> f64 {
    1.0
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    pub between: [String; 2],
    /// Rate each way, Mbit/s.
    pub mbit: f64,
    /// The path's round trip in the modelled setting; each way is delayed by half of it
    /// (after `speedup`).
    #[serde(default)]
    pub latency_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    /// Runs the modelled setting this many times faster: every rate is multiplied and every
    /// processor slowdown divided by it, so every time shrinks by it and every ratio of times
    /// stays. Lets a setting of minutes-long calls be measured in tens of seconds.
    #[serde(default = "unit")]
    pub speedup: f64,
    #[serde(rename = "site")]
    pub sites: Vec<Site>,
    #[serde(rename = "link", default)]
    pub links: Vec<LinkSpec>,
}

/// The profiles shipped with `ninf`.
const SHIPPED: [(&str, &str); 4] = [
    ("paper", include_str!("../profiles/paper.toml")),
    (
        "paper-slow-ab",
        include_str!("../profiles/paper-slow-ab.toml"),
    ),
    ("lan", include_str!("../profiles/lan.toml")),
    ("sites", include_str!("../profiles/sites.toml")),
];

impl Profile {
    /// A shipped profile by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> anyhow::Result<Profile> {
        let (origin, text) = match SHIPPED.iter().find(|(n, _)| *n == name_or_path) {
            Some((name, text)) => (format!("profile `{name}`"), text.to_string()),
            None => (
                name_or_path.to_string(),
                std::fs::read_to_string(name_or_path).with_context(|| {
                    format!(
                        "`{name_or_path}` is neither a shipped profile (paper, paper-slow-ab, lan, sites) nor a readable file"
                    )
                })?,
            ),
        };
        Profile::parse(&text).with_context(|| format!("in {origin}"))
    }

    pub fn parse(text: &str) -> anyhow::Result<Profile> {
        let profile: Profile = toml::from_str(text)?;
        profile.check()?;
        Ok(profile)
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.sites.iter().filter(|s| s.role == Role::Client).count() != 1 {
            bail!("a profile needs exactly one site with role = \"client\"");
        }
        if !self.sites.iter().any(|s| s.role == Role::Server) {
            bail!("a profile needs at least one site with role = \"server\"");
        }
        if self.sites.len() > 200 {
            bail!("at most 200 sites");
        }
        let mut seen = std::collections::BTreeSet::new();
        for site in &self.sites {
            let valid = !site.name.is_empty()
                && site.name.len() <= 8
                && site
                    .name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            if !valid {
                bail!(
                    "site name `{}` must be 1-8 lower-case letters or digits",
                    site.name
                );
            }
            if !seen.insert(site.name.as_str()) {
                bail!("site `{}` appears twice", site.name);
            }
        }
        if !(self.speedup.is_finite() && self.speedup > 0.0) {
            bail!("speedup is {}; it must be positive", self.speedup);
        }
        for site in &self.sites {
            if site.role == Role::Server
                && !(site.cpu_slowdown.is_finite() && site.cpu_slowdown / self.speedup >= 1.0)
            {
                bail!(
                    "site `{}` has cpu_slowdown {} and the profile speedup {}: the slowdown run ({}) must be at least 1",
                    site.name,
                    site.cpu_slowdown,
                    self.speedup,
                    site.cpu_slowdown / self.speedup
                );
            }
            if site.role == Role::Server && !(1..=16).contains(&site.servers) {
                bail!(
                    "site `{}` has {} servers; it must have 1 to 16",
                    site.name,
                    site.servers
                );
            }
            if let Some(mbit) = site.uplink_mbit
                && !(mbit.is_finite() && mbit > 0.0)
            {
                bail!(
                    "site `{}` has uplink {mbit} Mbit/s; it must be positive",
                    site.name
                );
            }
        }
        for link in &self.links {
            for end in &link.between {
                if !seen.contains(end.as_str()) {
                    bail!("link {:?} names unknown site `{end}`", link.between);
                }
            }
            if link.between[0] == link.between[1] {
                bail!("link {:?} joins a site to itself", link.between);
            }
            if !(link.latency_ms.is_finite() && (0.0..=60_000.0).contains(&link.latency_ms)) {
                bail!(
                    "link {:?} has latency {} ms; it must be 0 to 60000",
                    link.between,
                    link.latency_ms
                );
            }
            if !(link.mbit.is_finite() && link.mbit > 0.0) {
                bail!(
                    "link {:?} has rate {} Mbit/s; it must be positive",
                    link.between,
                    link.mbit
                );
            }
        }
        Ok(())
    }

    pub fn client(&self) -> &Site {
        self.sites
            .iter()
            .find(|s| s.role == Role::Client)
            .unwrap_or(&self.sites[0])
    }

    pub fn servers(&self) -> impl Iterator<Item = &Site> {
        self.sites.iter().filter(|s| s.role == Role::Server)
    }

    /// The shaped rate between two sites as run (after `speedup`), if the profile sets one.
    pub fn rate(&self, a: &str, b: &str) -> Option<f64> {
        self.links
            .iter()
            .find(|l| {
                (l.between[0] == a && l.between[1] == b) || (l.between[0] == b && l.between[1] == a)
            })
            .map(|l| l.mbit * self.speedup)
    }

    /// A site's access link as run (after `speedup`).
    pub fn uplink(&self, site: &Site) -> Option<f64> {
        site.uplink_mbit.map(|mbit| mbit * self.speedup)
    }

    /// The one-way delay of each linked pair of sites as run (after `speedup`), by their
    /// 1-based indexes in the profile; pairs without latency are left out.
    pub fn pair_delays(&self) -> Vec<PairDelay> {
        let index = |name: &str| self.index(name);
        self.links
            .iter()
            .filter(|l| l.latency_ms > 0.0)
            .map(|l| PairDelay {
                sites: (
                    u8::try_from(index(&l.between[0])).unwrap_or(u8::MAX),
                    u8::try_from(index(&l.between[1])).unwrap_or(u8::MAX),
                ),
                one_way: Duration::from_secs_f64(l.latency_ms / 1000.0 / 2.0 / self.speedup),
            })
            .collect()
    }

    /// 1-based index of a site in the profile (0 for none): site k is 10.77.k.0/24.
    pub fn index(&self, site: &str) -> usize {
        self.sites
            .iter()
            .position(|s| s.name == site)
            .map_or(0, |i| i + 1)
    }

    /// A server's processor slowdown as run (after `speedup`).
    pub fn slowdown(&self, site: &Site) -> f64 {
        (site.cpu_slowdown / self.speedup).max(1.0)
    }
}

/// A rate in whole kbit/s as `tc` takes it.
fn kbit(mbit: f64) -> u64 {
    (mbit * 1000.0).round().max(8.0) as u64
}

/// The testbed of one profile under one name prefix.
#[derive(Debug)]
pub struct Testbed {
    pub prefix: String,
    pub profile: Profile,
    /// Whether dropping this tears the testbed down.
    armed: bool,
    /// The `ninf` program, which runs the delay forwarder when the profile sets latencies.
    forwarder_program: Option<PathBuf>,
    /// The delay forwarder, while it runs.
    forwarder: Option<Child>,
    /// Tears the namespaces down if a signal ends the process while they stand.
    undo: Option<ninf_grid::processes::UndoOnSignal>,
}

/// Runs `ip`/`tc`-style commands; stops at the first failure with its output.
fn run(args: &[String]) -> anyhow::Result<()> {
    let output = Command::new(&args[0])
        .args(&args[1..])
        .output()
        .with_context(|| format!("cannot run `{}`", args[0]))?;
    if !output.status.success() {
        bail!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

impl Testbed {
    pub fn new(prefix: &str, profile: Profile) -> Testbed {
        Testbed {
            prefix: prefix.to_string(),
            profile,
            armed: false,
            forwarder_program: None,
            forwarder: None,
            undo: None,
        }
    }

    /// Names the `ninf` program that runs the delay forwarder (needed when the profile
    /// sets latencies).
    pub fn with_forwarder(mut self, ninf: &Path) -> Testbed {
        self.forwarder_program = Some(ninf.to_path_buf());
        self
    }

    pub fn router(&self) -> String {
        format!("{}-router", self.prefix)
    }

    /// The namespace of a site.
    pub fn namespace(&self, site: &str) -> String {
        format!("{}-{site}", self.prefix)
    }

    /// 1-based index of a site in the profile.
    fn index(&self, site: &str) -> usize {
        self.profile.index(site)
    }

    /// A site's address.
    pub fn address(&self, site: &str) -> String {
        format!("10.77.{}.2", self.index(site))
    }

    /// veth names: at most 15 bytes, unique per prefix (a short hash) and site.
    fn veth(&self, k: usize, side: char) -> String {
        let hash = self
            .prefix
            .bytes()
            .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        format!("v{:04x}{k}{side}", hash & 0xffff)
    }

    /// Every command that builds the testbed, in order.
    pub fn plan_up(&self) -> Vec<Vec<String>> {
        let router = self.router();
        let mut plan = vec![
            words(&format!("ip netns add {router}")),
            words(&format!("ip -n {router} link set lo up")),
            words(&format!(
                "ip netns exec {router} sysctl -q -w net.ipv4.ip_forward=1"
            )),
        ];
        for (i, site) in self.profile.sites.iter().enumerate() {
            let k = i + 1;
            let ns = self.namespace(&site.name);
            let (inner, outer) = (self.veth(k, 's'), self.veth(k, 'r'));
            plan.extend([
                words(&format!("ip netns add {ns}")),
                words(&format!("ip -n {ns} link set lo up")),
                words(&format!("ip link add {inner} type veth peer name {outer}")),
                words(&format!("ip link set {inner} netns {ns}")),
                words(&format!("ip link set {outer} netns {router}")),
                words(&format!("ip -n {ns} addr add 10.77.{k}.2/24 dev {inner}")),
                words(&format!(
                    "ip -n {router} addr add 10.77.{k}.1/24 dev {outer}"
                )),
                words(&format!("ip -n {ns} link set {inner} up")),
                words(&format!("ip -n {router} link set {outer} up")),
                words(&format!("ip -n {ns} route add default via 10.77.{k}.1")),
            ]);
        }
        // Shaping: traffic to site Y leaves the router on Y's veth; one htb class per source
        // site with a profile rate, chosen by source address. Unlisted pairs are unshaped.
        // A site's access link is a parent class over all of them (traffic into the site)
        // and an htb on the site's own veth (traffic out of it). Under an access link the
        // per-source classes are assured only an equal share of it and borrow the rest up
        // to their own rate, so together they never exceed the access link.
        for (i, to) in self.profile.sites.iter().enumerate() {
            let outer = self.veth(i + 1, 'r');
            plan.push(words(&format!(
                "ip netns exec {router} tc qdisc add dev {outer} root handle 1: htb default 999"
            )));
            plan.push(words(&format!(
                "ip netns exec {router} tc class add dev {outer} parent 1: classid 1:999 htb rate 10gbit"
            )));
            let access = self.profile.uplink(to);
            let sources = self
                .profile
                .sites
                .iter()
                .filter(|from| self.profile.rate(&from.name, &to.name).is_some())
                .count()
                .max(1);
            let parent = match access {
                Some(mbit) => {
                    plan.push(words(&format!(
                        "ip netns exec {router} tc class add dev {outer} parent 1: classid 1:1 htb rate {}kbit ceil {}kbit",
                        kbit(mbit),
                        kbit(mbit)
                    )));
                    "1:1"
                }
                None => "1:",
            };
            for (j, from) in self.profile.sites.iter().enumerate() {
                if let Some(mbit) = self.profile.rate(&from.name, &to.name) {
                    let class = 10 + j;
                    let ceil = kbit(access.map_or(mbit, |a| a.min(mbit)));
                    let assured = match access {
                        Some(a) => kbit(a.min(mbit) / sources as f64),
                        None => ceil,
                    };
                    plan.push(words(&format!(
                        "ip netns exec {router} tc class add dev {outer} parent {parent} classid 1:{class} htb rate {assured}kbit ceil {ceil}kbit"
                    )));
                    plan.push(words(&format!(
                        "ip netns exec {router} tc filter add dev {outer} parent 1: protocol ip prio 1 u32 match ip src 10.77.{}.0/24 flowid 1:{class}",
                        j + 1
                    )));
                }
            }
            if let Some(mbit) = access {
                let inner = self.veth(i + 1, 's');
                let ns = self.namespace(&to.name);
                plan.push(words(&format!(
                    "ip netns exec {ns} tc qdisc add dev {inner} root handle 1: htb default 1"
                )));
                plan.push(words(&format!(
                    "ip netns exec {ns} tc class add dev {inner} parent 1: classid 1:1 htb rate {}kbit ceil {}kbit",
                    kbit(mbit),
                    kbit(mbit)
                )));
            }
        }
        // Latency: every packet arriving from a site is routed (table 77) to the TUN device;
        // what the forwarder writes back arrives on that device and takes the main table to
        // its site. Reverse-path filtering would drop those packets (their source is reached
        // through a veth, not the TUN), so it is off in the router.
        if !self.profile.pair_delays().is_empty() {
            plan.extend([
                words(&format!(
                    "ip -n {router} tuntap add dev {DELAY_DEVICE} mode tun"
                )),
                words(&format!("ip -n {router} link set {DELAY_DEVICE} up")),
                words(&format!(
                    "ip netns exec {router} sysctl -q -w net.ipv4.conf.all.rp_filter=0"
                )),
                words(&format!(
                    "ip netns exec {router} sysctl -q -w net.ipv4.conf.{DELAY_DEVICE}.rp_filter=0"
                )),
                words(&format!(
                    "ip -n {router} route add 10.77.0.0/16 dev {DELAY_DEVICE} table {DELAY_TABLE}"
                )),
            ]);
            for k in 1..=self.profile.sites.len() {
                plan.push(words(&format!(
                    "ip -n {router} rule add iif {} lookup {DELAY_TABLE} pref 100",
                    self.veth(k, 'r')
                )));
            }
        }
        plan
    }

    /// The command that runs the delay forwarder in the router namespace, if the profile
    /// sets latencies.
    pub fn forwarder_command(&self, ninf: &Path) -> Option<Command> {
        let pairs = self.profile.pair_delays();
        if pairs.is_empty() {
            return None;
        }
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.router()])
            .arg(ninf)
            .args(["testbed", "delay", "--device", DELAY_DEVICE]);
        for pair in pairs {
            command.arg("--pair").arg(pair.to_string());
        }
        Some(command)
    }

    /// Starts the delay forwarder and waits until it carries packets.
    fn start_forwarder(&mut self) -> anyhow::Result<()> {
        let program = self.forwarder_program.clone();
        let Some(mut command) = program
            .as_deref()
            .and_then(|ninf| self.forwarder_command(ninf))
        else {
            if !self.profile.pair_delays().is_empty() {
                bail!(
                    "profile `{}` sets latencies, which need the delay forwarder: give the testbed the `ninf` program (Testbed::with_forwarder)",
                    self.profile.name
                );
            }
            return Ok(());
        };
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // It outlives `ninf testbed up`; its stderr must not hold that command's pipes.
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the delay forwarder")?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            use std::io::BufRead;
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        }
        self.forwarder = Some(child);
        match line.trim() {
            "ready" => Ok(()),
            "" => bail!("the delay forwarder exited before it was ready"),
            reason => bail!("the delay forwarder did not start: {reason}"),
        }
    }

    /// Namespaces of this prefix that exist now.
    pub fn existing(&self) -> Vec<String> {
        namespaces_of(&self.prefix)
    }

    /// Builds the testbed (after tearing down any earlier one with this prefix). The
    /// returned testbed tears itself down when dropped.
    pub fn up(mut self) -> anyhow::Result<Testbed> {
        if !is_root() {
            bail!(
                "the testbed needs root (network namespaces and traffic control); run it as root"
            );
        }
        self.down()?;
        self.armed = true;
        let prefix = self.prefix.clone();
        self.undo = Some(ninf_grid::processes::undo_on_signal(move || {
            let _ = down_prefix(&prefix);
        }));
        for command in self.plan_up() {
            run(&command)?;
        }
        self.start_forwarder()?;
        Ok(self)
    }

    /// Kills every process in this prefix's namespaces and deletes them. Idempotent.
    pub fn down(&self) -> anyhow::Result<()> {
        down_prefix(&self.prefix)
    }

    /// Keeps the testbed after this value is dropped (for `ninf testbed up`).
    pub fn disarm(mut self) {
        self.armed = false;
        self.undo = None;
    }

    /// Bytes the router has sent into `site` (everything addressed to it from other sites).
    pub fn router_tx_bytes(&self, site: &str) -> anyhow::Result<u64> {
        let device = self.veth(self.index(site), 'r');
        let output = Command::new("ip")
            .args([
                "-n",
                &self.router(),
                "-s",
                "-j",
                "link",
                "show",
                "dev",
                &device,
            ])
            .output()
            .context("cannot run `ip`")?;
        if !output.status.success() {
            bail!(
                "cannot read {device}'s counters: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        let links: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        links[0]["stats64"]["tx"]["bytes"]
            .as_u64()
            .with_context(|| format!("no byte counter for {device} in `ip -s -j` output"))
    }

    /// A command running `program` inside `site`'s namespace.
    pub fn command(&self, site: &str, program: &std::path::Path) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace(site)])
            .arg(program);
        command
    }

    /// The processes inside `site`'s namespace now.
    pub fn pids(&self, site: &str) -> Vec<i32> {
        pids_in(&self.namespace(site))
    }

    /// The commands that cut `site` off (a partition): two policy rules in the router,
    /// ahead of every other, blackhole what comes from the site and what is addressed to
    /// it: dropped silently, as on a dead link (no ICMP error tells the senders).
    pub fn cut_plan(&self, site: &str) -> Vec<Vec<String>> {
        let router = self.router();
        let k = self.index(site);
        vec![
            words(&format!(
                "ip -n {router} rule add from 10.77.{k}.0/24 blackhole pref {CUT_RULE}"
            )),
            words(&format!(
                "ip -n {router} rule add to 10.77.{k}.0/24 blackhole pref {}",
                CUT_RULE + 1
            )),
        ]
    }

    /// The commands that end a cut.
    pub fn heal_plan(&self) -> Vec<Vec<String>> {
        let router = self.router();
        [CUT_RULE, CUT_RULE + 1]
            .iter()
            .map(|pref| words(&format!("ip -n {router} rule del pref {pref}")))
            .collect()
    }

    /// Cuts `site` off until [`Testbed::heal`].
    pub fn cut(&self, site: &str) -> anyhow::Result<()> {
        self.cut_plan(site).iter().try_for_each(|c| run(c))
    }

    /// Ends a cut.
    pub fn heal(&self) -> anyhow::Result<()> {
        self.heal_plan().iter().try_for_each(|c| run(c))
    }

    /// Each site's address, by name.
    pub fn addresses(&self) -> BTreeMap<String, String> {
        self.profile
            .sites
            .iter()
            .map(|s| (s.name.clone(), self.address(&s.name)))
            .collect()
    }
}

/// The network namespaces named `PREFIX-...` that exist now.
pub fn namespaces_of(prefix: &str) -> Vec<String> {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(str::to_string)
        .collect()
}

/// Kills every process in the namespaces of `prefix` and deletes them. Idempotent.
fn down_prefix(prefix: &str) -> anyhow::Result<()> {
    let namespaces = namespaces_of(prefix);
    for ns in &namespaces {
        kill_all_in(ns);
    }
    for ns in &namespaces {
        run(&words(&format!("ip netns delete {ns}")))?;
    }
    Ok(())
}

fn pids_in(ns: &str) -> Vec<i32> {
    let Ok(output) = Command::new("ip").args(["netns", "pids", ns]).output() else {
        return Vec::new();
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// SIGKILL every process in a namespace (twice: a dying parent may start one more).
fn kill_all_in(ns: &str) {
    for _ in 0..2 {
        let pids = pids_in(ns);
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) with a pid the kernel just listed; no memory is involved.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Err(e) = self.down() {
            tracing::warn!(error = %e, prefix = %self.prefix, "testbed tear-down failed");
        }
        // Killed with everything in the router namespace; reaped here.
        if let Some(mut forwarder) = self.forwarder.take() {
            let _ = forwarder.kill();
            let _ = forwarder.wait();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shipped_profiles_parse_and_bad_ones_are_named() {
        let paper = Profile::load("paper").unwrap();
        assert_eq!(paper.client().name, "client");
        assert_eq!(
            paper.servers().map(|s| s.processors).collect::<Vec<_>>(),
            vec![2, 1]
        );
        // 8 Mbit/s in the modelled setting, run 5x faster.
        assert_eq!(paper.rate("b", "a"), Some(40.0));
        assert_eq!(paper.slowdown(&paper.sites[1]), 400.0);
        assert!(Profile::load("lan").is_ok());
        assert_eq!(
            Profile::load("paper-slow-ab").unwrap().rate("a", "b"),
            Some(2.5)
        );
        let missing = Profile::load("/nonexistent/x.toml").unwrap_err();
        assert!(format!("{missing:#}").contains("neither a shipped profile"));
        let bad = Profile::parse(
            "name = \"x\"\n[[site]]\nname = \"c\"\nrole = \"client\"\n[[site]]\nname = \"s\"\nrole = \"server\"\n[[link]]\nbetween = [\"c\", \"z\"]\nmbit = 1.0\n",
        )
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "link [\"c\", \"z\"] names unknown site `z`"
        );
        let sites = Profile::load("sites").unwrap();
        assert_eq!(
            sites.servers().map(|s| s.servers).collect::<Vec<_>>(),
            vec![3, 3]
        );
        assert_eq!(paper.servers().map(|s| s.servers).max(), Some(1));
        let none = Profile::parse(
            "name = \"x\"\n[[site]]\nname = \"c\"\nrole = \"client\"\n[[site]]\nname = \"s\"\nrole = \"server\"\nservers = 0\n",
        )
        .unwrap_err();
        assert_eq!(
            none.to_string(),
            "site `s` has 0 servers; it must have 1 to 16"
        );
        let no_server = Profile::parse("name = \"x\"\n[[site]]\nname = \"c\"\nrole = \"client\"\n")
            .unwrap_err();
        assert!(
            no_server
                .to_string()
                .contains("at least one site with role = \"server\"")
        );
    }

    #[test]
    fn a_cut_drops_what_comes_from_the_site_and_what_goes_to_it() {
        let bed = Testbed::new("tbx", Profile::load("lan").unwrap());
        let plan: Vec<String> = bed.cut_plan("a").iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            plan,
            [
                "ip -n tbx-router rule add from 10.77.2.0/24 blackhole pref 50",
                "ip -n tbx-router rule add to 10.77.2.0/24 blackhole pref 51",
            ]
        );
        let heal: Vec<String> = bed.heal_plan().iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            heal,
            [
                "ip -n tbx-router rule del pref 50",
                "ip -n tbx-router rule del pref 51"
            ]
        );
    }

    #[test]
    fn the_plan_shapes_each_pair_both_ways() {
        let bed = Testbed::new("tbx", Profile::load("paper").unwrap());
        let plan: Vec<String> = bed.plan_up().iter().map(|c| c.join(" ")).collect();
        assert_eq!(plan[0], "ip netns add tbx-router");
        assert!(plan.contains(&"ip netns add tbx-a".to_string()));
        assert_eq!(bed.address("b"), "10.77.3.2");
        // Client (site 1) to A (site 2): on A's router-side veth, class for source 10.77.1.0,
        // 2 Mbit/s run 5x faster.
        let veth_a = bed.veth(2, 'r');
        assert!(plan.iter().any(|c| c.contains(&format!(
            "dev {veth_a} parent 1: classid 1:10 htb rate 10000kbit"
        ))));
        assert!(plan.iter().any(|c| c.contains(&format!(
            "dev {veth_a} parent 1: protocol ip prio 1 u32 match ip src 10.77.1.0/24 flowid 1:10"
        ))));
        // And back: A to the client on the client's veth.
        let veth_c = bed.veth(1, 'r');
        assert!(plan.iter().any(|c| c.contains(&format!(
            "dev {veth_c} parent 1: classid 1:11 htb rate 10000kbit"
        ))));
        // A to B at 8 Mbit/s, run at 40.
        let veth_b = bed.veth(3, 'r');
        assert!(plan.iter().any(|c| c.contains(&format!(
            "dev {veth_b} parent 1: classid 1:11 htb rate 40000kbit"
        ))));
        assert!(veth_a.len() <= 15);
    }

    #[test]
    fn latencies_route_through_the_delay_device_at_half_the_round_trip_each_way() {
        let bed = Testbed::new("tbz", Profile::load("paper").unwrap());
        // Round trips of 30, 40 and 10 ms in the modelled setting, run 5x faster.
        assert_eq!(
            bed.profile
                .pair_delays()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["1:2:3000", "1:3:4000", "2:3:1000"]
        );
        let plan: Vec<String> = bed.plan_up().iter().map(|c| c.join(" ")).collect();
        assert!(plan.contains(&"ip -n tbz-router tuntap add dev ndelay mode tun".to_string()));
        assert!(
            plan.contains(
                &"ip -n tbz-router route add 10.77.0.0/16 dev ndelay table 77".to_string()
            )
        );
        for k in 1..=3 {
            assert!(plan.contains(&format!(
                "ip -n tbz-router rule add iif {} lookup 77 pref 100",
                bed.veth(k, 'r')
            )));
        }
        let command = bed.forwarder_command(Path::new("/usr/bin/ninf")).unwrap();
        let args: Vec<String> = command
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args.join(" "),
            "netns exec tbz-router /usr/bin/ninf testbed delay --device ndelay --pair 1:2:3000 --pair 1:3:4000 --pair 2:3:1000"
        );
        // Without latencies, the kernel forwards alone.
        let lan = Testbed::new("tbz", Profile::load("lan").unwrap());
        assert!(!lan.plan_up().iter().any(|c| c.join(" ").contains("ndelay")));
        assert!(lan.forwarder_command(Path::new("/usr/bin/ninf")).is_none());
        let bad = Profile::parse(
            "name = \"x\"\n[[site]]\nname = \"c\"\nrole = \"client\"\n[[site]]\nname = \"s\"\nrole = \"server\"\n[[link]]\nbetween = [\"c\", \"s\"]\nmbit = 1.0\nlatency_ms = -3.0\n",
        )
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "link [\"c\", \"s\"] has latency -3 ms; it must be 0 to 60000"
        );
    }

    #[test]
    fn speedup_scales_rates_and_slowdowns_and_access_links_cap_a_site() {
        let profile = Profile::parse(
            "name = \"x\"\nspeedup = 4.0\n\
             [[site]]\nname = \"c\"\nrole = \"client\"\nuplink_mbit = 3.0\n\
             [[site]]\nname = \"a\"\nrole = \"server\"\ncpu_slowdown = 100.0\n\
             [[site]]\nname = \"b\"\nrole = \"server\"\ncpu_slowdown = 6.0\n\
             [[link]]\nbetween = [\"c\", \"a\"]\nmbit = 2.0\n\
             [[link]]\nbetween = [\"c\", \"b\"]\nmbit = 1.0\n",
        )
        .unwrap();
        assert_eq!(profile.rate("a", "c"), Some(8.0));
        assert_eq!(profile.slowdown(&profile.sites[1]), 25.0);
        assert_eq!(profile.slowdown(&profile.sites[2]), 1.5);
        assert_eq!(profile.uplink(&profile.sites[0]), Some(12.0));
        let bed = Testbed::new("tby", profile);
        let plan: Vec<String> = bed.plan_up().iter().map(|c| c.join(" ")).collect();
        // Into the client's site: a 12 Mbit/s parent; A's class (8 Mbit/s) and B's (4) are
        // each assured half of what they may reach and borrow the rest from the parent.
        let veth_c = bed.veth(1, 'r');
        assert!(plan.contains(&format!(
            "ip netns exec tby-router tc class add dev {veth_c} parent 1: classid 1:1 htb rate 12000kbit ceil 12000kbit"
        )));
        assert!(plan.contains(&format!(
            "ip netns exec tby-router tc class add dev {veth_c} parent 1:1 classid 1:11 htb rate 4000kbit ceil 8000kbit"
        )));
        assert!(plan.contains(&format!(
            "ip netns exec tby-router tc class add dev {veth_c} parent 1:1 classid 1:12 htb rate 2000kbit ceil 4000kbit"
        )));
        // Out of the client's site: everything leaves through a 12 Mbit/s class.
        let inner = bed.veth(1, 's');
        assert!(plan.contains(&format!(
            "ip netns exec tby-c tc class add dev {inner} parent 1: classid 1:1 htb rate 12000kbit ceil 12000kbit"
        )));
        // A has no access link: its classes hang from the root at their own rate.
        let veth_a = bed.veth(2, 'r');
        assert!(plan.contains(&format!(
            "ip netns exec tby-router tc class add dev {veth_a} parent 1: classid 1:10 htb rate 8000kbit ceil 8000kbit"
        )));
        let too_fast = Profile::parse(
            "name = \"x\"\nspeedup = 10.0\n[[site]]\nname = \"c\"\nrole = \"client\"\n\
             [[site]]\nname = \"a\"\nrole = \"server\"\ncpu_slowdown = 5.0\n",
        )
        .unwrap_err();
        assert_eq!(
            too_fast.to_string(),
            "site `a` has cpu_slowdown 5 and the profile speedup 10: the slowdown run (0.5) must be at least 1"
        );
    }
}
