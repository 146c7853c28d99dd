//! The C client's tests: C programs (`tests/c/*.c`) compiled by the system's `cc` against
//! `include/` and `libninf.so`, and a Fortran one (`tests/c/*.f90`, with `fortran/ninf.f90`)
//! by gfortran, run against a grid `ninf up --selftest` starts as its own
//! process. Each program checks values and error codes itself and exits non-zero at the
//! first failed check, printing which.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ninf_grid::processes::{self, Started};

#[path = "../../testing/programs.rs"]
mod programs;

/// Where cargo put the build: the test binary is in `target/debug/deps`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Builds the grid's programs and `libninf.so` and `libninf.a` (`cargo test` does not build
/// a library that only C links).
fn build() {
    programs::build();
    let library = target_dir().join("libninf.so");
    assert!(library.exists(), "{} is missing", library.display());
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

fn up(data_dir: &Path) -> Up {
    let child = Command::new(target_dir().join("ninf"))
        .args(["up", "--servers", "2", "--selftest", "--data-dir"])
        .arg(data_dir)
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

/// What `ninf status --json` says of the grid.
fn status(data_dir: &Path) -> serde_json::Value {
    let output = Command::new(target_dir().join("ninf"))
        .args(["status", "--json", "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The address of one of the grid's compute servers.
fn a_server(data_dir: &Path) -> String {
    status(data_dir)["servers"][0]["address"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The data kept on the grid, as `ninf status --json` lists it.
fn kept_data(data_dir: &Path) -> serde_json::Value {
    status(data_dir)["data"].clone()
}

/// Compiles `tests/c/NAME.c` as a user would: warnings are errors, `-lninf`.
fn compile(name: &str, out_dir: &Path) -> PathBuf {
    let program = out_dir.join(name);
    let lib = target_dir();
    let output = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-o"])
        .arg(&program)
        .arg(crate_dir().join("tests/c").join(format!("{name}.c")))
        .arg("-I")
        .arg(crate_dir().join("include"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lninf", "-lpthread", "-lm"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

/// Compiles `tests/c/NAME.f90` with the Fortran module (`fortran/ninf.f90`) by gfortran,
/// warnings as errors, against `libninf.so`; the module's `.mod` lands in `out_dir`.
fn compile_fortran(name: &str, out_dir: &Path) -> PathBuf {
    let program = out_dir.join(name);
    let lib = target_dir();
    let output = Command::new("gfortran")
        .current_dir(out_dir)
        .args(["-std=f2018", "-Wall", "-Werror", "-g", "-o"])
        .arg(&program)
        .arg(crate_dir().join("fortran/ninf.f90"))
        .arg(crate_dir().join("tests/c").join(format!("{name}.f90")))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-lninf")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "gfortran {name}.f90 failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

/// A copy of the grid file naming a token file (mode 0600, as the grid requires) that holds
/// a token the grid does not accept.
fn grid_file_with_a_wrong_token(grid_file: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let token = dir.join("wrong-token");
    std::fs::write(&token, "not-the-grid-token-at-all").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let text: String = std::fs::read_to_string(grid_file)
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("token_file"))
        .map(|line| format!("{line}\n"))
        .collect();
    let path = dir.join("wrong-token.toml");
    std::fs::write(
        &path,
        format!("token_file = \"{}\"\n{text}", token.display()),
    )
    .unwrap();
    path
}

/// Runs a test program, which must exit 0 having printed `last_line`'s words.
fn passes(command: &mut Command, last_line: &str) {
    let output = command.output().unwrap();
    let text = show(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.contains(last_line), "{text}");
}

fn show(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn c_programs_call_the_grid_through_grpc_h_and_ninf_h() {
    build();
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("grid");
    let _grid = up(&data_dir);
    let grid_file = data_dir.join("grid.toml");
    let server = a_server(&data_dir);
    let malformed = dir.path().join("malformed.toml");
    std::fs::write(&malformed, "proxy = [not a grid file\n").unwrap();
    let missing = dir.path().join("missing.toml");
    let wrong_token = grid_file_with_a_wrong_token(&grid_file, dir.path());

    let program = compile("grpc_api", dir.path());
    passes(
        Command::new(&program)
            .arg(&grid_file)
            .arg(&missing)
            .arg(&malformed)
            .arg(&server)
            .arg(&wrong_token)
            .env("NINF_GRID", &grid_file),
        " checks passed",
    );
    let program = compile("ninf_api", dir.path());
    passes(
        Command::new(&program).env("NINF_GRID", &grid_file),
        "all passed",
    );

    let program = compile("grpc_data", dir.path());
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    passes(
        Command::new(&program).arg(&grid_file).arg(&scratch),
        " checks passed",
    );
    assert_eq!(
        kept_data(&data_dir),
        serde_json::json!([]),
        "the program freed every handle"
    );

    let program = compile_fortran("fortran_api", dir.path());
    passes(
        Command::new(&program).arg(&grid_file).arg(&missing),
        "all passed",
    );

    the_example_installs_builds_and_runs_clean(dir.path(), &grid_file);
}

/// `scripts/install` then the README's command: `examples/c/solve.c` compiled with
/// `pkg-config --cflags --libs ninf`, run, run under valgrind with no error and no leak,
/// and linked statically against `libninf.a` too.
fn the_example_installs_builds_and_runs_clean(dir: &Path, grid_file: &Path) {
    let prefix = dir.join("prefix");
    let repository = crate_dir().parent().unwrap().to_path_buf();
    let profile = target_dir().file_name().unwrap().to_owned();
    let installed = Command::new(repository.join("scripts/install"))
        .args(["--no-build", "--profile"])
        .arg(profile)
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(installed.status.success(), "{}", show(&installed));
    let pkg_config_path = prefix.join("lib/pkgconfig");
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "ninf"])
        .env("PKG_CONFIG_PATH", &pkg_config_path)
        .output()
        .unwrap();
    assert!(flags.status.success(), "{}", show(&flags));
    let flags = String::from_utf8(flags.stdout).unwrap();
    assert!(flags.contains("-lninf"), "{flags}");
    let source = repository.join("examples/c/solve.c");
    let solve = dir.join("solve");
    let built = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&solve)
        .arg(&source)
        .args(flags.split_whitespace())
        .arg("-lm")
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", show(&built));
    let run = |command: &mut Command| {
        let output = command.env("NINF_GRID", grid_file).output().unwrap();
        let text = show(&output);
        assert!(output.status.success(), "{text}");
        assert!(text.contains("largest relative error of x"), "{text}");
    };
    run(Command::new(&solve).arg("200"));
    run(Command::new("valgrind")
        .args(["--error-exitcode=1", "--leak-check=full", "--quiet"])
        .arg(&solve)
        .arg("40"));

    let static_solve = dir.join("solve-static");
    let built = Command::new("cc")
        .args(["-std=c11", "-o"])
        .arg(&static_solve)
        .arg(&source)
        .arg("-I")
        .arg(prefix.join("include"))
        .arg(prefix.join("lib/libninf.a"))
        .args(["-lpthread", "-ldl", "-lm"])
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", show(&built));
    run(Command::new(&static_solve).arg("100"));
}

/// Starts `binary --config CONFIG` and waits until it listens.
fn start(binary: &str, config: &Path) -> Started {
    let mut command = Command::new(target_dir().join(binary));
    command.arg("--config").arg(config);
    processes::start(command, binary).unwrap()
}

fn free_address() -> String {
    processes::free_address().unwrap()
}

/// The parents of the `selftest` executables sleeping in a call (`slow_echo`). All of them,
/// not the first: the executable of a killed server's call sleeps on as an orphan until its
/// call's time is up, and must not hide the call the test waits for.
fn sleeping_executables_parents() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parents = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim() != "ninf-exec-selft" {
            continue;
        }
        let syscall = std::fs::read_to_string(path.join("syscall")).unwrap_or_default();
        // nanosleep and clock_nanosleep on x86_64.
        if !matches!(syscall.split_whitespace().next(), Some("35" | "230")) {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let parent = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|p| p.trim().parse::<u32>().ok());
        parents.extend(parent);
    }
    parents
}

#[test]
fn a_server_killed_under_a_call_fails_a_named_call_and_retries_a_placed_one() {
    build();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (metaserver, proxy) = (free_address(), free_address());
    let write = |name: &str, text: String| {
        let path = d.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let config = write(
        "metaserver.toml",
        format!(
            "listen = \"{metaserver}\"\ndata_dir = \"{}\"\nheartbeat_seconds = 0.25\nheartbeat_timeout_seconds = 1.5\n",
            d.join("metaserver").display()
        ),
    );
    let _metaserver = start("ninf-metaserver", &config);
    let idl = crate_dir().join("../routines/idl/selftest.idl");
    let executable = target_dir().join("ninf-exec-selftest");
    let mut servers = Vec::new();
    for i in 0..3 {
        let address = free_address();
        let config = write(
            &format!("server-{i}.toml"),
            format!(
                "listen = \"{address}\"\nmetaserver = \"{metaserver}\"\nprocessors = 1\n\n[[modules]]\nexecutable = \"{}\"\nidl = \"{}\"\n",
                executable.display(),
                idl.display()
            ),
        );
        servers.push((address, Some(start("ninf-server", &config))));
    }
    let config = write(
        "proxy.toml",
        format!(
            "listen = \"{proxy}\"\nmetaserver = \"{metaserver}\"\nretry_backoff_seconds = 0.2\ntask_retries = 6\n"
        ),
    );
    let _proxy = start("ninf-proxy", &config);
    let grid_file = write("grid.toml", format!("proxy = \"{proxy}\"\n"));

    let program = compile("server_killed", d);
    let mut child = Command::new(&program)
        .arg(&grid_file)
        .arg(&servers[0].0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut answer = child.stdin.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        let victim = match line.as_str() {
            "started named" => 0,
            "started placed" => {
                let deadline = Instant::now() + Duration::from_secs(20);
                loop {
                    let parents = sleeping_executables_parents();
                    let found = servers
                        .iter()
                        .position(|(_, p)| p.as_ref().is_some_and(|p| parents.contains(&p.0.id())));
                    if let Some(found) = found {
                        break found;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "the placed call never started: {seen:?}"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            _ => continue,
        };
        if line == "started named" {
            // The named call must be running before its server dies.
            let deadline = Instant::now() + Duration::from_secs(20);
            let named = servers[0].1.as_ref().map(|p| p.0.id());
            while !named.is_some_and(|id| sleeping_executables_parents().contains(&id)) {
                assert!(Instant::now() < deadline, "the named call never started");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        drop(servers[victim].1.take());
        std::io::Write::write_all(&mut answer, b"killed\n").unwrap();
    }
    let status = child.wait().unwrap();
    let text = seen.join("\n");
    assert!(status.success(), "{text}");
    assert!(text.contains("all passed"), "{text}");
}
