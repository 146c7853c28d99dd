"""Transactions: the seed's cascade and pairs against NumPy, edges by array identity, an
exception that sends nothing, the plan."""

import numpy as np
import pytest

import ninf
from conftest import fortran


def test_the_seeds_cascade_links_calls_by_array_identity_and_matches_numpy(grid, rng):
    n = 60
    A, B, C, D = (fortran(rng.random((n, n))) for _ in range(4))
    E, F, G = (np.zeros((n, n), order="F") for _ in range(3))
    with grid.transaction(label="py-cascade") as tx:
        tx.call("mmul", n, A, B, E)
        tx.call("mmul", n, C, D, F)
        tx.call("mmul", n, E, F, G)
        assert tx.edges == [(0, "C", 2, "A", 8 * n * n), (1, "C", 2, "B", 8 * n * n)]
    np.testing.assert_allclose(G, (A @ B) @ (C @ D), rtol=1e-10)
    # Every array a call wrote holds its value, as Ninf's C API leaves them.
    np.testing.assert_allclose(E, A @ B, rtol=1e-12)
    plan = tx.plan
    assert len(plan.tasks) == 3 and plan.edges == [(0, 2), (1, 2)]
    assert [t.function for t in plan.tasks] == ["mmul"] * 3
    assert all(t.server for t in plan.tasks)
    assert plan.actual_makespan > 0 and plan.predicted_makespan > 0
    # The part of a call's compute time its gang job stood stopped is part of it.
    assert all(0 <= t.stopped_seconds <= t.compute_seconds for t in plan.tasks)
    text = repr(plan)
    assert text.startswith(f"graph {plan.graph_id} (")
    assert "mmul#2" in text and "predicted (s)" in text
    html = plan._repr_html_()
    assert html.count("<tr>") == 4 and "mmul#0" in html


def test_scratch_arrays_keep_their_values_on_the_grid_and_are_never_written(grid, rng):
    n = 50
    A, B, C, D = (fortran(rng.random((n, n))) for _ in range(4))
    G = np.zeros((n, n), order="F")
    with grid.transaction() as tx:
        E = tx.scratch(np.full((n, n), 7.0, order="F"))
        tx.call("mmul", n, A, B, E)
        F = np.full((n, n), 7.0, order="F")
        tx.call("mmul", n, C, D, F)
        assert tx.scratch(F) is F  # also after the call that writes it
        tx.call("mmul", n, E, F, G)
    np.testing.assert_allclose(G, (A @ B) @ (C @ D), rtol=1e-10)
    assert (E == 7.0).all() and (F == 7.0).all()


def test_a_scratch_array_must_be_a_contiguous_numpy_array(grid):
    with grid.transaction() as tx:
        with pytest.raises(ninf.BadArgument, match="a scratch array must be a numpy.ndarray, got list"):
            tx.scratch([1.0, 2.0])
        with pytest.raises(ninf.BadArgument, match="a scratch array must be C- or Fortran-contiguous"):
            tx.scratch(np.zeros((4, 4))[:, ::2])
        with pytest.raises(ninf.BadArgument, match="a scratch array must have a dtype routines take .*, got <U1"):
            tx.scratch(np.array(["a"]))


def test_the_seeds_pairs_solve_as_numpy_does(grid, rng):
    n, pairs = 40, 3
    systems = [(rng.random((n, n)) + n * np.eye(n), rng.random(n)) for _ in range(pairs)]
    factors = [fortran(a.copy()) for a, _ in systems]
    pivots = [np.zeros(n, np.int32) for _ in systems]
    solutions = [b.copy() for _, b in systems]
    with grid.transaction() as tx:
        for a, ipvt, x in zip(factors, pivots, solutions):
            tx.call("dgefa", a, n, ipvt)
            tx.call("dgesl", a, n, ipvt, x)
        assert len(tx) == 2 * pairs
        assert len(tx.edges) == 2 * pairs  # a and ipvt flow from each dgefa to its dgesl
    for (a, b), x in zip(systems, solutions):
        np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10)
    assert [t.status for t in tx.plan.tasks] == [0] * (2 * pairs)


def test_an_exception_inside_the_block_sends_nothing(grid, rng):
    n = 10
    A = fortran(rng.random((n, n)))
    E = np.zeros((n, n), order="F")
    with pytest.raises(RuntimeError, match="changed my mind"):
        with grid.transaction() as tx:
            tx.call("mmul", n, A, A, E)
            raise RuntimeError("changed my mind")
    assert tx.plan is None
    assert not E.any()


def test_a_bad_call_is_raised_where_it_is_made_and_the_rest_can_go_on(grid, rng):
    n = 10
    A = fortran(rng.random((n, n)))
    E, G = np.zeros((n, n), order="F"), np.zeros((n, n), order="F")
    with grid.transaction() as tx:
        tx.call("mmul", n, A, A, E)
        with pytest.raises(ninf.BadArgument, match="argument `B` of `mmul` has 99 elements"):
            tx.call("mmul", n, E, np.zeros(99), G)
        with pytest.raises(ninf.BadArgument, match="overlaps another array"):
            tx.call("mmul", n, A, A, E.reshape(-1, order="F")[5:].reshape(5, 19, order="F"))
        tx.call("mmul", n, E, A, G)
    np.testing.assert_allclose(G, (A @ A) @ A, rtol=1e-10)
    assert len(tx.plan.tasks) == 2


def test_a_routine_that_fails_fails_the_transaction_and_writes_nothing(grid, rng):
    n = 10
    A = fortran(rng.random((n, n)))
    E = np.zeros((n, n), order="F")
    with pytest.raises(ninf.SessionFailed, match=r"`fail#1`.*selftest failure with code 3"):
        with grid.transaction() as tx:
            tx.call("mmul", n, A, A, E)
            tx.call("fail", 3)
    assert not E.any()
    assert grid.call("noop", 1) == 0


def test_an_empty_transaction_runs_nothing(grid):
    with grid.transaction() as tx:
        pass
    assert tx.plan.tasks == []


def test_the_example_script_runs_against_a_grid_named_by_ninf_grid(grid):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent.parent / "examples" / "cascade.py"
    done = subprocess.run(
        [sys.executable, str(script), "--connect"],
        env={**os.environ, "NINF_GRID": str(grid.grid_file)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "dgesv n=300: info 0" in done.stdout
    assert "cascade n=300:" in done.stdout and "mmul#2" in done.stdout


def test_a_followed_transaction_reports_its_tasks_to_the_end(grid, rng):
    n = 40
    A, B, C, D = (fortran(rng.random((n, n))) for _ in range(4))
    E, F, G = (np.zeros((n, n), order="F") for _ in range(3))
    reports = []
    with grid.transaction(progress=reports.append) as tx:
        tx.call("mmul", n, A, B, E)
        tx.call("mmul", n, C, D, F)
        tx.call("mmul", n, E, F, G)
    np.testing.assert_allclose(G, (A @ B) @ (C @ D), rtol=1e-10)
    assert reports, "no progress was reported"
    assert all(isinstance(r, ninf.Progress) for r in reports)
    done = [r.tasks_done for r in reports]
    assert done == sorted(done), f"progress went back: {done}"
    last = reports[-1]
    assert (last.tasks_done, last.tasks_total, last.retries) == (3, 3, 0)
    assert last.graph_id == tx.plan.graph_id
    # At least the four inputs sent, the two intermediates read, and G's reply.
    assert last.bytes_moved >= 7 * 8 * n * n


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_progress_callback_that_raises_does_not_fail_the_transaction(grid, rng):
    n = 30
    A, B = fortran(rng.random((n, n))), fortran(rng.random((n, n)))
    C = np.zeros((n, n), order="F")
    calls = []

    def broken(progress):
        calls.append(progress)
        raise RuntimeError("a watcher's bug")

    with grid.transaction(progress=broken) as tx:
        tx.call("mmul", n, A, B, C)
    np.testing.assert_allclose(C, A @ B, rtol=1e-12)
    assert calls and tx.plan.tasks[0].status == 0
