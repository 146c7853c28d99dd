"""The Python client against the Rust client, side by side on one local grid in one run:
the mean null call (`noop`) through the proxy, and the best `echo` of 32 MiB in and out.
Targets (issue 21): the null call at most 1.3x Rust's; 32 MiB no more than one copy beyond
Rust's. Also the Python echo as a transaction of one, whose input is copied when the call
is recorded (`Grid.call` reads it when sent). Run by scripts/bench-python, which builds
everything in release first.

    python calls.py BIN_DIR [CALLS] [MIB]
"""

import json
import os
import subprocess
import sys
import time

import numpy as np

import ninf


def python_side(grid: ninf.Grid, calls: int, mib: int) -> dict:
    for _ in range(20):
        grid.call("noop", 1)
    started = time.perf_counter()
    for _ in range(calls):
        grid.call("noop", 1)
    null_call_us = (time.perf_counter() - started) / calls * 1e6
    n = mib * 1024 * 1024 // 8
    x = np.arange(n, dtype=np.float64)
    y = np.zeros(n)
    times, recorded = [], []
    for _ in range(6):
        started = time.perf_counter()
        grid.call("echo", n, x, y)
        times.append(time.perf_counter() - started)
        # The same call as a transaction of one, which copies its input when recorded.
        y[:] = 0.0
        started = time.perf_counter()
        with grid.transaction() as tx:
            tx.call("echo", n, x, y)
        recorded.append(time.perf_counter() - started)
    assert np.array_equal(x, y)
    return {
        "client": "python",
        "null_call_us": round(null_call_us, 1),
        "echo_mib": mib,
        "echo_ms": round(min(times[1:]) * 1e3, 2),
        "echo_recorded_ms": round(min(recorded[1:]) * 1e3, 2),
    }


def main() -> None:
    bin_dir = sys.argv[1]
    calls = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    mib = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    os.environ["NINF_BIN_DIR"] = bin_dir
    rows = []
    with ninf.local_grid(servers=1, selftest=True) as grid:
        # Alternate the two clients so drift on the machine falls on both.
        for _ in range(3):
            rows.append(python_side(grid, calls, mib))
            rust = subprocess.run(
                [os.path.join(bin_dir, "examples", "grid_calls"), str(grid.grid_file), str(calls), str(mib)],
                check=True,
                capture_output=True,
                text=True,
            )
            rows.append(json.loads(rust.stdout))
    for row in rows:
        print(json.dumps(row))
    best = {c: min((r for r in rows if r["client"] == c), key=lambda r: r["null_call_us"]) for c in ("python", "rust")}
    echo = {c: min(r["echo_ms"] for r in rows if r["client"] == c) for c in ("python", "rust")}
    print(
        f"null call: python {best['python']['null_call_us']:.1f} us, rust {best['rust']['null_call_us']:.1f} us, "
        f"ratio {best['python']['null_call_us'] / best['rust']['null_call_us']:.2f}"
    )
    print(
        f"echo {mib} MiB in and out: python {echo['python']:.1f} ms, rust {echo['rust']:.1f} ms, "
        f"ratio {echo['python'] / echo['rust']:.2f}"
    )
    recorded = min(r["echo_recorded_ms"] for r in rows if r["client"] == "python")
    print(
        f"echo {mib} MiB from python: grid.call {echo['python']:.1f} ms, "
        f"as a transaction of one (its input copied when recorded) {recorded:.1f} ms"
    )


if __name__ == "__main__":
    main()
