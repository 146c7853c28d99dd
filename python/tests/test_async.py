"""Futures: wait_any and wait_all, cancellation, Ctrl-C, and a routine killed mid-call."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ninf
from conftest import metric_sum


def test_wait_any_returns_the_first_to_end_and_wait_all_every_status(grid):
    slow = grid.call_async("sleep_ms", 1500)
    quick = grid.call_async("sleep_ms", 1)
    assert ninf.wait_any([slow, quick]) is quick
    assert quick.done() and quick.result() == 0
    assert ninf.wait_all([slow, quick]) == [0, 0]
    assert slow.done() and not slow.cancelled()


def test_two_hundred_calls_drain_through_wait_any(grid):
    outputs = [np.zeros(4) for _ in range(200)]
    futures = [grid.call_async("echo", 4, np.full(4, float(i)), y) for i, y in enumerate(outputs)]
    pending = list(futures)
    while pending:
        done = ninf.wait_any(pending)
        assert done.result() == 0
        pending.remove(done)
    for i, y in enumerate(outputs):
        assert (y == i).all()


def test_a_future_reports_a_failure_and_a_timeout(grid):
    failing = grid.call_async("fail", 5)
    with pytest.raises(ninf.SessionFailed, match="code 5"):
        failing.result()
    assert isinstance(failing.exception(), ninf.SessionFailed)
    slow = grid.call_async("sleep_ms", 2000)
    with pytest.raises(ninf.Timeout):
        slow.result(timeout=0.01)
    assert slow.wait(timeout=0) is False
    assert slow.result() == 0


def test_a_dropped_future_keeps_its_arrays_alive_until_the_call_has_written_them(grid):
    import gc
    import weakref

    x = np.arange(1000.0)
    y = np.zeros(1000)
    written = weakref.ref(y)
    future = grid.call_async("slow_echo", 300, 1000, x, y)
    del future, y
    gc.collect()
    # The call still writes into `y` when it ends: it must not have been freed.
    assert written() is not None
    # Released once the call has ended: the library's thread drops it without the GIL, and
    # the native module lets it go at its next call (here a cheap one).
    for _ in range(500):
        ninf._native.wait_any([], 0.0)
        gc.collect()
        if written() is None:
            break
        time.sleep(0.02)
    assert written() is None
    assert grid.call("noop", 1) == 0


def test_a_cancelled_call_writes_nothing_and_the_grid_goes_on(grid):
    x, y = np.arange(1000.0), np.zeros(1000)
    future = grid.call_async("slow_echo", 30000, 1000, x, y)
    time.sleep(0.2)
    assert future.cancel() is True
    assert future.cancelled() and future.done()
    assert future.cancel() is False
    with pytest.raises(ninf.Canceled):
        future.result()
    # The proxy dropped the call and the server killed its executable mid-sleep.
    assert sleepers_after_a_quiet_second(timeout=10) == []
    assert not y.any()
    assert grid.call("noop", 1) == 0


def test_calls_cancelled_while_the_proxy_sends_them_in_batches_stop_on_the_servers():
    # Far more calls than the server has slots: all but the first leave in `CallBatch`es
    # (docs/compute-server.md). Cancelled, every batch whose callers have all gone is
    # dropped, which cancels it on its server: its executable is killed mid-sleep and the
    # batch's calls never succeed. Were the batches run to the end, about a hundred would.
    # One server, so that the calls queue behind its 16 slots; four clients, since the proxy
    # runs 32 transactions of one client at once and holds the rest back, unbatched.
    with ninf.local_grid(servers=1, selftest=True) as grid:

        def succeeded():
            labels = ('routine="sleep_ms"', 'outcome="ok"')
            return metric_sum(grid, "server-0", "ninf_calls_total", labels)

        def batches():
            return metric_sum(grid, "server-0", "ninf_call_batches_total")

        clients = [ninf.connect(grid.grid_file) for _ in range(4)]
        batches_before = batches()
        futures = [client.call_async("sleep_ms", 100) for client in clients for _ in range(75)]
        time.sleep(1.0)
        assert batches() > batches_before
        succeeded_before = succeeded()
        for future in futures:
            future.cancel()
        assert all(future.cancelled() or future.done() for future in futures)
        assert sleepers_after_a_quiet_second(timeout=60) == []
        # Calls that ended in the instant between the count and the cancellations, if any.
        assert succeeded() - succeeded_before <= 4
        assert grid.call("noop", 1) == 0


CTRL_C = textwrap.dedent(
    """
    import numpy as np, ninf, signal, sys
    # As at a terminal: a process started in the background of a shell without job control
    # (as CI scripts may start the suite) inherits SIGINT ignored, and Python then raises
    # no KeyboardInterrupt at all.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    grid = ninf.connect(sys.argv[1])
    try:
        print("calling", flush=True)
        grid.call("sleep_ms", 600000)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    print("after", grid.call("noop", 1), flush=True)
    """
)


def test_ctrl_c_interrupts_a_blocking_call_and_cancels_it(grid):
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, str(grid.grid_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "calling"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    # Ten minutes of sleep_ms would outlast this: only the interrupt ends it in time.
    try:
        out, err = child.communicate(timeout=60)
    finally:
        # Its death cancels the call, so a failure here leaves no sleeper to the next tests.
        child.kill()
    assert out.split() == ["interrupted", "after", "0"], err


def sleepers_after_a_quiet_second(timeout):
    """Waits until no executable has slept for a whole second; returns those sleeping if
    that never happened within ``timeout`` seconds. One look is not enough: the calls of a
    batch sleep one after another, and a look between two of them sees nobody (in CI, a
    batch still draining after the cancellation was seen empty once, then busy again)."""
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        pids = busy_sleeper_pids()
        if pids:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= 1.0:
            return []
        time.sleep(0.005)
    return busy_sleeper_pids() or ["none at the end, but never quiet for a second"]


def busy_sleeper_pids():
    """Executables of `selftest` blocked in a sleep syscall (the one running sleep_ms)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if f.read().strip() != "ninf-exec-selft":
                    continue
            with open(f"/proc/{entry}/syscall") as f:
                number = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if number in (35, 230):  # nanosleep, clock_nanosleep on x86_64
            pids.append(int(entry))
    return pids


def test_a_routine_killed_mid_call_is_run_again_elsewhere(grid):
    import threading

    plans = []

    def run():
        with grid.transaction() as tx:
            tx.call("sleep_ms", 1500)
        plans.append(tx.plan)

    thread = threading.Thread(target=run)
    thread.start()
    pids = []
    for _ in range(500):
        pids = busy_sleeper_pids()
        if pids:
            break
        time.sleep(0.01)
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)
    thread.join(timeout=60)
    # A killed executable says nothing against the call: the proxy runs it again (on the
    # other server, or on a fresh executable) and the caller sees only success.
    [plan] = plans
    assert plan.tasks_retried == 1
    assert plan.tasks[0].status == 0
