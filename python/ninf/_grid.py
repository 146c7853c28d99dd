"""Connections, calls, futures and transactions: the Python API over ``ninf._native``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, Sequence, Union

import numpy

from . import _native
from ._data import Data, unwrap
from ._describe import Function
from ._plan import Plan

PathLike = Union[str, "os.PathLike[str]"]


def connect(grid: Optional[PathLike] = None, *, token: Optional[str] = None) -> "Grid":
    """Connects to a grid.

    ``grid`` is ``None`` (the grid file named by ``$NINF_GRID``, else the one ``ninf up``
    writes by default, with its token and TLS authority), the path of a grid file
    (``grid.toml``), or a proxy's address (``"ninf://host:port"`` or ``"host:port"``).
    ``token`` overrides the grid file's token (or gives one for an address).

    Raises ``ServerNotFound`` when no grid file exists or the proxy cannot be reached,
    ``BadArgument`` for a malformed grid file.
    """
    if grid is None:
        return Grid(_native.Client.from_grid_file(None, token))
    text = os.fspath(grid)
    if text.startswith("ninf://") or (
        ":" in text and not text.endswith(".toml") and not os.path.exists(text)
    ):
        return Grid(_native.Client(text, token))
    return Grid(_native.Client.from_grid_file(Path(text), token), Path(text))


def _wait_in_slices(run: "_native.Run") -> None:
    """Waits for ``run`` with the GIL released, in slices short enough for Ctrl-C to land."""
    while not run.wait(0.05):
        pass


def _wait_interruptibly(run: "_native.Run") -> None:
    """:func:`_wait_in_slices`, where a ``KeyboardInterrupt`` cancels the run (it writes
    nothing) and propagates."""
    try:
        _wait_in_slices(run)
    except BaseException:
        run.cancel()
        raise


def _status(plan: dict) -> int:
    """A one-call run's routine status."""
    return Plan(plan).tasks[0].status if plan["tasks"] else 0


class Grid:
    """A connection to a grid's client proxy. Make one with :func:`ninf.connect` or
    :func:`ninf.local_grid`. Thread-safe: calls from several threads run concurrently."""

    def __init__(self, native: "_native.Client", grid_file: Optional[Path] = None) -> None:
        self._native = native
        #: The grid file it was connected by, if any (another process can connect to it).
        self.grid_file = grid_file

    @property
    def address(self) -> str:
        """The proxy's address."""
        return self._native.address

    def __repr__(self) -> str:
        return f"<ninf.Grid proxy={self.address}>"

    def __enter__(self) -> "Grid":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release: the connection closes when the last reference goes."""

    def call(self, name: str, *args: Any) -> int:
        """Calls the routine ``name`` and waits for it; returns the routine's status
        (LINPACK's ``info``; 0 when it reports none).

        Arguments come in IDL order: IN scalars as Python numbers (``str`` for strings),
        arrays as NumPy arrays of the IDL's element type (C- or Fortran-contiguous), None
        for WORK arrays. OUT and INOUT arrays are written in place, as Ninf's C API writes
        into the caller's arrays. Every argument is checked against the routine's interface
        before anything is sent; ``BadArgument`` names the argument and what was expected.

        Ctrl-C cancels the call (its arrays are left as they were) and raises
        ``KeyboardInterrupt``.

        >>> grid.call("dgesv", a, n, ipvt, b)   # b now holds the solution
        0
        """
        tx = self._native.transaction()
        # Sent at once and waited for: its arrays are read when sent, not copied first.
        tx.call_sent_at_once(name, *unwrap(args))
        run = tx.start()
        _wait_interruptibly(run)
        return _status(run.result())

    def call_async(self, name: str, *args: Any) -> "Future":
        """Starts ``call(name, *args)`` and returns at once with its :class:`Future`.
        The arrays must stay untouched until it ends (they are read as it is sent, not
        copied first); the future keeps them alive."""
        tx = self._native.transaction()
        tx.call_sent_at_once(name, *unwrap(args))
        return Future(name, tx.start())

    def transaction(
        self,
        label: Optional[str] = None,
        progress: Optional[Callable[["Progress"], None]] = None,
    ) -> "Transaction":
        """Records calls into one graph, sent when the ``with`` block ends::

            with grid.transaction() as tx:
                tx.call("mmul", n, A, B, E)
                tx.call("mmul", n, C, D, F)
                tx.call("mmul", n, E, F, G)   # E and F flow server to server
            print(tx.plan)

        ``progress``, if given, is called with a :class:`Progress` each time some of the
        graph's tasks end (from another thread, while the block waits; keep it short). An
        exception it raises is reported as unraisable and the transaction goes on.
        """
        return Transaction(self._native.transaction(), label, progress)

    def put(self, array: Any, *, mode: str = "sticky", replicas: int = 1) -> Data:
        """Sends ``array`` (a NumPy array) once and keeps it on the grid; returns its
        :class:`Data`, which calls then read where it is. ``mode`` is ``"sticky"`` (kept
        where it is put or last written), ``"unique_sticky"`` or ``"persistent"`` (the grid
        may keep copies where they are cheaper); see docs/data.md. ``replicas=2`` (with
        ``mode="persistent"``) keeps a copy on each of two servers, so that losing one loses
        nothing the calls only read.

        >>> a = grid.put(numpy.random.rand(n, n))
        >>> grid.call("dgefa", a, n, ipvt)     # factored on the grid, nothing comes back
        """
        return Data(self._native.put(numpy.asarray(array), mode, replicas))

    def empty(
        self, shape: Any, dtype: Any = numpy.float64, *, mode: str = "sticky", order: str = "C"
    ) -> Data:
        """A :class:`Data` of ``shape`` and ``dtype`` that receives an output on the grid
        (an OUT or INOUT argument writes it there)."""
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        fortran = order.upper() == "F"
        return Data(self._native.empty(list(dims), numpy.dtype(dtype), fortran, mode))

    def data(self) -> List[Data]:
        """This client's handles on the grid, oldest first."""
        return [Data(d) for d in self._native.data()]

    def describe(self, name: str) -> Function:
        """The routine's interface (its IDL declaration) as a plain object."""
        return Function.from_json(self._native.describe_json(name))

    def functions(self) -> List[str]:
        """The routines some server of the grid serves, sorted."""
        return list(self._native.functions())


class Future:
    """A call started with :meth:`Grid.call_async`."""

    def __init__(self, name: str, run: "_native.Run") -> None:
        self._name = name
        self._run = run

    def __repr__(self) -> str:
        state = "cancelled" if self._run.cancelled() else "done" if self._run.done() else "running"
        return f"<ninf.Future {self._name} {state}>"

    def done(self) -> bool:
        """Whether it has ended: finished, failed or cancelled."""
        return self._run.done()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits up to ``timeout`` seconds (``None``: until it ends); says whether it has
        ended. Ctrl-C raises ``KeyboardInterrupt`` and leaves the call running."""
        if timeout is not None:
            return self._run.wait(timeout)
        _wait_in_slices(self._run)
        return True

    def cancel(self) -> bool:
        """Cancels the call unless it has ended: its arrays are not written and nothing
        of it stays on the servers. Says whether it was cancelled now."""
        return self._run.cancel()

    def cancelled(self) -> bool:
        return self._run.cancelled()

    def result(self, timeout: Optional[float] = None) -> int:
        """Waits for the call and returns the routine's status; raises its error
        (``SessionFailed``, ``Canceled``, ...), or ``Timeout`` if it has not ended within
        ``timeout`` seconds."""
        if not self.wait(timeout):
            raise _native.Timeout(f"`{self._name}` has not ended after {timeout} s")
        return _status(self._run.result())

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        """The call's error after it ends, or None if it succeeded."""
        try:
            self.result(timeout)
        except _native.NinfError as error:
            return error
        return None


def wait_any(futures: Sequence[Future], timeout: Optional[float] = None) -> Optional[Future]:
    """Waits until one of ``futures`` has ended and returns it (the earliest in the list
    among those that have); ``None`` if none ended within ``timeout`` seconds."""
    if not futures:
        raise ValueError("wait_any needs at least one future")
    runs = [f._run for f in futures]
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        # Slices short enough for Ctrl-C to land between them.
        left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
        if _native.wait_any(runs, max(0.0, left)):
            return next(f for f in futures if f.done())
        if deadline is not None and time.monotonic() >= deadline:
            return None


def wait_all(futures: Iterable[Future]) -> List[int]:
    """Waits until every future has ended; returns their statuses in order. If some
    failed, raises the first failure's error after all have ended."""
    futures = list(futures)
    for f in futures:
        f.wait()
    return [f.result() for f in futures]


class Progress(NamedTuple):
    """How far a followed transaction has got (see :meth:`Grid.transaction`)."""

    #: The graph's id at the metaserver, as ``tx.plan.graph_id`` will be.
    graph_id: int
    #: Calls that have replied, of all the graph's calls.
    tasks_done: int
    tasks_total: int
    #: Bytes of call requests and replies between the proxy and the servers, and of
    #: intermediate results read from servers' storage.
    bytes_moved: int
    #: Calls issued again after a fault.
    retries: int


class Transaction:
    """Calls recorded with :meth:`call` and sent as one graph when the ``with`` block ends.

    Dependencies are found by array identity: an array written by one call (OUT, INOUT)
    and passed to a later one is an edge, and the value flows server to server. Every
    array a call writes holds its final value after the block, except those marked with
    :meth:`scratch`, whose values stay on the grid. An exception inside the block sends
    nothing.
    """

    def __init__(
        self,
        native: "_native.Transaction",
        label: Optional[str],
        progress: Optional[Callable[["Progress"], None]] = None,
    ) -> None:
        self._native = native
        self._progress = progress
        self.plan: Optional[Plan] = None
        if label:
            native.set_label(label)

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> None:
        if kind is not None:
            return None
        if len(self._native) == 0:
            self.plan = Plan.empty()
            return None
        follow = self._progress
        report = None if follow is None else (lambda fields: follow(Progress(**fields)))
        run = self._native.start(report)
        _wait_interruptibly(run)
        self.plan = Plan(run.result())
        return None

    def call(self, name: str, *args: Any) -> None:
        """Records a call (see :meth:`Grid.call` for the arguments); checked now, so a
        mistake is raised at the call that made it."""
        self._native.call(name, *unwrap(args))

    def scratch(self, array: Any) -> Any:
        """Marks ``array`` as an intermediate: calls may write it and later calls read
        it, but its value stays on the grid (deleted when the transaction ends) and is
        never written back, so it does not travel to the client. Returns ``array``, whose
        contents are never read or written; ``numpy.empty`` is enough::

            with grid.transaction() as tx:
                e = tx.scratch(numpy.empty((n, n), order="F"))
                tx.call("mmul", n, a, b, e)
                tx.call("mmul", n, e, c, result)   # only `result` comes back
        """
        return self._native.scratch(array)

    @property
    def edges(self) -> List[tuple]:
        """The recorded edges: (producer, its parameter, consumer, its parameter, bytes)."""
        return list(self._native.edges())

    def __len__(self) -> int:
        return len(self._native)
