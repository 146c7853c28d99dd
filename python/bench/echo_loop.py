"""64 MiB in and out through a local grid, call after call, for a profiler to watch.

    target/peers-venv/bin/python python/bench/echo_loop.py target/release [CALLS]

Starts a local grid of two servers from the programs in the folder given, echoes a 64 MiB
vector CALLS times (default 200) with ``grid.call("echo", ...)``, checks the last result
and prints the median and fastest call. While it runs, ``perf record -a -g -- sleep 8``
shows where the time goes (docs/notes/2026-12-05-copies-on-the-same-host.md).
"""

import os
import statistics
import sys
import time

import numpy as np


def main() -> None:
    os.environ["NINF_BIN_DIR"] = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    import ninf

    with ninf.local_grid(servers=2, selftest=True) as grid:
        x = np.arange(64 * 1024 * 1024 // 8, dtype=np.float64)
        y = np.empty_like(x)
        grid.call("echo", x.size, x, y)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            y = np.empty_like(x)
            grid.call("echo", x.size, x, y)
            times.append(time.perf_counter() - started)
        assert np.array_equal(x, y), "wrong echo"
        print(f"median {statistics.median(times):.4f} s, fastest {min(times):.4f} s")


if __name__ == "__main__":
    main()
