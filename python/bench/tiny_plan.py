"""The peer benchmark's tiny tasks (one transaction of COUNT `noop` calls) on the same
two-server local grid, transaction after transaction, printing how the metaserver split
each one and what it predicted against what happened:

    target/peers-venv/bin/python python/bench/tiny_plan.py target/release --count 10000 --rounds 6

One line per transaction: the rate the client saw, the time to record the calls and to run
the transaction (and, of that, the proxy's wait for the metaserver's placement), the predicted and actual makespan, then per server (its port's last two
digits) the calls it got and the 10th, 50th and 90th percentiles and the last of their
finish times, in milliseconds from the graph's start. `scripts/bench-peers` installs the
package into target/peers-venv.
"""

from __future__ import annotations

import argparse
import os
import time


def percentiles(values, points=(10, 50, 90)):
    ordered = sorted(values)
    picked = [ordered[min(len(ordered) - 1, len(ordered) * p // 100)] for p in points]
    return picked + [ordered[-1]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--count", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between transactions")
    args = parser.parse_args()
    os.environ["NINF_BIN_DIR"] = os.path.abspath(args.bin_dir)
    import ninf

    with ninf.local_grid(servers=2, selftest=True) as grid:
        for trial in range(args.rounds):
            started = time.perf_counter()
            tx = grid.transaction()
            tx.__enter__()
            for _ in range(args.count):
                tx.call("noop", 1)
            recorded = time.perf_counter()
            tx.__exit__(None, None, None)
            ended = time.perf_counter()
            plan = tx.plan
            origin = min(t.actual_start for t in plan.tasks)
            by_server = {}
            for t in plan.tasks:
                by_server.setdefault(t.server[-2:], []).append(t.actual_finish - origin)
            servers = "  ".join(
                f"{server}: {len(finishes)} calls, finish "
                + "/".join(f"{1000 * f:.0f}" for f in percentiles(finishes))
                for server, finishes in sorted(by_server.items())
            )
            print(
                f"{trial}: {args.count / (ended - started):,.0f} /s, record"
                f" {1000 * (recorded - started):.0f} ms, run {1000 * (ended - recorded):.0f} ms"
                f" (placing {1000 * plan.schedule_seconds:.0f} ms),"
                f" predicted {1000 * plan.predicted_makespan:.0f} actual"
                f" {1000 * plan.actual_makespan:.0f} | {servers}"
            )
            time.sleep(args.pause)


if __name__ == "__main__":
    main()
