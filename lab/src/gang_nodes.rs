//! Nodes of one compute server on separate (emulated) hosts: the testbed's network
//! namespaces, one for the server and one per node, joined by the router namespace over
//! shaped links. Each node's agent runs inside its namespace on an emulated clock of its own,
//! attaches to the server over the network and runs the node's SPMD broker there, so the
//! ranks of a parallel job talk between nodes over TCP through the router, as on a cluster.
//! The gang benchmark runs its server on a thread that entered the server's namespace.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use ninf_grid::processes::Started;

use crate::testbed::{Profile, Testbed};

/// The server's site.
const SERVER_SITE: &str = "server";

/// A testbed of a server site and `nodes` node sites (`node0`, `node1`, ...).
pub struct NodeBed {
    pub bed: Testbed,
    pub nodes: usize,
}

/// The profile: every node linked to every other and to the server at `mbit`.
pub fn profile(nodes: usize, mbit: f64) -> anyhow::Result<Profile> {
    if !(1..=64).contains(&nodes) {
        bail!("{nodes} nodes: the node testbed takes 1 to 64");
    }
    let mut text =
        format!("name = \"gang-nodes\"\n[[site]]\nname = \"{SERVER_SITE}\"\nrole = \"client\"\n");
    let names: Vec<String> = (0..nodes).map(node_site).collect();
    for name in &names {
        text.push_str(&format!("[[site]]\nname = \"{name}\"\nrole = \"server\"\n"));
    }
    let all: Vec<&str> = std::iter::once(SERVER_SITE)
        .chain(names.iter().map(String::as_str))
        .collect();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            text.push_str(&format!(
                "[[link]]\nbetween = [\"{a}\", \"{b}\"]\nmbit = {mbit:?}\n"
            ));
        }
    }
    Profile::parse(&text)
}

fn node_site(k: usize) -> String {
    format!("node{k}")
}

impl NodeBed {
    /// Builds the namespaces (root only); they are torn down when this is dropped.
    pub fn up(nodes: usize, mbit: f64) -> anyhow::Result<NodeBed> {
        let bed = Testbed::new("ngang", profile(nodes, mbit)?).up()?;
        Ok(NodeBed { bed, nodes })
    }

    /// The server's address inside its namespace.
    pub fn server_host(&self) -> String {
        self.bed.address(SERVER_SITE)
    }

    /// Node `k`'s address inside its namespace.
    pub fn node_host(&self, k: usize) -> String {
        self.bed.address(&node_site(k))
    }

    /// Bytes the router has carried into the nodes' sites so far.
    pub fn bytes_into_nodes(&self) -> anyhow::Result<u64> {
        (0..self.nodes)
            .map(|k| self.bed.router_tx_bytes(&node_site(k)))
            .sum()
    }

    /// Runs `work` on a new thread inside the server's namespace (the calling thread, and so
    /// this process as the tools list it, stays where it is).
    pub fn in_server_namespace<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let path = Path::new("/var/run/netns").join(self.bed.namespace(SERVER_SITE));
        let namespace = std::fs::File::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        std::thread::spawn(move || {
            // SAFETY: setns with a namespace file we opened; it moves only this thread, which
            // starts everything the work runs (its runtime's threads inherit the namespace).
            if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                bail!(
                    "cannot enter the server's namespace: {}",
                    std::io::Error::last_os_error()
                );
            }
            work()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the benchmark thread panicked"))?
    }

    /// Starts node `k`'s agent in its namespace: it attaches to `server`, runs its broker
    /// on the node's address, and keeps a clock `offset_ms` ahead of the machine's.
    pub fn start_agent(&self, agent: &AgentSpec<'_>) -> anyhow::Result<Started> {
        let k = agent.node;
        let mut command: Command = self.bed.command(&node_site(k), agent.program);
        let columns = agent
            .columns
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        command
            .arg("--server")
            .arg(agent.server)
            .arg("--node")
            .arg(format!("node-{k}"))
            .arg("--columns")
            .arg(columns)
            .arg("--clock-offset-ms")
            .arg(agent.offset_ms.to_string())
            .arg("--broker-listen")
            .arg(format!("{}:0", self.node_host(k)))
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("NINF_DEBUG_STDERR").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        if !agent.preempt {
            command.arg("--no-network-preemption");
        }
        Started::spawn(&mut command).with_context(|| format!("cannot start the agent of node {k}"))
    }
}

/// One node agent to start.
pub struct AgentSpec<'a> {
    pub program: &'a Path,
    pub node: usize,
    pub columns: &'a [u32],
    pub server: &'a str,
    pub offset_ms: f64,
    pub preempt: bool,
}
