//! docs/deploy.md's commands, as written, on three network namespaces standing for hosts
//! (`head`, `node1`, `node2`; the wide-area testbed's `lab` profile shape): the metaserver,
//! a proxy and a client on `head`, a compute server on each node, all over TLS with the
//! grid's token, then a server upgraded in place. Each ```sh block whose first line is
//! `# on HOST` runs on that host, in the guide's order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::programs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ninf_lab::testbed::{Profile, Testbed};

const HOSTS: [&str; 3] = ["head", "node1", "node2"];

const PROFILE: &str = r#"
name = "deploy"
[[site]]
name = "head"
role = "client"
[[site]]
name = "node1"
role = "server"
[[site]]
name = "node2"
role = "server"
[[link]]
between = ["head", "node1"]
mbit = 1000.0
[[link]]
between = ["head", "node2"]
mbit = 1000.0
[[link]]
between = ["node1", "node2"]
mbit = 1000.0
"#;

/// The guide's blocks that say where they run: (host, script).
fn blocks(guide: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut lines = guide.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```sh" {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        if let Some(host) = body.first().and_then(|l| l.strip_prefix("# on ")) {
            blocks.push((host.trim().to_string(), body[1..].join("\n")));
        }
    }
    blocks
}

/// Host names in each namespace's /etc/hosts (`ip netns exec` binds /etc/netns/NS/hosts
/// over it); removed when dropped.
struct HostNames(Vec<PathBuf>);

impl HostNames {
    fn write(bed: &Testbed) -> HostNames {
        let mut table = String::from("127.0.0.1 localhost\n");
        for host in HOSTS {
            table.push_str(&format!("{} {host}\n", bed.address(host)));
        }
        let dirs: Vec<PathBuf> = HOSTS
            .iter()
            .map(|host| PathBuf::from("/etc/netns").join(bed.namespace(host)))
            .collect();
        for dir in &dirs {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join("hosts"), &table).unwrap();
        }
        HostNames(dirs)
    }
}

impl Drop for HostNames {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

struct Hosts<'a> {
    bed: &'a Testbed,
    bin: PathBuf,
    root: &'a Path,
}

impl Hosts<'_> {
    /// Runs `script` on `host` with the guide's variables; its standard output.
    fn run(&self, host: &str, script: &str) -> String {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let output = self
            .bed
            .command(host, Path::new("/usr/bin/env"))
            .arg(format!("PATH={path}"))
            .arg(format!("NINF_ETC={}", self.root.join("etc").display()))
            .arg(format!("NINF_VAR={}", self.root.join(host).display()))
            .args(["bash", "-euo", "pipefail", "-c", script])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "on {host}:\n{script}\nfailed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The servers the metaserver lists as up, by `ninf status --json` on `head`.
    fn servers_up(&self) -> Vec<String> {
        let status = self.run(
            "head",
            "ninf status --data-dir \"$NINF_VAR/client\" --json 2>/dev/null || echo '{}'",
        );
        let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
        let mut up: Vec<String> = status["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["up"] == true)
            .filter_map(|s| s["address"].as_str().map(str::to_string))
            .collect();
        up.sort();
        up
    }

    fn wait_for_servers(&self, wanted: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if self.servers_up() == wanted {
                return;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        let logs = HOSTS
            .iter()
            .map(|h| self.run(h, "tail -n 20 \"$NINF_VAR\"/*.log 2>/dev/null || true"))
            .collect::<Vec<_>>()
            .join("\n");
        panic!(
            "servers up: {:?}, wanted {wanted:?}\n{logs}",
            self.servers_up()
        );
    }
}

/// The call block's JSON: `mmul` of [1,2,3,4] by the identity.
fn assert_identity_product(output: &str) {
    let json: serde_json::Value = serde_json::from_str(output).expect(output);
    assert_eq!(json["status"], 0, "{output}");
    assert_eq!(
        json["outputs"]["C"],
        serde_json::json!([1.0, 2.0, 3.0, 4.0]),
        "{output}"
    );
}

#[test]
fn the_deploy_guides_commands_run_a_grid_across_three_hosts() {
    programs::build();
    let bin = Path::new(env!("CARGO_BIN_EXE_ninf"))
        .parent()
        .unwrap()
        .to_path_buf();
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploy.md")).unwrap();
    let blocks = blocks(&guide);
    let hosts_in_order: Vec<&str> = blocks.iter().map(|(h, _)| h.as_str()).collect();
    assert_eq!(
        hosts_in_order,
        [
            "head", "head", "head", "node1", "node2", "head", "head", "node1"
        ],
        "the guide's runnable blocks"
    );
    let prefix = format!("nd{}", std::process::id() % 100_000);
    let bed = Testbed::new(&prefix, Profile::parse(PROFILE).unwrap())
        .up()
        .unwrap();
    let _names = HostNames::write(&bed);
    let root = tempfile::tempdir().unwrap();
    let hosts = Hosts {
        bed: &bed,
        bin,
        root: root.path(),
    };
    let both = ["node1:7001", "node2:7001"];
    let (upgrade, first) = blocks.split_last().unwrap();
    let mut call = None;
    for (host, script) in first {
        if script.contains("ninf status") {
            hosts.wait_for_servers(&both);
        }
        let output = hosts.run(host, script);
        if script.contains("ninf call") {
            assert_identity_product(&output);
            call = Some((host.clone(), script.clone()));
        }
        if script.contains("ninf status") {
            let status: serde_json::Value = serde_json::from_str(&output).unwrap();
            let names: Vec<&str> = status["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["address"].as_str().unwrap())
                .collect();
            assert_eq!(names.len(), 2, "{output}");
        }
    }
    // The upgrade: node1 drains and leaves, comes back under the same name, and serves.
    let (host, script) = upgrade;
    assert!(script.contains("kill -TERM"), "{script}");
    hosts.run(host, script);
    hosts.wait_for_servers(&both);
    let (host, script) = call.unwrap();
    assert_identity_product(&hosts.run(&host, &script));
    let log = std::fs::read_to_string(root.path().join("head/metaserver.log")).unwrap();
    assert!(
        log.contains("server leaving"),
        "node1 said it was leaving:\n{log}"
    );
}
