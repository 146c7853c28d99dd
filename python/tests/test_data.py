"""Data kept on the grid (docs/data.md): grid.put and grid.empty make ninf.Data handles that
calls and transactions read and write where they are; d.get, d.free, grid.data(); freed,
unknown and other clients' handles raise DataNotFound naming them, and nothing runs."""

import tomllib

import numpy as np
import pytest

import ninf
from conftest import fortran


def servers(grid):
    with open(grid.grid_file, "rb") as f:
        return tomllib.load(f)["servers"]


def system(rng, n):
    return fortran(rng.random((n, n)) + n * np.eye(n))


def test_a_put_array_comes_back_as_it_went_with_its_attributes(grid, rng):
    a = fortran(rng.random((30, 20)))
    d = grid.put(a)
    assert isinstance(d, ninf.Data)
    assert d.nbytes == a.nbytes and d.dtype == np.float64 and d.shape == (30, 20)
    assert d.mode == "sticky" and len(d.id) == 32
    assert len(d.servers) == 1 and d.servers[0] in servers(grid)
    back = d.get()
    np.testing.assert_array_equal(back, a)
    assert back.flags.f_contiguous
    out = np.zeros((30, 20), order="F")
    assert d.get(out=out) is out
    np.testing.assert_array_equal(out, a)
    assert d in grid.data()
    with pytest.raises(ninf.BadArgument, match="600 float64"):
        d.get(out=np.zeros(5))
    d.free()
    assert d not in grid.data()


def test_factor_once_on_the_grid_then_solve_many_next_to_the_data(grid, rng):
    n = 80
    a0 = system(rng, n)
    a = grid.put(a0)
    ipvt = grid.empty(n, np.int32)
    assert grid.call("dgefa", a, n, ipvt) == 0
    where = a.servers
    assert len(where) == 1
    # In place on the grid: the factors came back only when asked.
    lu = a.get()
    assert not np.allclose(lu, a0)
    pivots = ipvt.get()
    assert pivots.dtype == np.int32 and 1 <= pivots.min() and pivots.max() <= n
    for k in range(3):
        b = rng.random(n)
        x = b.copy()
        with grid.transaction() as tx:
            tx.call("dgesl", a, n, ipvt, x)
        np.testing.assert_allclose(a0 @ x, b, rtol=1e-9, atol=1e-9)
        # Read where they are: wherever the solve ran, the factors stay in their one copy.
        assert a.servers == where and ipvt.servers == where
    a.free()
    ipvt.free()


def test_a_call_reading_a_large_handle_runs_next_to_it(grid, rng):
    # Placement is the predictor's choice: on one host the servers' links are fast (about
    # 1.5 GB/s), so for a solve reading a few kilobytes the servers' load samples decide.
    # `echo` computes nothing, and reading its 16 MiB from the other server costs about 10 ms
    # there, far more than the servers' samples can differ by.
    n = 2 * 1024 * 1024
    x0 = rng.random(n)
    x = grid.put(x0)
    where = x.servers
    for k in range(3):
        y = grid.empty(n)
        with grid.transaction() as tx:
            tx.call("echo", n, x, y)
        assert tx.plan.tasks[0].server == where[0], f"echo {k} runs next to `x`"
        assert y.servers == where
        np.testing.assert_array_equal(y.get(), x0)
        y.free()
    x.free()


def test_handles_beside_ordinary_arrays_in_a_transaction(grid, rng):
    n = 40
    A, B = fortran(rng.random((n, n))), fortran(rng.random((n, n)))
    a = grid.put(A, mode="persistent")
    e = grid.empty((n, n), order="F")
    G = np.zeros((n, n), order="F")
    with grid.transaction() as tx:
        tx.call("mmul", n, a, B, e)  # OUT into a handle
        tx.call("mmul", n, e, a, G)  # read back on the grid by an edge
        assert [edge[:4] for edge in tx.edges] == [(0, "C", 1, "A")]
    np.testing.assert_allclose(G, (A @ B) @ A, rtol=1e-10)
    np.testing.assert_allclose(e.get(), A @ B, rtol=1e-12)
    assert a.mode == "persistent"
    for d in (a, e):
        d.free()


def test_freed_foreign_and_ill_fitting_handles_are_refused_and_nothing_is_sent(grid, rng):
    n = 20
    a = grid.put(system(rng, n))
    small = grid.put(np.zeros((n - 1, n - 1)))
    ipvt = grid.empty(n, np.int32)
    with pytest.raises(ninf.BadArgument, match="int32"):
        grid.call("dgefa", a, n, grid.empty(n, np.int64))
    with pytest.raises(ninf.BadArgument, match=f"{(n - 1) ** 2} elements"):
        grid.call("dgefa", small, n, ipvt)
    with pytest.raises(ninf.BadArgument, match="no value yet"):
        ipvt.get()
    # Another client sees none of them and cannot use them.
    other = ninf.connect(grid.grid_file)
    assert other.data() == []
    with pytest.raises(ninf.DataNotFound, match=a.id):
        other.call("dgefa", a, n, ipvt)
    a.free()
    with pytest.raises(ninf.DataNotFound, match=a.id) as refused:
        grid.call("dgefa", a, n, ipvt)
    assert isinstance(refused.value, ninf.NinfError)
    assert refused.value.code == "DATA_NOT_FOUND"
    with pytest.raises(ninf.DataNotFound, match=a.id):
        a.get()
    with pytest.raises(ninf.DataNotFound):
        a.free()
    for d in grid.data():
        d.free()
    assert grid.data() == []


def test_persistent_data_is_kept_in_as_many_copies_as_asked(grid, rng):
    a = fortran(rng.random((10, 10)))
    with pytest.raises(ninf.BadArgument, match='needs mode "persistent"'):
        grid.put(a, replicas=2)
    d = grid.put(a, mode="persistent", replicas=2)
    assert sorted(d.servers) == sorted(servers(grid))
    np.testing.assert_array_equal(d.get(), a)
    with pytest.raises(ninf.RpcRefused, match="3 copies need as many up servers"):
        grid.put(a, mode="persistent", replicas=3)
    d.free()
    assert grid.data() == []
