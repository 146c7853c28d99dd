"""Large arrays between a client and the proxy on its host travel in shared memory
(docs/bulk-protocol.md, "From a client on the proxy's host"), and a bad setting is named."""

import os
import subprocess
import sys
import threading

import numpy as np

from conftest import fortran, metric_sum


def proxy_bytes(grid, direction, path):
    """The proxy's `ninf_bytes_total` for one direction and path."""
    labels = (f'direction="{direction}"', f'path="{path}"')
    return metric_sum(grid, "proxy", "ninf_bytes_total", labels)


def products(grid, n, seed):
    """Two products in one transaction, each input and output over 256 KiB."""
    rng = np.random.default_rng(seed)
    a, b, c = (fortran(rng.random((n, n))) for _ in range(3))
    ab, abc = np.zeros((n, n), order="F"), np.zeros((n, n), order="F")
    with grid.transaction() as tx:
        tx.call("mmul", n, a, b, ab)
        tx.call("mmul", n, ab, c, abc)
    np.testing.assert_allclose(ab, a @ b, rtol=1e-12)
    np.testing.assert_allclose(abc, a @ b @ c, rtol=1e-12)


def test_large_arrays_go_in_shared_memory_and_each_run_gets_its_own_values(grid):
    n = 300  # 720,000 bytes per matrix
    shared_in = proxy_bytes(grid, "in", "shared")
    shared_out = proxy_bytes(grid, "out", "shared")
    errors = []

    def run(thread):
        try:
            for k in range(3):
                products(grid, n, 100 * thread + k)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Nine transactions, each sending a, b and c and getting both products back.
    matrix = 8 * n * n
    assert proxy_bytes(grid, "in", "shared") - shared_in == 9 * 3 * matrix
    assert proxy_bytes(grid, "out", "shared") - shared_out == 9 * 2 * matrix


def test_with_sharing_off_the_arrays_go_through_the_socket(grid):
    script = (
        "import sys, numpy as np, ninf\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from test_same_host import products\n"
        "products(ninf.connect(sys.argv[1]), 300, 7)\n"
    )
    shared_in = proxy_bytes(grid, "in", "shared")
    env = dict(os.environ, NINF_SAME_HOST_UPLOADS="off")
    here = os.path.dirname(__file__)
    done = subprocess.run(
        [sys.executable, "-c", script, str(grid.grid_file), here],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert proxy_bytes(grid, "in", "shared") == shared_in


def test_a_bad_sharing_setting_is_named(grid):
    env = dict(os.environ, NINF_SAME_HOST_UPLOADS="maybe")
    done = subprocess.run(
        [sys.executable, "-c", "import sys, ninf; ninf.connect(sys.argv[1])", str(grid.grid_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "NINF_SAME_HOST_UPLOADS is `maybe`; it must be `on` or `off`" in done.stderr


def test_a_call_sent_at_once_reads_its_arrays_when_sent_and_a_transaction_when_recorded(grid):
    """`Grid.call` copies nothing when it records its call (it is sent at once and waited
    for); a transaction's call copies its inputs as it is recorded, so changing an array
    afterwards, inside the block, changes nothing that was recorded."""
    n = 1 << 16  # 512 KiB: shared with the proxy, and over the proxy's bulk threshold below
    x = np.arange(n, dtype=np.float64)
    y = np.zeros(n)
    for size in (n, 1 << 18):  # 512 KiB, then 2 MiB (the proxy's bulk calls)
        x = np.arange(size, dtype=np.float64)
        y = np.zeros(size)
        grid.call("echo", size, x, y)
        np.testing.assert_array_equal(y, x)
        # The future keeps its arrays alive; they stay untouched until it ends.
        z = np.zeros(size)
        grid.call_async("echo", size, x * 2, z).result()
        np.testing.assert_array_equal(z, 2 * x)

    x = np.arange(n, dtype=np.float64)
    first, second = np.zeros(n), np.zeros(n)
    with grid.transaction() as tx:
        tx.call("echo", n, x, first)
        x[:] = -1.0
        tx.call("echo", n, x, second)
    np.testing.assert_array_equal(first, np.arange(n, dtype=np.float64))
    np.testing.assert_array_equal(second, np.full(n, -1.0))
