//! SIGHUP reloads a running `ninf-server`'s modules: a call in flight finishes, a removed
//! routine is refused with FUNCTION_NOT_FOUND, an added module is served, an unchanged one
//! keeps its warm executables, and a configuration that cannot be served changes nothing.
//! A module whose executable dies at start-up is left out and the others are served.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{binaries, ensure_executables};
use ninf::{Arg, Client, ErrorKind, OwnedArg};

fn module_toml(names: &[&str]) -> String {
    names
        .iter()
        .map(|m| {
            format!(
                "[[modules]]\nexecutable = {:?}\nidl = {:?}\n",
                binaries().join(format!("ninf-exec-{m}")),
                ninf_routines::idl::path(m)
            )
        })
        .collect()
}

/// A `ninf-server` process on `config`, its log in `log`; killed when dropped.
struct Server {
    child: Child,
    address: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &Path, log: &Path) -> Server {
    start_with(config, log, &[])
}

fn start_with(config: &Path, log: &Path, flags: &[String]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ninf-server"))
        .args(["--listen", "127.0.0.1:0", "--no-benchmark", "--config"])
        .arg(config)
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line {line:?}"))
        .to_string();
    Server { child, address }
}

impl Server {
    fn hangup(&self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGHUP) };
    }

    /// The module names it serves, as its `List` says.
    fn modules(&self) -> Vec<String> {
        let client = ninf::NinfClient::connect(&self.address);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let client = client.await.unwrap();
            client
                .list()
                .await
                .unwrap()
                .into_iter()
                .map(|m| m.module)
                .collect()
        })
    }

    fn wait_for_modules(&self, wanted: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let mut modules = self.modules();
            modules.sort();
            if modules == wanted {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "serving {modules:?}, not {wanted:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The executables of module `name` running under `server`.
fn executables(server: &Server, name: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let parent = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
            let cmdline =
                std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            parent == Some(server.child.id()) && cmdline.contains(&format!("ninf-exec-{name}"))
        })
        .collect();
    pids.sort_unstable();
    pids
}

#[test]
fn sighup_reloads_the_modules_without_dropping_a_call_in_flight() {
    ensure_executables();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    let log = dir.path().join("server.log");
    std::fs::write(
        &config,
        format!("processors = 2\n{}", module_toml(&["linpack", "selftest"])),
    )
    .unwrap();
    let server = start(&config, &log);
    server.wait_for_modules(&["linpack", "selftest"]);
    let linpack_before = executables(&server, "linpack");
    assert_eq!(
        linpack_before.len(),
        8,
        "a warm linpack executable for each of the 2 processors' 4 rows"
    );

    // A call that takes 1.5 s, in flight across the reload.
    let client = Client::connect(&server.address).unwrap();
    let x = vec![1.0, 2.0, 3.0];
    let in_flight = client
        .call_async(
            "slow_echo",
            vec![
                OwnedArg::Integer(1500),
                OwnedArg::Integer(3),
                OwnedArg::Array(ninf_proto::ArrayData::Double(x.clone())),
                OwnedArg::Out,
            ],
        )
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(
        &config,
        format!("processors = 2\n{}", module_toml(&["linpack", "vector"])),
    )
    .unwrap();
    server.hangup();
    server.wait_for_modules(&["linpack", "vector"]);

    let finished = client.wait(in_flight).unwrap();
    assert_eq!(finished.outputs["y"], ninf_proto::ArrayData::Double(x));
    let refused = client.call("noop", &mut [Arg::Integer(0)]).unwrap_err();
    assert_eq!(refused.kind, ErrorKind::FunctionNotFound, "{refused:?}");
    let mut result = [0.0];
    client
        .call(
            "ddot",
            &mut [
                Arg::Integer(2),
                Arg::from(&[1.0, 2.0][..]),
                Arg::from(&[3.0, 4.0][..]),
                Arg::from(&mut result[..]),
            ],
        )
        .unwrap();
    assert_eq!(result, [11.0]);
    assert_eq!(
        executables(&server, "linpack"),
        linpack_before,
        "an unchanged module keeps its warm executables"
    );
    assert!(
        executables(&server, "selftest").is_empty(),
        "a removed module's executables stop"
    );

    // A configuration that cannot be served changes nothing.
    std::fs::write(
        &config,
        format!(
            "processors = 2\n{}[[modules]]\nexecutable = \"x\"\nidl = \"/no/such.idl\"\n",
            module_toml(&["linpack"])
        ),
    )
    .unwrap();
    server.hangup();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("reload refused")
    {
        assert!(Instant::now() < deadline, "no refusal logged");
        std::thread::sleep(Duration::from_millis(50));
    }
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("/no/such.idl"), "{logged}");
    server.wait_for_modules(&["linpack", "vector"]);
}

#[test]
fn a_module_whose_executable_dies_at_start_up_is_left_out() {
    ensure_executables();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    let log = dir.path().join("server.log");
    // `false` exits at once: the module cannot be served, linpack still is.
    let dying = format!(
        "[[modules]]\nexecutable = \"/bin/false\"\nidl = {:?}\n",
        ninf_routines::idl::path("vector")
    );
    std::fs::write(
        &config,
        format!("processors = 1\n{}{dying}", module_toml(&["linpack"])),
    )
    .unwrap();
    let server = start(&config, &log);
    server.wait_for_modules(&["linpack"]);
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("module not served"), "{logged}");
    assert!(logged.contains("exited at start-up"), "{logged}");
    let client = Client::connect(&server.address).unwrap();
    let refused = client.call("ddot", &mut [Arg::Integer(0)]).unwrap_err();
    assert_eq!(refused.kind, ErrorKind::FunctionNotFound);
}

#[test]
fn a_module_flag_serves_a_module_beside_the_configured_ones() {
    ensure_executables();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.toml");
    std::fs::write(
        &config,
        format!("processors = 1\n{}", module_toml(&["linpack"])),
    )
    .unwrap();
    // As docs/compute-server.md writes it: --module IDL=EXECUTABLE.
    let flag = format!(
        "{}={}",
        ninf_routines::idl::path("vector").display(),
        binaries().join("ninf-exec-vector").display()
    );
    let server = start_with(
        &config,
        &dir.path().join("server.log"),
        &["--module".to_string(), flag],
    );
    server.wait_for_modules(&["linpack", "vector"]);
    let refused = Command::new(env!("CARGO_BIN_EXE_ninf-server"))
        .args(["--no-benchmark", "--module", "no-equals-sign"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("--module takes IDL=EXECUTABLE, got `no-equals-sign`"),
        "{stderr}"
    );
}
