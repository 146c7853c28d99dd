"""Many asynchronous calls from one client program, each its own transaction, through a
local grid of two one-processor servers: what the proxy's run slots (one graph at a time
per processor of the servers up, by default) do to `Grid.call_async`. Prints the rate of
null calls (`noop`) issued all at once, best and worst of three rounds after a warm-up,
and the time eight `sleep_ms(100)` calls issued at once take.

    python async_calls.py BIN_DIR [CALLS]

CALLS (default 1000) stays within the proxy's per-client limits: 32 running and 1,024
waiting (docs/security.md).
"""

import os
import sys
import time


def main() -> None:
    os.environ["NINF_BIN_DIR"] = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    import ninf

    with ninf.local_grid(servers=2, selftest=True) as grid:
        for _ in range(2):
            for future in [grid.call_async("noop", 1) for _ in range(200)]:
                future.result()
        rates = []
        for _ in range(3):
            started = time.perf_counter()
            for future in [grid.call_async("noop", 1) for _ in range(count)]:
                assert future.result() == 0
            rates.append(count / (time.perf_counter() - started))
        started = time.perf_counter()
        for future in [grid.call_async("sleep_ms", 100) for _ in range(8)]:
            assert future.result() == 0
        sleeps = time.perf_counter() - started
    print(
        f"{count} noop calls at once: {min(rates):,.0f}-{max(rates):,.0f} calls/s; "
        f"8 sleep_ms(100) at once: {sleeps:.2f} s"
    )


if __name__ == "__main__":
    main()
