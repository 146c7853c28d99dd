//! Starting real servers for tests: in-process (to reach their state) or as `ninf-server`
//! processes, serving the executables that `ninf-routines` builds.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Once};

use ninf_compute_server::config::ModuleConfig;
use ninf_compute_server::{ServerConfig, ServerState};
use ninf_proto::v1;

#[path = "../../../testing/programs.rs"]
mod programs;

/// The folder holding the built binaries (`target/<profile>`).
pub fn binaries() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .to_path_buf()
}

/// Builds the module executables once per test binary (a no-op when they are up to date),
/// with the command every test shares (`testing/programs.rs`).
pub fn ensure_executables() {
    static BUILD: Once = Once::new();
    BUILD.call_once(|| {
        programs::build();
    });
}

pub fn module(name: &str) -> ModuleConfig {
    ModuleConfig {
        executable: binaries().join(format!("ninf-exec-{name}")),
        idl: ninf_routines::idl::path(name),
    }
}

pub struct TestServer {
    pub address: String,
    pub state: Arc<ServerState>,
    running: ninf_compute_server::Running,
}

impl TestServer {
    /// Serves linpack, vector and selftest on a free loopback port, inside this runtime.
    pub async fn start(configure: impl FnOnce(&mut ServerConfig)) -> TestServer {
        ensure_executables();
        let mut config = ServerConfig {
            listen: "127.0.0.1:0".into(),
            processors: Some(2),
            modules: vec![module("linpack"), module("vector"), module("selftest")],
            load_interval_seconds: 0.05,
            ..ServerConfig::default()
        };
        configure(&mut config);
        let running = ninf_compute_server::bind(&config, v1::ServerInfo::default())
            .await
            .unwrap();
        TestServer {
            address: running.address.clone(),
            state: running.state.clone(),
            running,
        }
    }

    pub async fn stop(self) {
        self.running.stop().await.unwrap();
    }
}

/// A `ninf-server` process; killed when dropped.
pub struct ServerProcess {
    pub address: String,
    child: std::process::Child,
}

impl ServerProcess {
    pub fn start(extra: &[&str]) -> ServerProcess {
        use std::io::BufRead;
        ensure_executables();
        let dir = std::env::temp_dir().join(format!("ninf-server-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join(format!("server-{}.toml", extra.len()));
        let mut text = String::from("processors = 2\n");
        for m in ["linpack", "vector", "selftest"] {
            text.push_str(&format!(
                "[[modules]]\nexecutable = {:?}\nidl = {:?}\n",
                binaries().join(format!("ninf-exec-{m}")),
                ninf_routines::idl::path(m)
            ));
        }
        std::fs::write(&config, text).unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ninf-server"))
            .args(["--listen", "127.0.0.1:0", "--no-benchmark", "--config"])
            .arg(&config)
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        let address = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        ServerProcess { address, child }
    }
}

impl ServerProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> std::process::ExitStatus {
        std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A call of `echo(n, x)` whose `x` comes in bulk (`bytes` bytes announced).
pub fn echo_request(n: i64, bytes: u64) -> v1::CallRequest {
    v1::CallRequest {
        function: "echo".into(),
        arguments: vec![
            v1::CallArgument {
                source: Some(v1::call_argument::Source::Value(v1::ArgumentValue {
                    value: Some(v1::argument_value::Value::IntValue(n)),
                })),
            },
            v1::CallArgument {
                source: Some(v1::call_argument::Source::Bulk(v1::BulkArray {
                    element_type: v1::ElementType::Double as i32,
                    bytes,
                })),
            },
            v1::CallArgument { source: None },
        ],
        ..Default::default()
    }
}

/// Sends a request frame on a bulk TCP connection, its bulk bytes (`payload`) after it.
pub async fn send(stream: &mut tokio::net::TcpStream, request: &v1::CallRequest, payload: &[u8]) {
    use prost::Message;
    use tokio::io::AsyncWriteExt;
    let body = request.encode_to_vec();
    stream
        .write_all(&(body.len() as u32).to_le_bytes())
        .await
        .unwrap();
    stream.write_all(&body).await.unwrap();
    stream.write_all(payload).await.unwrap();
}

/// Receives a reply frame on a bulk TCP connection (its bulk bytes still to read).
pub async fn receive(stream: &mut tokio::net::TcpStream) -> v1::BulkReply {
    use prost::Message;
    use tokio::io::AsyncReadExt;
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.unwrap();
    let mut body = vec![0u8; u32::from_le_bytes(header) as usize];
    stream.read_exact(&mut body).await.unwrap();
    v1::BulkReply::decode(body.as_slice()).unwrap()
}
