//! A library author's routines on the grid: a C routine and a Fortran routine built by
//! `ninf-gen build` into one executable, reference LAPACK and BLAS from the system's
//! libraries (`examples/lapack/lapack.idl`, no wrapper code), both served by
//! `ninf up --module` beside the standard routines and called through the grid: single
//! calls, a transaction whose edge goes from the C routine to the Fortran one, LAPACK's
//! results against known answers and against the standard (faer) routines, and a
//! dgetrf/dgetrs transaction that keeps the factors on one server. And the bad builds: an
//! undefined routine, a missing source, a Rust routine, each named with its IDL line.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ninf::grid::{GridClient, GridFile};
use ninf::{Arg, TxArg};
use ninf_grid::processes::{self, Started};

#[path = "../../testing/programs.rs"]
mod programs;

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The grid's programs, `ninf-gen`, and `libninf_exec.a` (`cargo test` does not build a
/// library that only C links).
fn build() {
    programs::build();
    assert!(target_dir().join("libninf_exec.a").exists());
}

fn show(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// `ninf-gen build IDL -o OUT`.
fn ninf_gen_build(idl: &Path, out: &Path) -> Output {
    Command::new(target_dir().join("ninf-gen"))
        .arg("build")
        .arg(idl)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

const C_SOURCE: &str = r#"
/* x[i] = start + i */
void ramp(int n, double start, double *x) {
    for (int i = 0; i < n; i++) x[i] = start + i;
}
"#;

const FORTRAN_SOURCE: &str = "
subroutine twice(n, x, y)
  integer, intent(in) :: n
  double precision, intent(in) :: x(n)
  double precision, intent(out) :: y(n)
  y = 2.0d0 * x
end subroutine twice
";

/// Reads `ninf_exec_threads()` and how many cores the calling thread may run on.
const LANES_SOURCE: &str = r#"
#define _GNU_SOURCE
#include <sched.h>

int ninf_exec_threads(void);

void lanes(int work, int *seen) {
    cpu_set_t set;
    CPU_ZERO(&set);
    sched_getaffinity(0, sizeof set, &set);
    seen[0] = ninf_exec_threads();
    seen[1] = CPU_COUNT(&set);
}
"#;

const MINE_IDL: &str = r#"Module mine;
Define ramp(IN int n, IN double start, OUT double x[n])
    "x[i] = start + i, in C"
    Required "ramp.c"
    Calls "C" ramp(n, start, x);
Define twice(IN int n, IN double x[n], OUT double y[n])
    "y = 2 x, in Fortran"
    Required "twice.f90"
    Calls "Fortran" TWICE(n, x, y);
Define lanes(IN int work, OUT int seen[2])
    "the threads a call may compute with and the cores it may run on, in C"
    CalcOrder work
    Threads
    Required "lanes.c"
    Calls "C" lanes(work, seen);
"#;

/// The C and Fortran module's IDL and sources, in `dir`.
fn write_mine(dir: &Path) {
    std::fs::write(dir.join("ramp.c"), C_SOURCE).unwrap();
    std::fs::write(dir.join("twice.f90"), FORTRAN_SOURCE).unwrap();
    std::fs::write(dir.join("lanes.c"), LANES_SOURCE).unwrap();
    std::fs::write(dir.join("mine.idl"), MINE_IDL).unwrap();
}

/// `ninf up` in the background, stopped with SIGINT when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let _ = self.0.wait();
    }
}

fn up(data_dir: &Path, modules: &[String]) -> Up {
    let mut command = Command::new(target_dir().join("ninf"));
    command
        .args(["up", "--servers", "2", "--data-dir"])
        .arg(data_dir);
    for module in modules {
        command.args(["--module", module]);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let grid = Up(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !data_dir.join("grid.toml").exists() {
        assert!(Instant::now() < deadline, "ninf up wrote no grid file");
        std::thread::sleep(Duration::from_millis(100));
    }
    grid
}

fn client(data_dir: &Path) -> GridClient {
    let file = GridFile::read(&data_dir.join("grid.toml")).unwrap();
    let inner = ninf::runtime::runtime()
        .unwrap()
        .block_on(file.connect())
        .unwrap();
    GridClient::from_async(inner)
}

#[test]
fn c_fortran_and_lapack_routines_are_built_served_and_called() {
    build();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_mine(d);
    let out = d.join("bin");
    let built = ninf_gen_build(&d.join("mine.idl"), &out);
    assert!(built.status.success(), "{}", show(&built));
    let lapack_idl = repository().join("examples/lapack/lapack.idl");
    let built = ninf_gen_build(&lapack_idl, &out);
    assert!(built.status.success(), "{}", show(&built));
    assert!(String::from_utf8_lossy(&built.stdout).contains("ninf-exec-lapack"));

    let data_dir = d.join("grid");
    let _grid = up(
        &data_dir,
        &[
            format!(
                "{}={}",
                d.join("mine.idl").display(),
                out.join("ninf-exec-mine").display()
            ),
            format!(
                "{}={}",
                lapack_idl.display(),
                out.join("ninf-exec-lapack").display()
            ),
        ],
    );
    let grid = client(&data_dir);
    c_and_fortran(&grid);
    c_threads(&grid);
    lapack_against_known_answers_and_faer(&grid);
    factors_stay_on_one_server(&grid);
}

fn c_and_fortran(grid: &GridClient) {
    let n = 5;
    let mut x = vec![0.0; n];
    grid.call(
        "ramp",
        &mut [
            Arg::Integer(n as i64),
            Arg::Real(10.0),
            Arg::Out((&mut x[..]).into()),
        ],
    )
    .unwrap();
    assert_eq!(x, [10.0, 11.0, 12.0, 13.0, 14.0]);
    // One transaction: the C routine's output is the Fortran routine's input, server to server.
    let (mut ramped, mut doubled) = (vec![0.0; n], vec![0.0; n]);
    let plan = grid
        .transaction(|tx| {
            let (x, y) = (tx.buffer(&mut ramped), tx.buffer(&mut doubled));
            tx.call(
                "ramp",
                &[TxArg::Integer(n as i64), TxArg::Real(1.5), x.into()],
            )?;
            tx.call("twice", &[TxArg::Integer(n as i64), x.into(), y.into()])?;
            Ok(())
        })
        .unwrap();
    assert_eq!(plan.edges, [(0, 1)]);
    assert_eq!(doubled, [3.0, 5.0, 7.0, 9.0, 11.0]);
}

/// A C routine declared `Threads` reads its thread count with `ninf_exec_threads()`: alone on
/// `ninf up`'s grid (two servers of one core each, lending each other idle cores) it may use
/// every core of the host and runs on all of them; two calls issued together get one thread
/// each.
fn c_threads(grid: &GridClient) {
    let host = host_cores();
    let lendable = if host >= 2 { host } else { 1 };
    // 10^9 flops: over the servers' lending threshold (`[gang] lend_min_flops`).
    let work = 1_000_000_000;
    let mut seen = vec![0i32; 2];
    grid.call(
        "lanes",
        &mut [Arg::Integer(work), Arg::Out((&mut seen[..]).into())],
    )
    .unwrap();
    assert_eq!(
        seen, [lendable as i32; 2],
        "threads and cores of a lone call"
    );

    let (mut first, mut second) = (vec![0i32; 2], vec![0i32; 2]);
    grid.transaction(|tx| {
        for seen in [tx.buffer(&mut first), tx.buffer(&mut second)] {
            tx.call("lanes", &[TxArg::Integer(work), seen.into()])?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(
        (first[0], second[0]),
        (1, 1),
        "threads of two calls issued together"
    );
}

/// The cores this process may run on.
fn host_cores() -> usize {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        libc::CPU_COUNT(&set) as usize
    }
}

/// A diagonally dominant n x n matrix, column-major.
fn matrix(n: usize) -> Vec<f64> {
    (0..n * n)
        .map(|k| {
            let (i, j) = (k % n, k / n);
            if i == j {
                n as f64 + 1.0
            } else {
                1.0 / (1.0 + (i + 2 * j) as f64)
            }
        })
        .collect()
}

/// A x, column-major.
fn times(a: &[f64], x: &[f64]) -> Vec<f64> {
    let n = x.len();
    (0..n)
        .map(|i| (0..n).map(|j| a[i + j * n] * x[j]).sum())
        .collect()
}

fn lapack_against_known_answers_and_faer(grid: &GridClient) {
    let n = 40;
    let a0 = matrix(n);
    let solution: Vec<f64> = (1..=n).map(|v| v as f64).collect();
    let b0 = times(&a0, &solution);
    let (mut a, mut b, mut ipiv, mut info) = (a0.clone(), b0.clone(), vec![0i32; n], vec![-1i32]);
    let ni = n as i64;
    grid.call(
        "lapack_dgesv",
        &mut [
            Arg::Integer(ni),
            Arg::Integer(1),
            Arg::Out((&mut a[..]).into()),
            Arg::Integer(ni),
            Arg::Out((&mut ipiv[..]).into()),
            Arg::Out((&mut b[..]).into()),
            Arg::Integer(ni),
            Arg::Out((&mut info[..]).into()),
        ],
    )
    .unwrap();
    assert_eq!(info, [0]);
    for (got, want) in b.iter().zip(&solution) {
        assert!((got - want).abs() < 1e-10, "{got} against {want}");
    }
    // The standard routine (faer) on the same system agrees.
    let (mut fa, mut fb, mut fipvt) = (a0.clone(), b0.clone(), vec![0i32; n]);
    grid.call(
        "dgesv",
        &mut [
            Arg::Out((&mut fa[..]).into()),
            Arg::Integer(ni),
            Arg::Out((&mut fipvt[..]).into()),
            Arg::Out((&mut fb[..]).into()),
        ],
    )
    .unwrap();
    for (lapack, faer) in b.iter().zip(&fb) {
        assert!((lapack - faer).abs() < 1e-10, "{lapack} against {faer}");
    }

    // Cholesky of a known matrix: [[4, 2], [2, 5]] = L L' with L = [[2, 0], [1, 2]].
    let mut spd = [4.0, 2.0, 2.0, 5.0];
    let mut info = vec![-1i32];
    grid.call(
        "lapack_dpotrf",
        &mut [
            Arg::Integer(i64::from(b'L')),
            Arg::Integer(2),
            Arg::Out((&mut spd[..]).into()),
            Arg::Integer(2),
            Arg::Out((&mut info[..]).into()),
        ],
    )
    .unwrap();
    assert_eq!(info, [0]);
    assert_eq!((spd[0], spd[1], spd[3]), (2.0, 1.0, 2.0));

    // dgemm: C = 2 A B + C with A = [[1, 2], [3, 4]], B = I, C = ones.
    let (ma, mb, mut mc) = (
        vec![1.0, 3.0, 2.0, 4.0],
        vec![1.0, 0.0, 0.0, 1.0],
        vec![1.0; 4],
    );
    grid.call(
        "blas_dgemm",
        &mut [
            Arg::Integer(i64::from(b'N')),
            Arg::Integer(i64::from(b'N')),
            Arg::Integer(2),
            Arg::Integer(2),
            Arg::Integer(2),
            Arg::Real(2.0),
            Arg::In((&ma[..]).into()),
            Arg::Integer(2),
            Arg::In((&mb[..]).into()),
            Arg::Integer(2),
            Arg::Real(1.0),
            Arg::Out((&mut mc[..]).into()),
            Arg::Integer(2),
        ],
    )
    .unwrap();
    assert_eq!(mc, [3.0, 7.0, 5.0, 9.0]);
}

fn factors_stay_on_one_server(grid: &GridClient) {
    let n = 30;
    let a0 = matrix(n);
    let solution: Vec<f64> = (0..n).map(|v| 1.0 - v as f64 / 10.0).collect();
    let (mut a, mut b) = (a0.clone(), times(&a0, &solution));
    let (mut ipiv, mut info1, mut info2) = (vec![0i32; n], vec![-1i32], vec![-1i32]);
    let ni = n as i64;
    let plan = grid
        .transaction(|tx| {
            let (a, ipiv, b) = (tx.buffer(&mut a), tx.buffer(&mut ipiv), tx.buffer(&mut b));
            let (i1, i2) = (tx.buffer(&mut info1), tx.buffer(&mut info2));
            let int = TxArg::Integer;
            tx.call(
                "lapack_dgetrf",
                &[int(ni), int(ni), a.into(), int(ni), ipiv.into(), i1.into()],
            )?;
            tx.call(
                "lapack_dgetrs",
                &[
                    int(i64::from(b'N')),
                    int(ni),
                    int(1),
                    a.into(),
                    int(ni),
                    ipiv.into(),
                    b.into(),
                    int(ni),
                    i2.into(),
                ],
            )?;
            Ok(())
        })
        .unwrap();
    assert_eq!((info1[0], info2[0]), (0, 0));
    for (got, want) in b.iter().zip(&solution) {
        assert!((got - want).abs() < 1e-10, "{got} against {want}");
    }
    assert_eq!(
        plan.edges,
        [(0, 1), (0, 1)],
        "the factors and the pivots are edges"
    );
    assert_eq!(
        plan.tasks[0].server, plan.tasks[1].server,
        "the factors stay where dgetrf left them"
    );
    assert_eq!(plan.inter_server_ratio, 0.0);
}

/// Builds `idl_text` (with the files `sources` beside it) and returns the failure's text.
fn failed_build(idl_text: &str, sources: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in sources {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let idl = dir.path().join("bad.idl");
    std::fs::write(&idl, idl_text).unwrap();
    let output = ninf_gen_build(&idl, &dir.path().join("bin"));
    assert!(!output.status.success(), "{}", show(&output));
    assert!(!dir.path().join("bin/ninf-exec-bad").exists());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn bad_builds_name_the_problem_and_the_idl_line() {
    build();
    let undefined = failed_build(
        "Module bad;\nDefine f(IN int n, OUT double x[n])\n    Required \"ramp.c\"\n    Calls \"C\" no_such_routine(n, x);\n",
        &[("ramp.c", C_SOURCE)],
    );
    assert!(undefined.contains("linking failed"), "{undefined}");
    assert!(
        undefined.contains("undefined reference to `no_such_routine'"),
        "{undefined}"
    );
    assert!(
        undefined
            .contains("bad.idl:4:5: `no_such_routine`, named by this `Calls`, is defined by none"),
        "{undefined}"
    );

    let missing = failed_build(
        "Module bad;\nDefine f(IN int n, OUT double x[n])\n    Required \"gone.c\"\n    Calls \"C\" f(n, x);\n",
        &[],
    );
    assert!(
        missing.contains("bad.idl:3:14: error: `Required \"gone.c\"`: no file"),
        "{missing}"
    );

    let broken = failed_build(
        "Module bad;\nDefine f(IN int n, OUT double x[n])\n    Required \"broken.c\"\n    Calls \"C\" f(n, x);\n",
        &[("broken.c", "void f(int n, double *x) { this is not C }\n")],
    );
    assert!(broken.contains("compiling broken.c (named at "), "{broken}");
    assert!(broken.contains("bad.idl:3:14"), "{broken}");
    assert!(broken.contains("error:"), "{broken}");

    let library = failed_build(
        "Module bad;\nLibrary \"-lno_such_library_anywhere\";\nDefine f(IN int n, OUT double x[n])\n    Required \"ramp.c\"\n    Calls \"C\" ramp(n, 0.0, x);\n",
        &[("ramp.c", C_SOURCE)],
    );
    // `0.0` is not a parameter: the IDL is refused before anything is compiled.
    assert!(library.contains("bad.idl:5:"), "{library}");

    let library = failed_build(
        "Module bad;\nLibrary \"-lno_such_library_anywhere\";\nDefine f(IN int n, IN double s, OUT double x[n])\n    Required \"ramp.c\"\n    Calls \"C\" ramp(n, s, x);\n",
        &[("ramp.c", C_SOURCE)],
    );
    assert!(
        library.contains("bad.idl:2:9: the `Library` flags"),
        "{library}"
    );

    let rust = failed_build(
        "Module bad;\nDefine f(IN int n)\n    Calls \"Rust\" my_crate::f(n);\n",
        &[],
    );
    assert!(
        rust.contains("bad.idl:3:5: error: `f` calls a Rust routine"),
        "{rust}"
    );
}

/// docs/authors.md's files and tutorial commands, as written: blocks fenced as
/// "```LANG file=NAME" are the files, blocks fenced as "```sh tutorial" the commands.
fn tutorial() -> (Vec<(String, String)>, String) {
    let text = std::fs::read_to_string(repository().join("docs/authors.md")).unwrap();
    let (mut files, mut script) = (Vec::new(), String::new());
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(info) = line.strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|l| !l.starts_with("```"))
            .collect();
        if let Some(name) = info
            .split_whitespace()
            .find_map(|w| w.strip_prefix("file="))
        {
            files.push((name.to_string(), body.join("\n") + "\n"));
        } else if info.trim() == "sh tutorial" {
            script.push_str(&(body.join("\n") + "\n"));
        }
    }
    (files, script)
}

#[test]
fn the_authors_tutorial_runs_as_written() {
    build();
    let (files, script) = tutorial();
    assert!(
        files.len() >= 4 && script.contains("ninf-gen build"),
        "{files:?}\n{script}"
    );
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    // The tutorial's commands in one shell, with the grid's programs on PATH; whatever it
    // left running in the background is stopped at the end.
    let wrapped =
        format!("set -euo pipefail\ntrap 'kill -INT $(jobs -p) 2>/dev/null; wait' EXIT\n{script}");
    let path = format!(
        "{}:{}",
        target_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(&wrapped)
        .current_dir(dir.path())
        .env("PATH", path)
        .output()
        .unwrap();
    let text = show(&output);
    assert!(output.status.success(), "{text}");
    assert!(dir.path().join("ninf-exec-mine").exists(), "{text}");
    assert!(dir.path().join("ninf-exec-fortran").exists(), "{text}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json_start = stdout.find('{').unwrap_or(0);
    // The call's JSON, among what the other commands print.
    let result: serde_json::Value = serde_json::Deserializer::from_str(&stdout[json_start..])
        .into_iter()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(
        result["outputs"]["y"],
        serde_json::json!([12.0, 14.0, 16.0]),
        "{text}"
    );
}

/// Starts `binary ARGS` and waits until it listens.
fn start(binary: &str, args: &[&std::ffi::OsStr]) -> Started {
    let mut command = Command::new(target_dir().join(binary));
    command.args(args);
    processes::start(command, binary).unwrap()
}

/// The routines the grid's servers serve, as the proxy lists them.
fn functions(grid: &GridClient) -> Vec<String> {
    ninf::runtime::runtime()
        .unwrap()
        .block_on(grid.inner().functions())
        .unwrap()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first server's row in the metaserver's status.
fn server_status(metaserver: &str) -> ninf_proto::v1::ServerStatus {
    ninf::runtime::runtime().unwrap().block_on(async {
        let channel = ninf_proto::net::connect(metaserver, None, Default::default())
            .await
            .unwrap();
        let mut client = ninf_proto::v1::scheduling_client::SchedulingClient::new(channel);
        let status = client
            .status(ninf_proto::v1::StatusRequest::default())
            .await
            .unwrap()
            .into_inner();
        status.servers[0].clone()
    })
}

#[test]
fn a_reloaded_server_registers_its_new_modules_with_the_metaserver() {
    build();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_mine(d);
    let built = ninf_gen_build(&d.join("mine.idl"), d);
    assert!(built.status.success(), "{}", show(&built));

    let (metaserver, proxy) = (
        processes::free_address().unwrap(),
        processes::free_address().unwrap(),
    );
    let data = d.join("metaserver");
    let _metaserver = start(
        "ninf-metaserver",
        &[
            "--listen".as_ref(),
            metaserver.as_ref(),
            "--data-dir".as_ref(),
            data.as_os_str(),
        ],
    );
    let linpack = format!(
        "[[modules]]\nexecutable = {:?}\nidl = {:?}\n",
        target_dir().join("ninf-exec-linpack"),
        repository().join("routines/idl/linpack.idl")
    );
    let mine = format!(
        "[[modules]]\nexecutable = {:?}\nidl = {:?}\n",
        d.join("ninf-exec-mine"),
        d.join("mine.idl")
    );
    let config = d.join("server.toml");
    std::fs::write(
        &config,
        format!("metaserver = \"{metaserver}\"\nprocessors = 1\n{linpack}"),
    )
    .unwrap();
    let server = start(
        "ninf-server",
        &[
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--no-benchmark".as_ref(),
            "--config".as_ref(),
            config.as_os_str(),
        ],
    );
    // With a configuration file in the test's folder, where the proxy keeps its journal.
    let proxy_config = d.join("proxy.toml");
    std::fs::write(
        &proxy_config,
        format!("listen = \"{proxy}\"\nmetaserver = \"{metaserver}\"\n"),
    )
    .unwrap();
    let _proxy = start(
        "ninf-proxy",
        &["--config".as_ref(), proxy_config.as_os_str()],
    );
    std::fs::write(d.join("grid.toml"), format!("proxy = \"{proxy}\"\n")).unwrap();
    let grid = client(d);
    wait_until("the server registered", || {
        functions(&grid).contains(&"dgefa".to_string())
    });
    assert!(!functions(&grid).contains(&"ramp".to_string()));

    let hangup = || {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(server.0.id() as i32, libc::SIGHUP) };
    };
    // With a module whose executable exits at once (`false`): left out, and listed so.
    let broken = format!(
        "[[modules]]\nexecutable = \"/bin/false\"\nidl = {:?}\n",
        repository().join("routines/idl/vector.idl")
    );
    std::fs::write(
        &config,
        format!("metaserver = \"{metaserver}\"\nprocessors = 1\n{linpack}{mine}{broken}"),
    )
    .unwrap();
    hangup();
    wait_until("ramp is registered", || {
        functions(&grid).contains(&"ramp".to_string())
    });
    let status = server_status(&metaserver);
    assert_eq!(status.modules, ["linpack", "mine"]);
    assert_eq!(status.failed_modules.len(), 1, "{status:?}");
    assert_eq!(status.failed_modules[0].executable, "/bin/false");
    assert!(
        status.failed_modules[0]
            .reason
            .contains("exited at start-up"),
        "{status:?}"
    );
    let mut x = vec![0.0; 3];
    grid.call(
        "ramp",
        &mut [
            Arg::Integer(3),
            Arg::Real(7.0),
            Arg::Out((&mut x[..]).into()),
        ],
    )
    .unwrap();
    assert_eq!(x, [7.0, 8.0, 9.0]);

    std::fs::write(
        &config,
        format!("metaserver = \"{metaserver}\"\nprocessors = 1\n{linpack}"),
    )
    .unwrap();
    hangup();
    wait_until("ramp is gone", || {
        !functions(&grid).contains(&"ramp".to_string())
    });
    let refused = grid
        .call(
            "ramp",
            &mut [
                Arg::Integer(3),
                Arg::Real(7.0),
                Arg::Out((&mut x[..]).into()),
            ],
        )
        .unwrap_err();
    assert_eq!(
        refused.kind,
        ninf::ErrorKind::FunctionNotFound,
        "{refused:?}"
    );
}

/// `examples/rust-module` copied out of this repository, its dependencies pointed at this
/// checkout as a Rust author points them at theirs, built by Cargo on its own; the module's
/// executable then answers calls (through the executable protocol, with no server).
#[test]
fn a_rust_crate_outside_the_repository_builds_its_module() {
    let dir = tempfile::tempdir().unwrap();
    let template = repository().join("examples/rust-module");
    let crate_dir = dir.path().join("hello");
    std::fs::create_dir_all(crate_dir.join("src")).unwrap();
    std::fs::create_dir_all(crate_dir.join("idl")).unwrap();
    for file in ["Cargo.toml", "build.rs", "src/main.rs", "idl/hello.idl"] {
        let mut text = std::fs::read_to_string(template.join(file)).unwrap();
        if file == "Cargo.toml" {
            let root = repository().canonicalize().unwrap();
            text = text
                .replace(
                    "../../executable",
                    &root.join("executable").display().to_string(),
                )
                .replace("../../idl", &root.join("idl").display().to_string());
        }
        std::fs::write(crate_dir.join(file), text).unwrap();
    }
    // This checkout's lock, so the dependencies resolve to the versions already here.
    std::fs::copy(
        repository().join("Cargo.lock"),
        crate_dir.join("Cargo.lock"),
    )
    .unwrap();
    let targets = target_dir().parent().unwrap().join("rust-module");
    let built = Command::new(env!("CARGO"))
        .args(["build", "--offline", "-q"])
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", &targets)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", show(&built));

    let module = ninf_idl::compile_file(&crate_dir.join("idl/hello.idl")).unwrap();
    let mut hello =
        ninf::local::LocalExecutable::spawn(&targets.join("debug/ninf-exec-hello"), module)
            .unwrap();
    let mut y = [1.0, 1.0, 1.0];
    ninf::Caller::call(
        &mut hello,
        "axpy",
        &mut [
            Arg::Integer(3),
            Arg::Real(2.0),
            Arg::In((&[1.0, 2.0, 3.0][..]).into()),
            Arg::Out((&mut y[..]).into()),
        ],
    )
    .unwrap();
    assert_eq!(y, [3.0, 5.0, 7.0]);
    let mut norm = [0.0];
    ninf::Caller::call(
        &mut hello,
        "norm",
        &mut [
            Arg::Integer(2),
            Arg::In((&[3.0, 4.0][..]).into()),
            Arg::Out((&mut norm[..]).into()),
        ],
    )
    .unwrap();
    assert_eq!(norm, [5.0]);
}
