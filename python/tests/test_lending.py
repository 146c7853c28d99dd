"""Cores lent between a local grid's servers (docs/gang.md, "Cores lent between servers"):
with ``lend_cores`` (the default) a large product running alone computes on every core of
the host, its own server's and the idle ones; two together, or any call on a grid started
with ``lend_cores=False`` (``ninf up --no-lend-cores``), compute on their own cores only. The
servers count the cores they borrowed in ``ninf_lent_threads``."""

import os

import numpy as np

import ninf
from conftest import fortran, metric_sum

# 2 n^3 = 1.3e8 flops: over the servers' lending threshold (`[gang] lend_min_flops`, 1e8).
N = 400


def lent_threads(grid):
    return sum(metric_sum(grid, f"server-{i}", "ninf_lent_threads_total") for i in range(2))


def lendable_cores():
    """Every core of the host but the borrower's own, when the two servers' single
    processors fit the host's cores (otherwise they share cores and nothing is lent)."""
    cores = len(os.sched_getaffinity(0))
    return cores - 1 if cores >= 2 else 0


def product(grid, a, b):
    c = np.zeros((N, N), order="F")
    assert grid.call("mmul", N, a, b, c) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-12)


def test_a_lone_product_borrows_the_idle_cores_and_two_together_do_not(grid, rng):
    a, b = fortran(rng.random((N, N))), fortran(rng.random((N, N)))
    before = lent_threads(grid)
    product(grid, a, b)
    assert lent_threads(grid) - before == lendable_cores()

    before = lent_threads(grid)
    with grid.transaction("two products") as tx:
        c1, c2 = np.zeros((N, N), order="F"), np.zeros((N, N), order="F")
        tx.call("mmul", N, a, b, c1)
        tx.call("mmul", N, b, a, c2)
    np.testing.assert_allclose(c1, a @ b, rtol=1e-12)
    np.testing.assert_allclose(c2, b @ a, rtol=1e-12)
    assert lent_threads(grid) == before


def test_a_grid_started_without_lending_keeps_every_call_on_its_own_core(rng):
    a, b = fortran(rng.random((N, N))), fortran(rng.random((N, N)))
    with ninf.local_grid(servers=2, lend_cores=False) as own_cores:
        product(own_cores, a, b)
        product(own_cores, b, a)
        assert lent_threads(own_cores) == 0


def test_a_lone_factorisation_of_a_matrix_kept_on_the_grid_borrows_and_solves(grid, rng):
    # 2 n^3 / 3 = 1.4e8 flops, over the threshold. The matrix and pivots stay on the grid,
    # so the call's every array is stored on its server (this once crashed the server).
    n = 600
    a = fortran(rng.random((n, n)) + n * np.eye(n))
    b = rng.random(n)
    x = b.copy()
    before = lent_threads(grid)
    with grid.transaction("one system") as tx:
        factors, pivots = tx.scratch(a), tx.scratch(np.empty(n, np.int32))
        tx.call("dgefa", factors, n, pivots)
        tx.call("dgesl", factors, n, pivots, x)
    np.testing.assert_allclose(a @ x, b, rtol=1e-9, atol=1e-12)
    assert lent_threads(grid) - before == lendable_cores()
