"""``ninf.local_grid()``: an embedded grid on this machine for the length of a ``with``
block, as Dask's ``LocalCluster`` starts workers. It runs ``ninf up`` (the grid's own
program, with the routines' executables beside it) in a fresh data directory, waits for
the grid file, connects, and stops the grid when the block ends."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Iterator, Optional, Sequence

from . import _native
from ._grid import Grid, connect

#: Environment variable naming the folder that holds ``ninf`` and the ``ninf-exec-*``
#: executables (for example a Cargo ``target/release``).
BIN_DIR_ENV = "NINF_BIN_DIR"


def find_ninf() -> Path:
    """The ``ninf`` program: in ``$NINF_BIN_DIR``, else the one the wheel installed into this
    environment's scripts folder (with the servers and the routines' executables beside it),
    else on ``PATH``."""
    candidates = []
    if os.environ.get(BIN_DIR_ENV):
        candidates.append(Path(os.environ[BIN_DIR_ENV]) / "ninf")
    candidates.append(Path(sysconfig.get_path("scripts")) / "ninf")
    on_path = shutil.which("ninf")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise _native.ServerNotFound(
        "ninf.local_grid needs the grid's programs (`ninf` and the routines' `ninf-exec-*`), "
        f"which the wheel installs into {sysconfig.get_path('scripts')}, and found none there, "
        f"in ${BIN_DIR_ENV} or on PATH. Reinstall the package (`pip install ./python` in the "
        f"Ninf repository builds them), or set {BIN_DIR_ENV} to a folder holding them."
    )


def _log_tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _wait_for_grid_file(process: subprocess.Popen, grid_file: Path, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not grid_file.exists():
        code = process.poll()
        if code is not None:
            raise _native.ServerNotFound(
                f"`ninf up` exited with status {code} before the grid was up:\n{_log_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise _native.Timeout(f"the local grid was not up after {seconds:.0f} s:\n{_log_tail(log)}")
        time.sleep(0.02)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def local_grid(
    servers: int = 2,
    speeds: Optional[Sequence[int]] = None,
    *,
    scheduler: str = "flow",
    selftest: bool = False,
    tls: bool = False,
    lend_cores: bool = True,
    turns: bool = True,
    startup_seconds: float = 60.0,
) -> Iterator[Grid]:
    """Starts a grid of ``servers`` compute servers on this machine for the block and
    yields a :class:`Grid` connected to it::

        with ninf.local_grid(servers=2) as grid:
            grid.call("mmul", n, A, B, C)

    ``speeds`` gives each server's relative speed (processors it offers; default 1 each).
    ``selftest`` adds the ``selftest`` module (``noop``, ``sleep_ms``, ``fail``, ...) to the
    standard ones, for checking and benchmarking. ``tls`` runs every connection over TLS
    with a certificate authority of the grid's own (the client checks the proxy against
    it, as ``connect`` does for any grid file naming a TLS folder). With ``lend_cores``
    (the default) a server running nothing lends its core to another server's call that
    runs alone in its transaction (a large ``mmul``, ``dgefa`` or ``dgesv``), which then
    computes with two threads; ``lend_cores=False`` keeps every call on its own core.
    With ``turns`` (the default) a transaction's long calls take turns on their server,
    as many at once as it has processors; ``turns=False`` issues every call as soon as it
    is ready (docs/scheduling.md, "Turns").
    The grid runs with a token, in a temporary data directory removed afterwards; its
    log is ``grid.log`` there while it runs.
    """
    if speeds is not None and len(speeds) != servers:
        raise ValueError(f"speeds gives {len(speeds)} values for {servers} servers")
    ninf = find_ninf()
    with tempfile.TemporaryDirectory(prefix="ninf-local-") as data_dir:
        data = Path(data_dir)
        command = [str(ninf), "up", "--servers", str(servers), "--data-dir", str(data)]
        command += ["--scheduler", scheduler]
        if selftest:
            command.append("--selftest")
        if tls:
            command.append("--tls")
        if not lend_cores:
            command.append("--no-lend-cores")
        if not turns:
            command.append("--no-turns")
        if speeds is not None:
            command += ["--speeds", ",".join(str(int(s)) for s in speeds)]
        log = data / "grid.log"
        with open(log, "wb") as log_file:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _wait_for_grid_file(process, data / "grid.toml", log, startup_seconds)
            yield connect(data / "grid.toml")
        finally:
            _stop(process)
