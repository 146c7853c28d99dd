"""Ninf against its peers on one machine, side by side in one run (issue 22): the seed's
cascade (8 matrices, 7 products in 3 stages) and pairs (5 independent linear systems) at
several sizes, 10,000 tiny tasks, and one 64 MiB argument in and out, on Ninf (a local grid
of two servers), Ray and Dask (two workers each) and NumPy alone. Every time is what the
client sees, data transfer included; each is the median of the trials. Run by
scripts/bench-peers, which installs the peers into a virtual environment first.

    python peers.py BIN_DIR [--sizes 200,1000] [--trials 3] [--tiny 10000] [--mib 64]
                            [--factor-n 2000] [--solves 50] [--only data]
                            [--systems ninf,ray,dask,numpy,ninf-no-turns,bound] [--json]
                            [--interleave]
                            [--no-lend-cores] [--before OLD_BIN_DIR]

Factor once, solve many (docs/data.md): one n x n matrix factored once, then --solves right-
hand sides solved against the factors. "kept" keeps the matrix on the grid (Ninf's
grid.put, Ray's ray.put, Dask's scatter) and the factors with it; "resent" sends the factors
with every solve. Ninf factors with LINPACK's dgefa and solves with dgesl; the peers with
SciPy's lu_factor and lu_solve, the same algorithm. A chain of 10 transactions over the same
64 MiB of inputs (two vectors of 32 MiB, one ddot each): "kept" puts them once, "resent"
sends them with every transaction. --only data runs just these.

With --interleave every system is started at once and each workload's trials alternate
between them (each round starting with the next system), so that a change in the machine's
other load falls on all of them alike. Every trial, in turn or interleaved, starts once the
machine is idle (see quiet()).

The system "bound" is no system: the cascade and the pairs as the best schedule of whole
NumPy tasks on two cores runs them with no data moved (see BoundSide), what no scheduler of
whole tasks beats on this machine.

Where the systems differ: Ninf's pairs are LINPACK's dgefa then dgesl, two tasks per
system with the factors passed server to server; the peers solve each system with
numpy.linalg.solve in one task. Matrices are column-major for Ninf, as its routines read them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np


def cpu_jiffies() -> Optional[Tuple[int, int]]:
    """(busy, total) time of all the machine's cores since boot, in jiffies, from
    /proc/stat; None where there is none. Busy is user, nice, system, irq and softirq time;
    a hypervisor's steal counts in the total only (no one here can wait it out)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 8:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return user + nice + system + irq + softirq, sum(fields)


# A trial starts once the cores were at most this busy over one window, or after the longest
# wait (a machine busy with something else does not stop the run).
QUIET_BUSY = 0.10
QUIET_WINDOW_SECONDS = 0.05
QUIET_LONGEST_SECONDS = 2.0


def quiet() -> None:
    """Waits until the machine is idle, so that no trial starts while the last one's threads
    still spin: after each product NumPy's OpenBLAS threads keep a core busy for another
    0.13 s, in the benchmark's own process and in Ray's workers, which took that core from
    whichever system ran next (docs/notes/2026-12-06-the-trial-after-numpys.md)."""
    deadline = time.perf_counter() + QUIET_LONGEST_SECONDS
    before = cpu_jiffies()
    while before is not None and time.perf_counter() < deadline:
        time.sleep(QUIET_WINDOW_SECONDS)
        after = cpu_jiffies()
        if after is None:
            return
        busy, total = after[0] - before[0], after[1] - before[1]
        if total > 0 and busy <= QUIET_BUSY * total:
            return
        before = after


def trial_time(run: Callable[[], object]) -> float:
    """One timed trial, started on an idle machine."""
    quiet()
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def median_time(run: Callable[[], None], trials: int) -> float:
    run()  # warm up: connections, pools, compiled code
    return statistics.median(trial_time(run) for _ in range(trials))


def matrices(n: int, count: int, seed: int = 2026) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.asfortranarray(rng.random((n, n))) for _ in range(count)]


def systems(n: int, count: int = 5, seed: int = 7):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        a = rng.random((n, n)) + n * np.eye(n)
        out.append((np.asfortranarray(a), rng.random(n)))
    return out


def cascade_expected(m: List[np.ndarray]) -> np.ndarray:
    e = [m[0] @ m[1], m[2] @ m[3], m[4] @ m[5], m[6] @ m[7]]
    return (e[0] @ e[1]) @ (e[2] @ e[3])


# ---- Ninf ------------------------------------------------------------------------------


def ninf_cascade(grid, m: List[np.ndarray]):
    """The cascade as one transaction on `grid`: its result and the transaction (whose
    `plan` says where each call ran)."""
    n = m[0].shape[0]
    result = np.zeros((n, n), order="F")
    with grid.transaction() as tx:
        # The six intermediates stay on the grid, as Ray's and Dask's do.
        e = [tx.scratch(np.empty((n, n), order="F")) for _ in range(6)] + [result]
        for i in range(4):
            tx.call("mmul", n, m[2 * i], m[2 * i + 1], e[i])
        tx.call("mmul", n, e[0], e[1], e[4])
        tx.call("mmul", n, e[2], e[3], e[5])
        tx.call("mmul", n, e[4], e[5], e[6])
    return result, tx


class NinfSide:
    def __init__(
        self, bin_dir: str, lend_cores: bool = True, turns: bool = True, name: str = ""
    ) -> None:
        import ninf

        # Without turns: the grid as it was before a transaction's long calls took turns
        # on their server (docs/scheduling.md, "Turns"), to measure them side by side.
        self.name = name or ("ninf" if turns else "ninf-no-turns")
        os.environ["NINF_BIN_DIR"] = bin_dir
        self._grid_cm = ninf.local_grid(
            servers=2, selftest=True, lend_cores=lend_cores, turns=turns
        )
        self.grid = self._grid_cm.__enter__()

    def close(self) -> None:
        self._grid_cm.__exit__(None, None, None)

    def cascade(self, m: List[np.ndarray]) -> np.ndarray:
        return ninf_cascade(self.grid, m)[0]

    def pairs(self, s) -> List[np.ndarray]:
        n = s[0][0].shape[0]
        solutions = [b.copy() for _, b in s]
        with self.grid.transaction() as tx:
            # The factors and pivots stay on the grid: each system's matrix is left as it
            # was, and only the solutions come back.
            factors = [tx.scratch(a) for a, _ in s]
            pivots = [tx.scratch(np.empty(n, np.int32)) for _ in s]
            for a, ipvt, x in zip(factors, pivots, solutions):
                tx.call("dgefa", a, n, ipvt)
                tx.call("dgesl", a, n, ipvt, x)
        return solutions

    def tiny(self, count: int) -> None:
        with self.grid.transaction() as tx:
            for _ in range(count):
                tx.call("noop", 1)

    def echo(self, x: np.ndarray) -> np.ndarray:
        y = np.empty_like(x)
        self.grid.call("echo", x.size, x, y)
        return y

    def factor_kept(self, a: np.ndarray, bs: List[np.ndarray]) -> List[np.ndarray]:
        n = a.shape[0]
        d = self.grid.put(a)
        ipvt = self.grid.empty(n, np.int32)
        try:
            self.grid.call("dgefa", d, n, ipvt)
            xs = [b.copy() for b in bs]
            futures = [self.grid.call_async("dgesl", d, n, ipvt, x) for x in xs]
            for f in futures:
                f.result()
            return xs
        finally:
            d.free()
            ipvt.free()

    def chain_kept(self, x: np.ndarray, y: np.ndarray, count: int) -> List[float]:
        dx, dy = self.grid.put(x), self.grid.put(y)
        try:
            results = []
            for _ in range(count):
                r = np.zeros(1)
                with self.grid.transaction() as tx:
                    tx.call("ddot", x.size, dx, dy, r)
                results.append(r[0])
            return results
        finally:
            dx.free()
            dy.free()

    def chain_resent(self, x: np.ndarray, y: np.ndarray, count: int) -> List[float]:
        results = []
        for _ in range(count):
            r = np.zeros(1)
            with self.grid.transaction() as tx:
                tx.call("ddot", x.size, x, y, r)
            results.append(r[0])
        return results

    def factor_resent(self, a: np.ndarray, bs: List[np.ndarray]) -> List[np.ndarray]:
        n = a.shape[0]
        lu, ipvt = a.copy(order="F"), np.empty(n, np.int32)
        self.grid.call("dgefa", lu, n, ipvt)
        xs = [b.copy() for b in bs]
        futures = [self.grid.call_async("dgesl", lu, n, ipvt, x) for x in xs]
        for f in futures:
            f.result()
        return xs


# ---- Ray -------------------------------------------------------------------------------


def _dot(x, y):
    """np.dot as a Python function: NumPy 2.4's np.dot is a dispatcher object, which
    ray.remote refuses."""
    return np.dot(x, y)


def _lu_solve_own_pivots(factors, b):
    """SciPy's lu_solve on a copy of the pivots (8 KB at n = 2000). SciPy's getrs wrapper
    shifts the pivot array to 1-based in place around the LAPACK call and back after, even
    when the array is read-only; Ray hands every worker the same pivots in shared memory, so
    two solves at once shift them twice and one of them solves with wrong pivots (seen: some
    of 50 solves wrong in every run, SciPy 1.17, Ray 2.60); a Dask worker may send its
    factors to the other worker while a solve has them shifted (seen once in four runs). The
    factors stay shared."""
    import scipy.linalg

    lu, piv = factors
    return scipy.linalg.lu_solve((lu, piv.copy()), b)



class RaySide:
    name = "ray"

    def __init__(self) -> None:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        self.ray = ray
        self.matmul = ray.remote(lambda a, b: a @ b)
        self.solve = ray.remote(lambda a, b: np.linalg.solve(a, b))
        self.noop = ray.remote(lambda: None)
        self.echo_task = ray.remote(lambda x: x.copy())

    def close(self) -> None:
        self.ray.shutdown()

    def cascade(self, m):
        e = [self.matmul.remote(m[2 * i], m[2 * i + 1]) for i in range(4)]
        f = [self.matmul.remote(e[0], e[1]), self.matmul.remote(e[2], e[3])]
        return self.ray.get(self.matmul.remote(f[0], f[1]))

    def pairs(self, s):
        return self.ray.get([self.solve.remote(a, b) for a, b in s])

    def tiny(self, count: int) -> None:
        self.ray.get([self.noop.remote() for _ in range(count)])

    def echo(self, x):
        return self.ray.get(self.echo_task.remote(x))

    def factor_kept(self, a, bs):
        import scipy.linalg

        factor = self.ray.remote(scipy.linalg.lu_factor)
        solve = self.ray.remote(_lu_solve_own_pivots)
        factors = factor.remote(self.ray.put(a))
        return self.ray.get([solve.remote(factors, b) for b in bs])

    def chain_kept(self, x, y, count):
        dot = self.ray.remote(_dot)
        rx, ry = self.ray.put(x), self.ray.put(y)
        return [self.ray.get(dot.remote(rx, ry)) for _ in range(count)]

    def chain_resent(self, x, y, count):
        dot = self.ray.remote(_dot)
        return [self.ray.get(dot.remote(x, y)) for _ in range(count)]

    def factor_resent(self, a, bs):
        import scipy.linalg

        factor = self.ray.remote(scipy.linalg.lu_factor)
        solve = self.ray.remote(_lu_solve_own_pivots)
        factors = self.ray.get(factor.remote(a))
        return self.ray.get([solve.remote(factors, b) for b in bs])


# ---- Dask ------------------------------------------------------------------------------


class DaskSide:
    name = "dask"

    def __init__(self) -> None:
        from dask.distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster)

    def close(self) -> None:
        self.client.close()
        self.cluster.close()

    def cascade(self, m):
        c = self.client
        e = [c.submit(np.matmul, m[2 * i], m[2 * i + 1], pure=False) for i in range(4)]
        f = [c.submit(np.matmul, e[0], e[1], pure=False), c.submit(np.matmul, e[2], e[3], pure=False)]
        return c.submit(np.matmul, f[0], f[1], pure=False).result()

    def pairs(self, s):
        futures = [self.client.submit(np.linalg.solve, a, b, pure=False) for a, b in s]
        return self.client.gather(futures)

    def tiny(self, count: int) -> None:
        self.client.gather(self.client.map(lambda i: None, range(count), pure=False))

    def echo(self, x):
        return self.client.submit(np.copy, x, pure=False).result()

    def factor_kept(self, a, bs):
        import scipy.linalg

        c = self.client
        [matrix] = c.scatter([a])
        factors = c.submit(scipy.linalg.lu_factor, matrix, pure=False)
        return c.gather([c.submit(_lu_solve_own_pivots, factors, b, pure=False) for b in bs])

    def chain_kept(self, x, y, count):
        c = self.client
        fx, fy = c.scatter([x, y])
        return [c.submit(np.dot, fx, fy, pure=False).result() for _ in range(count)]

    def chain_resent(self, x, y, count):
        c = self.client
        return [c.submit(np.dot, x, y, pure=False).result() for _ in range(count)]

    def factor_resent(self, a, bs):
        import scipy.linalg

        c = self.client
        factors = c.submit(scipy.linalg.lu_factor, a, pure=False).result()
        return c.gather([c.submit(_lu_solve_own_pivots, factors, b, pure=False) for b in bs])


# ---- NumPy alone -----------------------------------------------------------------------


class NumpySide:
    name = "numpy"

    def close(self) -> None:
        pass

    def cascade(self, m):
        return cascade_expected(m)

    def pairs(self, s):
        return [np.linalg.solve(a, b) for a, b in s]

    def tiny(self, count: int) -> None:
        raise NotImplementedError

    def echo(self, x):
        return x.copy()

    def factor_kept(self, a, bs):
        try:
            import scipy.linalg
        except ImportError:
            raise NotImplementedError("SciPy is not installed") from None
        factors = scipy.linalg.lu_factor(a)
        return [scipy.linalg.lu_solve(factors, b) for b in bs]

    def factor_resent(self, a, bs):
        raise NotImplementedError

    def chain_kept(self, x, y, count):
        return [float(np.dot(x, y)) for _ in range(count)]

    def chain_resent(self, x, y, count):
        raise NotImplementedError


# ---- The best whole-task schedule ------------------------------------------------------


def _bound_worker(conn) -> None:
    """One worker of BoundSide: runs the tasks it is sent, in order, on arrays in shared
    memory (so that nothing is copied), with as many OpenBLAS threads as its environment
    says, and answers True once they are done."""
    from multiprocessing import shared_memory

    blocks = {}

    def array(name: str, shape: Tuple[int, ...], dtype: str = "float64") -> np.ndarray:
        if name not in blocks:
            blocks[name] = shared_memory.SharedMemory(name=name)
        return np.ndarray(shape, dtype=dtype, buffer=blocks[name].buf, order="F")

    while True:
        tasks = conn.recv()
        if tasks is None:
            break
        for op, n, a, b, out in tasks:
            if op == "matmul":
                np.matmul(array(a, (n, n)), array(b, (n, n)), out=array(out, (n, n)))
            else:
                array(out, (n,))[:] = np.linalg.solve(array(a, (n, n)), array(b, (n,)))
        conn.send(True)
    for block in blocks.values():
        block.close()


class BoundSide:
    """The cascade and the pairs as the best schedule of whole NumPy tasks on this machine's
    two cores could run them, with no data moved at all: two workers of one OpenBLAS thread
    each take half of the tasks that can run at once, and the odd one out (the cascade's
    last product, the pairs' fifth system) runs on a third worker with two threads once both
    are done. Every array lives in shared memory, written once before the trials. What a
    scheduler of whole tasks cannot beat here, whatever it moves or decides, unless a task
    grows onto a core freed while it runs (docs/performance.md, "The best schedule of whole
    tasks")."""

    name = "bound"

    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.workers = []
        for threads in (1, 1, 2):
            parent, child = context.Pipe()
            saved = os.environ.get("OPENBLAS_NUM_THREADS")
            os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
            try:
                process = context.Process(target=_bound_worker, args=(child,), daemon=True)
                process.start()
            finally:
                if saved is None:
                    del os.environ["OPENBLAS_NUM_THREADS"]
                else:
                    os.environ["OPENBLAS_NUM_THREADS"] = saved
            self.workers.append((process, parent))
        self.blocks = {}
        self.inputs = {}

    def close(self) -> None:
        for process, conn in self.workers:
            conn.send(None)
            process.join(timeout=10)
        for block in self.blocks.values():
            block.close()
            block.unlink()

    def _shared(self, key: str, like: np.ndarray) -> Tuple[str, np.ndarray]:
        """A block of shared memory shaped as `like`, made once per key."""
        from multiprocessing import shared_memory

        if key not in self.blocks:
            self.blocks[key] = shared_memory.SharedMemory(create=True, size=like.nbytes)
        block = self.blocks[key]
        return block.name, np.ndarray(like.shape, like.dtype, buffer=block.buf, order="F")

    def _inputs(self, key: str, arrays: List[np.ndarray]) -> List[str]:
        """The shared copies of a workload's inputs, written the first time they are seen."""
        if key not in self.inputs:
            names = []
            for i, a in enumerate(arrays):
                name, shared = self._shared(f"{key} in {i}", a)
                shared[...] = a
                names.append(name)
            self.inputs[key] = (arrays, names)
        return self.inputs[key][1]

    def _stages(self, halves, odd) -> None:
        """Both one-thread workers' task lists at once, then the two-thread worker's task."""
        for (_, conn), tasks in zip(self.workers, halves):
            conn.send(tasks)
        for (_, conn), _tasks in zip(self.workers, halves):
            conn.recv()
        conn = self.workers[2][1]
        conn.send([odd])
        conn.recv()

    def cascade(self, m):
        n = m[0].shape[0]
        key = f"cascade {id(m)} {n}"
        i = self._inputs(key, m)
        e = [self._shared(f"{key} e{k}", m[0]) for k in range(7)]
        halves = [
            [("matmul", n, i[0], i[1], e[0][0]), ("matmul", n, i[2], i[3], e[1][0]),
             ("matmul", n, e[0][0], e[1][0], e[4][0])],
            [("matmul", n, i[4], i[5], e[2][0]), ("matmul", n, i[6], i[7], e[3][0]),
             ("matmul", n, e[2][0], e[3][0], e[5][0])],
        ]
        self._stages(halves, ("matmul", n, e[4][0], e[5][0], e[6][0]))
        return e[6][1]

    def pairs(self, s):
        n = s[0][0].shape[0]
        key = f"pairs {id(s)} {n}"
        names = self._inputs(key, [x for pair in s for x in pair])
        xs = [self._shared(f"{key} x{k}", s[k][1]) for k in range(len(s))]
        tasks = [("solve", n, names[2 * k], names[2 * k + 1], xs[k][0]) for k in range(len(s))]
        half = (len(tasks) - 1) // 2
        self._stages([tasks[:half], tasks[half:-1]], tasks[-1])
        return [x for _, x in xs]

    def tiny(self, count: int) -> None:
        raise NotImplementedError("no tasks to schedule")

    def echo(self, x):
        raise NotImplementedError("nothing computed")

    def factor_kept(self, a, bs):
        raise NotImplementedError("not a schedule of whole tasks")

    factor_resent = factor_kept

    def chain_kept(self, x, y, count):
        raise NotImplementedError("not a schedule of whole tasks")

    chain_resent = chain_kept


def factor_problem(n: int, solves: int):
    rng = np.random.default_rng(11)
    a = np.asfortranarray(rng.random((n, n)) + n * np.eye(n))
    return a, [rng.random(n) for _ in range(solves)]


def data_workloads(args):
    """(name, run on a side, check a side) of factor once, solve many and of the chain of
    transactions, each kept and resent."""
    a, bs = factor_problem(args.factor_n, args.solves)
    label = f"factor n={args.factor_n} + {args.solves} solves"
    out = []
    for how in ("kept", "resent"):

        def run(side, how=how):
            return getattr(side, f"factor_{how}")(a, bs)

        def check(side, run=run, how=how):
            for b, x in zip(bs, run(side)):
                assert np.allclose(a @ x, b, rtol=1e-6), f"{side.name}: wrong {how} solve"

        out.append((f"{label}, {how}", run, check))
    rng = np.random.default_rng(12)
    x, y = rng.random(args.mib * 1024 * 1024 // 16), rng.random(args.mib * 1024 * 1024 // 16)
    expected = float(np.dot(x, y))
    for how in ("kept", "resent"):

        def run(side, how=how):
            return getattr(side, f"chain_{how}")(x, y, 10)

        def check(side, run=run, how=how):
            for got in run(side):
                assert abs(got - expected) <= 1e-9 * abs(expected), f"{side.name}: {how} chain"

        out.append((f"10 transactions over {args.mib} MiB, {how}", run, check))
    return out


def run_side(side, args) -> Dict[str, float]:
    results: Dict[str, float] = {}
    for name, run, check in data_workloads(args):
        if side.name == "numpy" and name.endswith("resent"):
            continue
        try:
            check(side)
        except NotImplementedError as missing:
            print(f"{side.name}: {name} skipped: {missing}")
            continue
        results[name] = median_time(lambda: run(side), args.trials)
    if args.only == "data":
        return results
    for n in args.sizes:
        m = matrices(n, 8)
        expected = cascade_expected(m)
        got = side.cascade(m)
        assert np.allclose(got, expected, rtol=1e-8), f"{side.name}: wrong cascade at n={n}"
        results[f"cascade n={n}"] = median_time(lambda: side.cascade(m), args.trials)
        s = systems(n)
        for (a, b), x in zip(s, side.pairs(s)):
            assert np.allclose(a @ x, b, rtol=1e-6), f"{side.name}: wrong pairs at n={n}"
        results[f"pairs n={n}"] = median_time(lambda: side.pairs(s), args.trials)
    if side.name not in ("numpy", "bound"):
        results[f"{args.tiny} tiny tasks"] = median_time(lambda: side.tiny(args.tiny), args.trials)
    if side.name != "bound":
        x = np.arange(args.mib * 1024 * 1024 // 8, dtype=np.float64)
        assert np.array_equal(side.echo(x), x)
        results[f"{args.mib} MiB in and out"] = median_time(lambda: side.echo(x), args.trials)
    return results


def workloads(args):
    """(name, data, how to run it on a side, how to check a side's answer) for each workload."""
    out = data_workloads(args)
    if args.only == "data":
        return out
    for n in args.sizes:
        m = matrices(n, 8)
        expected = cascade_expected(m)

        def check_cascade(side, m=m, expected=expected, n=n):
            got = side.cascade(m)
            assert np.allclose(got, expected, rtol=1e-8), f"{side.name}: wrong cascade at n={n}"

        out.append((f"cascade n={n}", lambda side, m=m: side.cascade(m), check_cascade))
        s = systems(n)

        def check_pairs(side, s=s, n=n):
            for (a, b), x in zip(s, side.pairs(s)):
                assert np.allclose(a @ x, b, rtol=1e-6), f"{side.name}: wrong pairs at n={n}"

        out.append((f"pairs n={n}", lambda side, s=s: side.pairs(s), check_pairs))
    out.append(
        (f"{args.tiny} tiny tasks", lambda side: side.tiny(args.tiny), lambda side: side.tiny(1))
    )
    x = np.arange(args.mib * 1024 * 1024 // 8, dtype=np.float64)

    def check_echo(side):
        assert np.array_equal(side.echo(x), x), f"{side.name}: wrong echo"

    out.append((f"{args.mib} MiB in and out", lambda side: side.echo(x), check_echo))
    return out


def run_interleaved(sides, args) -> Dict[str, Dict[str, float]]:
    """Every side up at once; each workload's trials alternate between the sides, so a
    change in the machine's other load falls on all of them alike."""
    results: Dict[str, Dict[str, float]] = {side.name: {} for side in sides}
    for name, run, check in workloads(args):
        taking = [
            side
            for side in sides
            if not (side.name == "numpy" and ("tiny" in name or name.endswith("resent")))
        ]
        for side in list(taking):
            try:
                check(side)
            except NotImplementedError as missing:
                print(f"{side.name}: {name} skipped: {missing}")
                taking.remove(side)
                continue
            run(side)  # warm up
        times: Dict[str, List[float]] = {side.name: [] for side in taking}
        for trial in range(args.trials):
            # Each round starts with the next side, so no side always follows the same one.
            turn = trial % len(taking) if taking else 0
            for side in taking[turn:] + taking[:turn]:
                times[side.name].append(trial_time(lambda side=side: run(side)))
        for side in taking:
            results[side.name][name] = statistics.median(times[side.name])
    return results


def table(all_results: Dict[str, Dict[str, float]], tiny: int) -> str:
    systems_run = list(all_results)
    workloads = list(next(iter(all_results.values())))
    for r in all_results.values():
        for w in r:
            if w not in workloads:
                workloads.append(w)
    head = "| workload | " + " | ".join(systems_run)
    if "ninf" in all_results:
        head += " | " + " | ".join(f"ninf / {s}" for s in systems_run if s != "ninf")
    # Each peer against the best schedule of whole tasks, where it was run.
    over_bound = [s for s in systems_run if s not in ("ninf", "bound")] if "bound" in all_results else []
    head += "".join(f" | {s} / bound" for s in over_bound)
    lines = [head + " |", "|" + "---|" * (head.count("|"))]
    for w in workloads:
        cells = []
        for s in systems_run:
            t = all_results[s].get(w)
            if t is None:
                cells.append("-")
            elif w.endswith("tiny tasks"):
                cells.append(f"{tiny / t:,.0f} /s")
            else:
                cells.append(f"{t:.3f} s")
        if "ninf" in all_results:
            for s in systems_run:
                if s == "ninf":
                    continue
                a, b = all_results["ninf"].get(w), all_results[s].get(w)
                cells.append("-" if a is None or b is None else f"{a / b:.2f}")
        for s in over_bound:
            a, b = all_results[s].get(w), all_results["bound"].get(w)
            cells.append("-" if a is None or b is None else f"{a / b:.2f}")
        lines.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--sizes", default="200,1000")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--tiny", type=int, default=10000)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--systems", default="ninf,ray,dask,numpy")
    parser.add_argument("--factor-n", type=int, default=2000)
    parser.add_argument("--solves", type=int, default=50)
    parser.add_argument("--only", choices=["data"], default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--no-lend-cores",
        action="store_true",
        help="Ninf's servers do not lend each other idle cores (the figures before they did)",
    )
    parser.add_argument(
        "--before",
        help="a folder of another build's programs (an older commit's target/release), run "
        "as the system ninf-before, to measure a change side by side",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="start every system at once and alternate their trials (see run_interleaved)",
    )
    args = parser.parse_args()
    args.sizes = [int(v) for v in args.sizes.split(",")]
    if "ninf-before" in args.systems.split(",") and not args.before:
        parser.error("the system ninf-before needs --before OLD_BIN_DIR")
    makers = {
        "ninf": lambda: NinfSide(args.bin_dir, not args.no_lend_cores),
        "ninf-no-turns": lambda: NinfSide(args.bin_dir, not args.no_lend_cores, turns=False),
        "ninf-before": lambda: NinfSide(args.before, not args.no_lend_cores, name="ninf-before"),
        "ray": RaySide,
        "dask": DaskSide,
        "numpy": NumpySide,
        "bound": BoundSide,
    }
    all_results: Dict[str, Dict[str, float]] = {}
    if args.interleave:
        sides = []
        try:
            for name in args.systems.split(","):
                sides.append(makers[name]())
            all_results = run_interleaved(sides, args)
        finally:
            for side in sides:
                side.close()
    for name in [] if args.interleave else args.systems.split(","):
        side = makers[name]()
        try:
            all_results[name] = run_side(side, args)
        finally:
            side.close()
    if args.json:
        print(json.dumps(all_results))
    print(table(all_results, args.tiny))


if __name__ == "__main__":
    main()
