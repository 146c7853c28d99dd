"""The seed's transaction (Ninf, the metaserver paper): two independent products and a third that uses
both, sent as one dataflow graph. The intermediates E and F move server to server; only G
comes back. Run against `ninf up`'s grid, or a local one:

    python cascade.py            # starts a local grid (needs NINF_BIN_DIR or `ninf` on PATH)
    python cascade.py --connect  # uses the grid `ninf up` is running
"""

import sys
import time

import numpy as np

import ninf


def cascade(grid: ninf.Grid, n: int) -> None:
    rng = np.random.default_rng(4)
    A, B, C, D = (np.asfortranarray(rng.random((n, n))) for _ in range(4))
    E, F, G = (np.empty((n, n), order="F") for _ in range(3))
    started = time.perf_counter()
    with grid.transaction(label=f"cascade n={n}") as tx:
        tx.call("mmul", n, A, B, E)
        tx.call("mmul", n, C, D, F)
        tx.call("mmul", n, E, F, G)
    seconds = time.perf_counter() - started
    error = np.abs(G - (A @ B) @ (C @ D)).max()
    print(f"cascade n={n}: {seconds:.3f} s as the client saw it, max error {error:.1e}")
    print(tx.plan)


def solve(grid: ninf.Grid, n: int) -> None:
    rng = np.random.default_rng(5)
    a = rng.random((n, n)) + n * np.eye(n)
    b = rng.random(n)
    x = b.copy()
    info = grid.call("dgesv", np.asfortranarray(a), n, np.zeros(n, np.int32), x)
    print(f"dgesv n={n}: info {info}, residual {np.abs(a @ x - b).max():.1e}")


def main() -> None:
    if "--connect" in sys.argv:
        grid = ninf.connect()
        solve(grid, 300)
        cascade(grid, 300)
        return
    with ninf.local_grid(servers=2) as grid:
        print("routines:", ", ".join(grid.functions()))
        print(grid.describe("mmul"))
        solve(grid, 300)
        cascade(grid, 300)


if __name__ == "__main__":
    main()
