"""Processor time a local grid spends per transaction, split by who spends it.

Runs the peer benchmark's pairs or cascade (python/bench/peers.py) on a local grid of two
servers, and reads from /proc what the grid's processes used over the timed runs: the
services (`ninf up`: proxy, metaserver and the two servers, one process) apart from the
routine executables they started, and the minor page faults of those executables. Wall
time moves with whatever else the machine runs; processor time spent on copies and page
tables does much less, so this compares two builds where the peer benchmark's medians
cannot tell them apart (docs/performance.md).

    target/peers-venv/bin/python python/bench/grid_cpu.py BIN_DIR [--workload pairs] [--n 1000] \
        [--trials 40] [--warmup 3]
"""

import argparse
import os
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np

TICK = os.sysconf("SC_CLK_TCK")


def children() -> Dict[int, List[int]]:
    table = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    kids: Dict[int, List[int]] = {}
    for line in table.stdout.splitlines():
        if line.strip():
            pid, parent = map(int, line.split())
            kids.setdefault(parent, []).append(pid)
    return kids


def stat(pid: int) -> List[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def usage(root: int):
    """(services' seconds, executables' seconds, executables' minor faults)."""
    fields = stat(root)
    services = (int(fields[11]) + int(fields[12])) / TICK
    kids = children()
    executables, faults = 0.0, 0
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            fields = stat(pid)
        except OSError:
            continue  # ended meanwhile
        executables += (int(fields[11]) + int(fields[12])) / TICK
        faults += int(fields[7])
    return services, executables, faults


def grid_process() -> int:
    """The local grid's `ninf up`, which this process started."""
    for pid in children().get(os.getpid(), []):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"\0up\0" in f.read():
                return pid
    raise SystemExit("no local grid (`ninf up`) under this process")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bin_dir")
    parser.add_argument("--workload", choices=["pairs", "cascade"], default="pairs")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=3, help="runs before the timed ones")
    args = parser.parse_args()
    os.environ["NINF_BIN_DIR"] = args.bin_dir
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from peers import NinfSide, matrices, systems

    side = NinfSide(args.bin_dir)
    try:
        work = matrices(args.n, 8) if args.workload == "cascade" else systems(args.n)
        run = getattr(side, args.workload)
        for _ in range(args.warmup):
            run(work)
        root = grid_process()
        before, client_before = usage(root), time.process_time()
        walls = []
        for _ in range(args.trials):
            start = time.perf_counter()
            run(work)
            walls.append(time.perf_counter() - start)
        after, client_after = usage(root), time.process_time()
    finally:
        side.close()
    per_run = lambda a, b: (b - a) / args.trials * 1e3
    walls.sort()
    print(
        f"{args.workload} n={args.n}, {args.trials} runs: per run, services "
        f"{per_run(before[0], after[0]):.1f} ms, executables {per_run(before[1], after[1]):.1f} ms, "
        f"client {per_run(client_before, client_after):.1f} ms of processor time; "
        f"{(after[2] - before[2]) / args.trials:.0f} minor faults in the executables; "
        f"wall median {walls[len(walls) // 2] * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
