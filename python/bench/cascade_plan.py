"""The peer benchmark's cascade (eight n-by-n matrices, seven products in three stages, the
intermediates kept on the grid) on the same two-server local grid, printing where each call
ran, when it started and for how long, as `pairs_plan.py` does for the pairs.

    target/peers-venv/bin/python python/bench/cascade_plan.py target/release --n 2000 --trials 6

One line per graph: the client's time and the actual makespan, then each call as
`[START] SERVER:ROUTINE predicted/actual (compute, stopped)` in milliseconds, START from the
graph's first call.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from pairs_plan import cell
from peers import cascade_expected, matrices, ninf_cascade


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()
    os.environ["NINF_BIN_DIR"] = os.path.abspath(args.bin_dir)
    import ninf

    n = args.n
    m = matrices(n, 8)
    with ninf.local_grid(servers=2, selftest=True) as grid:
        for trial in range(args.trials):
            started = time.perf_counter()
            result, tx = ninf_cascade(grid, m)
            seconds = time.perf_counter() - started
            plan = tx.plan
            first = min(t.actual_start for t in plan.tasks)
            calls = "  ".join(
                f"[{(t.actual_start - first) * 1000:.0f}] {cell(t)}" for t in plan.tasks
            )
            print(
                f"{trial}: {seconds * 1000:.0f} ms, actual {plan.actual_makespan * 1000:.0f} | {calls}"
            )
    # Checked once the grid is gone, as pairs_plan.py explains.
    assert np.allclose(result, cascade_expected(m), rtol=1e-8), "wrong cascade"


if __name__ == "__main__":
    main()
