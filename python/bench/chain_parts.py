"""Where the kept chain's time goes (peers.py's "10 transactions over 64 MiB, kept").

    target/peers-venv/bin/python python/bench/chain_parts.py target/release [TRIALS]

Starts a local grid of two servers from the programs in the folder given, as peers.py does,
and prints the median over TRIALS (default 20) of: a put of one 32 MiB vector; a one-call
transaction of `noop`; a `ddot` of 8 elements sent with the call, and of 8 elements kept on
the grid (two handles to look up); a `ddot` of the two 32 MiB vectors kept on the grid; and
NumPy's own dot of them in this process. Each result is checked against NumPy's.
"""

import os
import statistics
import sys
import time
from typing import Callable

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


def main() -> None:
    trials = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    side = NinfSide(sys.argv[1])
    grid = side.grid
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

    try:
        small_kept = (grid.put(small), grid.put(small))
        kept = (grid.put(x), grid.put(y))
        rows = [
            ("put 32 MiB", put),
            ("noop transaction", noop),
            ("ddot 8 sent", ddot(8, small, small, float(small @ small))),
            ("ddot 8 kept", ddot(8, *small_kept, float(small @ small))),
            ("ddot 4M kept", ddot(n, *kept, float(x @ y))),
            ("numpy dot 4M", lambda: x @ y),
        ]
        for name, run in rows:
            print(f"{name:18} {median_ms(run, trials):7.2f} ms")
        for handle in (*small_kept, *kept):
            handle.free()
    finally:
        side.close()


if __name__ == "__main__":
    main()
