//! What the grid's end-to-end tests share: the executables built once, a grid of real
//! servers with fixed speeds on its own runtime, and test matrices.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Once;

use ninf::grid::GridClient;
use ninf_compute_server::config::ModuleConfig;
use ninf_grid::embedded::{EmbeddedGrid, GridOptions};
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

/// Builds the grid's programs once per test binary (a no-op when they are up to date), with
/// the command every test shares (`testing/programs.rs`).
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

/// A grid of servers offering these processors, with fixed speed figures so placements do
/// not depend on a benchmark run.
pub struct TestGrid {
    pub runtime: tokio::runtime::Runtime,
    pub grid: Option<EmbeddedGrid>,
    pub _dir: tempfile::TempDir,
}

impl TestGrid {
    pub fn start(processors: Vec<u32>, configure: impl FnOnce(&mut GridOptions)) -> TestGrid {
        ensure_executables();
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mut options = GridOptions::new(processors, dir.path());
        options.modules = vec![module("linpack"), module("selftest")];
        options.mflops = Some(1000.0);
        configure(&mut options);
        let grid = runtime.block_on(EmbeddedGrid::start(options)).unwrap();
        TestGrid {
            runtime,
            grid: Some(grid),
            _dir: dir,
        }
    }

    pub fn grid(&self) -> &EmbeddedGrid {
        self.grid.as_ref().unwrap()
    }

    pub fn client(&self, scheduler: &str) -> GridClient {
        GridClient::connect(&self.grid().endpoints.proxy)
            .unwrap()
            .with_scheduler(scheduler)
    }

    pub fn status(&self) -> v1::GridStatus {
        self.runtime
            .block_on(self.grid().metaserver.status(10))
            .unwrap()
    }

    /// Storage on every server must be empty once transactions are over.
    pub fn assert_no_leftovers(&self) {
        assert_eq!(
            self.grid().stored_bytes(),
            vec![0; self.grid().servers.len()],
            "intermediate data left on the servers"
        );
    }
}

impl Drop for TestGrid {
    fn drop(&mut self) {
        if let Some(grid) = self.grid.take() {
            self.runtime.block_on(grid.stop());
        }
    }
}

pub fn matrix(n: usize, seed: u64) -> Vec<f64> {
    (0..n * n)
        .map(|i| ((i as u64 * 2654435761 + seed * 97) % 1000) as f64 / 1000.0)
        .collect()
}

/// The largest |x - y| over two arrays' elements.
pub fn max_difference(xs: &[f64], ys: &[f64]) -> f64 {
    xs.iter()
        .zip(ys)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

pub fn local_mmul(n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut c = vec![0.0; n * n];
    ninf_routines::blas::mmul(n as i32, a, b, &mut c).unwrap();
    c
}

/// A compute server in its own process, registered with the grid's metaserver, that a test
/// can kill with SIGKILL.
pub struct ExternalServer {
    pub child: std::process::Child,
    pub address: String,
    config: PathBuf,
    /// Its environment's extra variables, kept for a restart.
    env: Vec<(String, String)>,
}

impl ExternalServer {
    pub fn start(grid: &TestGrid, modules: &[&str]) -> ExternalServer {
        ExternalServer::start_with(grid, modules, "plain", "")
    }

    /// With `settings` (TOML: top-level keys, then tables) in its configuration file
    /// `external-NAME.toml`.
    pub fn start_with(
        grid: &TestGrid,
        modules: &[&str],
        name: &str,
        settings: &str,
    ) -> ExternalServer {
        ExternalServer::start_with_env(grid, modules, name, settings, &[])
    }

    /// As [`ExternalServer::start_with`], the server (and so its executables) started with
    /// these variables in its environment.
    pub fn start_with_env(
        grid: &TestGrid,
        modules: &[&str],
        name: &str,
        settings: &str,
        env: &[(&str, &str)],
    ) -> ExternalServer {
        let dir = grid._dir.path();
        let config = dir.join(format!("external-{name}-{}.toml", modules.join("-")));
        let mut text = format!(
            "listen = \"127.0.0.1:0\"\nmetaserver = \"{}\"\nprocessors = 4\n{settings}\n",
            grid.grid().endpoints.metaserver
        );
        for name in modules {
            let m = module(name);
            text.push_str(&format!(
                "\n[[modules]]\nexecutable = \"{}\"\nidl = \"{}\"\n",
                m.executable.display(),
                m.idl.display()
            ));
        }
        std::fs::write(&config, text).unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (child, address) = spawn_server(&config, &env);
        ExternalServer {
            child,
            address,
            config,
            env,
        }
    }

    /// Starts it again, as a new process on the same address, after [`ExternalServer::kill`].
    pub fn restart(&mut self) {
        let text = std::fs::read_to_string(&self.config).unwrap().replacen(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"{}\"", self.address),
            1,
        );
        std::fs::write(&self.config, text).unwrap();
        let (child, address) = spawn_server(&self.config, &self.env);
        assert_eq!(address, self.address);
        self.child = child;
    }

    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// `ninf-server --config CONFIG` and the address it says it listens on.
fn spawn_server(config: &Path, env: &[(String, String)]) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(binaries().join("ninf-server"))
        .arg("--config")
        .arg(config)
        .arg("--no-benchmark")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, address)
}

impl Drop for ExternalServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET /metrics` from `address`, as a scraper would.
pub fn scrape(address: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: ninf\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    response
}

/// The sum of the samples of `metric` whose labels include every one of `labels`.
pub fn sample_sum(text: &str, metric: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| {
            line.starts_with(&format!("{metric}{{")) || line.starts_with(&format!("{metric} "))
        })
        .filter(|line| labels.iter().all(|l| line.contains(l)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `dgefa` then `dgesl` with every array sent: the reference data kept on the grid must
/// match.
pub fn solved_by_sending(
    client: &ninf::grid::GridClient,
    a0: &[f64],
    b: &[f64],
) -> (Vec<f64>, Vec<i32>, Vec<f64>) {
    let n = b.len();
    let (mut a, mut ipvt, mut x) = (a0.to_vec(), vec![0i32; n], b.to_vec());
    let order = n as i32;
    client
        .call(
            "dgefa",
            &mut [(&mut a).into(), order.into(), (&mut ipvt).into()],
        )
        .unwrap();
    client
        .call(
            "dgesl",
            &mut [(&a).into(), order.into(), (&ipvt).into(), (&mut x).into()],
        )
        .unwrap();
    (a, ipvt, x)
}
