"""The peer benchmark's pairs (five systems, each `dgefa` then `dgesl` on a matrix kept on the
grid) on the same two-server local grid, printing where each call ran and for how long: the
metaserver's prediction against what happened, and the time each call's gang job stood
stopped outside its slots (docs/gang.md, "A call's life").

    target/peers-venv/bin/python python/bench/pairs_plan.py target/release --n 1000 --trials 9

One line per graph: the client's time, the predicted and actual makespan, then each call as
`SERVER:ROUTINE predicted/actual (compute, stopped)` in milliseconds: predicted and actual
from the proxy issuing the call to its reply, then the server's compute time and the part of
it the call's job stood stopped. SERVER is its port's last two digits. `scripts/bench-peers` installs the package into target/peers-venv.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def systems(n: int, count: int = 5, seed: int = 7):
    """Well-conditioned systems (as python/bench/peers.py makes them)."""
    rng = np.random.default_rng(seed)
    return [
        (
            np.asfortranarray(rng.standard_normal((n, n)) + n * np.eye(n)),
            rng.standard_normal(n),
        )
        for _ in range(count)
    ]


def cell(task) -> str:
    predicted = (task.predicted_finish - task.predicted_start) * 1000
    actual = (task.actual_finish - task.actual_start) * 1000
    stopped = task.stopped_seconds * 1000
    compute = task.compute_seconds * 1000
    return f"{task.server[-2:]}:{task.function} {predicted:.0f}/{actual:.0f} ({compute:.0f}, {stopped:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument(
        "--check-each-graph",
        action="store_true",
        help="check each graph's solutions with NumPy before the next graph starts",
    )
    args = parser.parse_args()
    os.environ["NINF_BIN_DIR"] = os.path.abspath(args.bin_dir)
    import ninf

    s = systems(args.n)
    answers = []
    with ninf.local_grid(servers=2, selftest=True) as grid:
        for trial in range(args.trials):
            started = time.perf_counter()
            solutions = [b.copy() for _, b in s]
            with grid.transaction() as tx:
                factors = [tx.scratch(a) for a, _ in s]
                pivots = [tx.scratch(np.empty(args.n, np.int32)) for _ in s]
                for a, ipvt, x in zip(factors, pivots, solutions):
                    tx.call("dgefa", a, args.n, ipvt)
                    tx.call("dgesl", a, args.n, ipvt, x)
            seconds = time.perf_counter() - started
            answers.append(solutions)
            if args.check_each_graph:
                check(s, [answers.pop()])
            plan = tx.plan
            print(
                f"{trial}: {seconds * 1000:.0f} ms, predicted {plan.predicted_makespan * 1000:.0f}"
                f" actual {plan.actual_makespan * 1000:.0f} | "
                + "  ".join(cell(t) for t in plan.tasks)
            )
    # Checked once the grid is gone: NumPy's BLAS threads spin for a while after each
    # product, on the grid's cores, and a check between graphs made the next ones 20-40%
    # slower (docs/performance.md, "A client's own BLAS slows a grid on its host").
    check(s, answers)


def check(s, answers) -> None:
    for solutions in answers:
        for (a, b), x in zip(s, solutions):
            np.testing.assert_allclose(a @ x, b, rtol=1e-8, atol=1e-8)

if __name__ == "__main__":
    main()
