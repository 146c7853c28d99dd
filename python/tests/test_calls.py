"""Single calls: values against NumPy, arrays written in place, every bad argument named."""

import numpy as np
import pytest

import ninf
from conftest import fortran


def test_dgesv_solves_as_numpy_does_and_writes_the_solution_in_place(grid, rng):
    n = 120
    a = rng.random((n, n)) + n * np.eye(n)
    b = rng.random(n)
    factored, ipvt, x = fortran(a.copy()), np.zeros(n, np.int32), b.copy()
    assert grid.call("dgesv", factored, n, ipvt, x) == 0
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10)
    assert ipvt.min() >= 1 and ipvt.max() <= n
    assert not np.array_equal(factored, a)


def test_a_singular_matrix_returns_linpacks_info_as_the_status(grid):
    n = 4
    a = fortran(np.zeros((n, n)))
    assert grid.call("dgesv", a, n, np.zeros(n, np.int32), np.ones(n)) == 1


def test_mmul_multiplies_as_the_matmul_operator(grid, rng):
    n = 90
    a, b = fortran(rng.random((n, n))), fortran(rng.random((n, n)))
    c = np.zeros((n, n), order="F")
    assert grid.call("mmul", n, a, b, c) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


def test_scalars_complex_numbers_strings_and_work_arrays_cross(grid):
    n = 5
    z = np.arange(n, dtype=np.complex128) * (1 + 1j)
    grid.call("pscale", 1, n, 2 - 1j, z)
    np.testing.assert_allclose(z, np.arange(n) * (1 + 1j) * (2 - 1j))
    buffer = np.zeros(n, np.uint8)
    grid.call("label", "hi", n, buffer, None)
    assert bytes(buffer).startswith(b"hi")
    result = np.zeros(1)
    grid.call("ddot", 3, np.array([1.0, 2, 3]), np.array([4.0, 5, 6]), result)
    assert result[0] == 32.0


def test_describe_and_functions_give_the_interfaces(grid):
    functions = grid.functions()
    assert {"mmul", "dgesv", "noop", "sleep_ms"} <= set(functions)
    assert functions == sorted(functions)
    f = grid.describe("dgesv")
    assert f.module == "linpack"
    assert [p.name for p in f.parameters] == ["a", "n", "ipvt", "b"]
    assert [p.mode for p in f.parameters] == ["INOUT", "IN", "OUT", "INOUT"]
    assert f.parameter("a").dtype == "float64" and f.parameter("ipvt").dtype == "int32"
    assert f.parameter("a").dimensions == ("n", "n")
    assert f.signature == (
        "dgesv(INOUT double a[n][n], IN int n, OUT int ipvt[n], INOUT double b[n])"
    )
    assert [p.name for p in f.outputs] == ["a", "ipvt", "b"]
    assert f.parallelism == "threads"  # IDL `Threads`: it may be lent idle cores
    assert grid.describe("dgesl").parallelism == "sequential"
    with pytest.raises(ninf.FunctionNotFound):
        grid.describe("no_such_routine")


def bad(grid, *args, match):
    with pytest.raises(ninf.BadArgument, match=match) as caught:
        grid.call(*args)
    assert caught.value.code == "BAD_ARGUMENT"
    assert isinstance(caught.value, ninf.NinfError)


def test_every_bad_argument_is_refused_before_sending_with_its_name(grid, rng):
    n = 8
    a, b = fortran(rng.random((n, n))), fortran(rng.random((n, n)))
    c = np.zeros((n, n), order="F")
    bad(grid, "mmul", n, a, b.astype(np.float32), c,
        match=r"argument `B` of `mmul` must be an array of float64 \(IDL double\), got dtype float32; convert it with .astype\(numpy.float64\)")
    bad(grid, "mmul", n, a, b[:, : n - 1].copy(), c,
        match=r"argument `B` of `mmul` has 56 elements, expected 64 \(n x n = 8 x 8\)")
    bad(grid, "mmul", n, a, rng.random((n, 2 * n))[:, ::2], c,
        match=r"argument `B` of `mmul` must be C- or Fortran-contiguous")
    bad(grid, "mmul", n, a, [[1.0] * n] * n, c,
        match=r"argument `B` of `mmul` must be a numpy.ndarray of float64 \(IDL double\), got list")
    frozen = c.copy()
    frozen.flags.writeable = False
    bad(grid, "mmul", n, a, b, frozen, match=r"argument `C` of `mmul` receives .* read-only")
    bad(grid, "mmul", n, a, b, match=r"`mmul` takes 4 arguments \(n, A, B, C\), got 3")
    bad(grid, "mmul", 2.5, a, b, c, match=r"argument `n` of `mmul` must be an int \(IDL int\), got float")
    bad(grid, "mmul", 2**40, a, b, c, match=r"argument `n` of `mmul`: 1099511627776 does not fit in an int")
    bad(grid, "label", "x", 1, np.zeros(1, np.uint8), np.zeros(2),
        match=r"argument `scratch` of `label` is a WORK array .*: pass None")
    assert not c.any()


def test_an_unknown_routine_and_a_failing_routine_name_their_errors(grid):
    with pytest.raises(ninf.FunctionNotFound, match="no_such_routine") as caught:
        grid.call("no_such_routine", 1)
    assert caught.value.code == "FUNCTION_NOT_FOUND"
    with pytest.raises(ninf.SessionFailed, match="selftest failure with code 7") as caught:
        grid.call("fail", 7)
    assert caught.value.code == "SESSION_FAILED"
    # The grid keeps serving.
    assert grid.call("noop", 1) == 0


def test_a_routine_whose_process_exits_fails_as_the_routines_failure(grid):
    # The proxy tries it on one other server at most, then reports how the process ended.
    with pytest.raises(ninf.SessionFailed, match=r"crashed on .*exited with status 10") as caught:
        grid.call("exit", 10)
    assert caught.value.code == "SESSION_FAILED"
    assert grid.call("noop", 1) == 0


def test_threads_call_at_once(grid):
    from concurrent.futures import ThreadPoolExecutor

    def echo(i):
        x = np.full(100, float(i))
        y = np.zeros(100)
        grid.call("echo", 100, x, y)
        return y

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(echo, range(32)))
    for i, y in enumerate(results):
        assert (y == i).all()


def test_connect_reads_the_grid_file_and_refuses_a_missing_or_malformed_one(grid, tmp_path, monkeypatch):
    grid_file = grid.grid_file
    again = ninf.connect(grid_file)
    assert again.address == grid.address
    monkeypatch.setenv("NINF_GRID", str(grid_file))
    assert ninf.connect().call("noop", 1) == 0
    with pytest.raises(ninf.ServerNotFound, match="no grid file at .*nowhere.toml"):
        ninf.connect(tmp_path / "nowhere.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("proxy = \n")
    with pytest.raises(ninf.BadArgument, match="broken.toml is not a grid file"):
        ninf.connect(broken)
    # The grid has a token: a proxy address without it is refused at the first call.
    with pytest.raises(ninf.NinfError, match="token"):
        ninf.connect(f"ninf://{grid.address}").call("noop", 1)



def test_a_grid_over_tls_is_reached_through_its_grid_file():
    with ninf.local_grid(servers=1, tls=True) as secure:
        assert "tls_dir" in secure.grid_file.read_text()
        n = 3
        a = np.asfortranarray(np.eye(n) * 2)
        c = np.zeros((n, n), order="F")
        assert secure.call("mmul", n, a, a, c) == 0
        np.testing.assert_allclose(c, np.eye(n) * 4)


def test_the_package_and_the_grid_programs_have_one_version():
    import importlib.metadata
    import subprocess

    from ninf._local import find_ninf

    assert ninf.__version__ == importlib.metadata.version("ninf")
    shown = subprocess.run([str(find_ninf()), "--version"], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == f"ninf {ninf.__version__}"


def test_local_grid_finds_the_programs_the_wheel_installed():
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    scripts = Path(sysconfig.get_path("scripts"))
    found = subprocess.run(
        [sys.executable, "-c", "from ninf._local import find_ninf; print(find_ninf())"],
        env={"PATH": f"{scripts}:/usr/bin:/bin", "NINF_BIN_DIR": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(found.stdout.strip()) == scripts / "ninf"
    for program in ["ninf-server", "ninf-metaserver", "ninf-proxy", "ninf-gen", "ninf-exec-linpack"]:
        assert (scripts / program).is_file(), program
    assert (Path(sys.prefix) / "lib" / "libninf_exec.a").is_file()
