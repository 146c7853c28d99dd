"""Where the kept chain's time goes (peers.py's "10 transactions over 64 MiB, kept").

    target/peers-venv/bin/python python/bench/chain_parts.py target/release [TRIALS] [--before DIR]

Starts a local grid of two servers from the programs in the folder given, as peers.py does,
and prints the median over TRIALS (default 20) of: a put of one 32 MiB vector; a one-call
transaction of `noop`; a `ddot` of 8 elements sent with the call, and of 8 elements kept on
the grid (two handles to look up); a `ddot` of the two 32 MiB vectors kept on the grid; and
NumPy's own dot of them in this process. Each result is checked against NumPy's.

With `--before DIR`, a second grid runs another build's programs (as peers.py's
`ninf-before`), and each row's trials alternate between the two grids, the first of each
pair taking turns; the row then shows both medians and their ratio (this build's over the
other's).
"""

import argparse
import os
import statistics
import sys
import time
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peers import NinfSide  # noqa: E402


def median_ms(run: Callable[[], None], trials: int) -> float:
    run()  # warm up: connections, pools, the executables' first touch of the arrays
    times = []
    for _ in range(trials):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)


def rows_of(grid, kept) -> List:
    """(name, run) of each row, on `grid`, with the vectors `kept` there."""
    n = 4 * 1024 * 1024
    x = np.random.default_rng(1).random(n)
    y = np.random.default_rng(2).random(n)
    small = np.arange(1.0, 9.0)

    def put() -> None:
        grid.put(x).free()

    def noop() -> None:
        with grid.transaction() as tx:
            tx.call("noop", 1)

    def ddot(length: int, a, b, expected: float) -> Callable[[], None]:
        def run() -> None:
            r = np.zeros(1)
            with grid.transaction() as tx:
                tx.call("ddot", length, a, b, r)
            assert abs(r[0] - expected) <= 1e-9 * abs(expected), (r[0], expected)

        return run

    kept.extend([grid.put(small), grid.put(small), grid.put(x), grid.put(y)])
    return [
        ("put 32 MiB", put),
        ("noop transaction", noop),
        ("ddot 8 sent", ddot(8, small, small, float(small @ small))),
        ("ddot 8 kept", ddot(8, kept[0], kept[1], float(small @ small))),
        ("ddot 4M kept", ddot(n, kept[2], kept[3], float(x @ y))),
        ("numpy dot 4M", lambda: x @ y),
    ]


def alternating_ms(runs: List[Callable[[], None]], trials: int) -> List[float]:
    """Each run's median over `trials`, the runs taking turns (the first of each round
    rotating), after one warm-up each."""
    for run in runs:
        run()
    times: Dict[int, List[float]] = {i: [] for i in range(len(runs))}
    for trial in range(trials):
        for k in range(len(runs)):
            i = (trial + k) % len(runs)
            started = time.perf_counter()
            runs[i]()
            times[i].append((time.perf_counter() - started) * 1e3)
    return [statistics.median(times[i]) for i in range(len(runs))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("trials", type=int, nargs="?", default=20)
    parser.add_argument("--before", help="another build's programs, run side by side")
    args = parser.parse_args()
    sides = [NinfSide(os.path.abspath(args.bin_dir))]
    if args.before:
        sides.append(NinfSide(os.path.abspath(args.before), name="ninf-before"))
    kept: List[List] = [[] for _ in sides]
    try:
        tables = [rows_of(side.grid, kept[i]) for i, side in enumerate(sides)]
        for row, (name, _) in enumerate(tables[0]):
            if len(sides) == 1 or name.startswith("numpy"):
                print(f"{name:18} {median_ms(tables[0][row][1], args.trials):7.2f} ms")
                continue
            now, before = alternating_ms([t[row][1] for t in tables], args.trials)
            print(f"{name:18} {now:7.2f} ms  before {before:7.2f} ms  ratio {now / before:.2f}")
        for handles in kept:
            for handle in handles:
                handle.free()
    finally:
        for side in sides:
            side.close()


if __name__ == "__main__":
    main()
