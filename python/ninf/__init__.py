"""Ninf for Python: call the grid's numerical routines on NumPy arrays.

>>> import numpy as np, ninf
>>> grid = ninf.connect()                       # the grid `ninf up` started
>>> n = 100
>>> a, b = np.random.rand(n, n), np.random.rand(n, n)
>>> c = np.empty((n, n))
>>> grid.call("mmul", n, a, b, c)               # c is written in place
0

Calls group into transactions, which the grid schedules as one dataflow graph::

    with grid.transaction() as tx:
        tx.call("mmul", n, A, B, E)
        tx.call("mmul", n, C, D, F)
        tx.call("mmul", n, E, F, G)
    print(tx.plan)

Errors are subclasses of :class:`NinfError`, named after the GridRPC error codes.
"""

from ._native import __version__
from ._native import (
    BadArgument,
    Canceled,
    CommunicationFailed,
    DataNotFound,
    FunctionNotFound,
    InvalidSessionId,
    NinfError,
    RpcRefused,
    ServerNotFound,
    SessionFailed,
    Timeout,
)
from ._data import Data
from ._describe import Function, Parameter
from ._grid import Future, Grid, Progress, Transaction, connect, wait_all, wait_any
from ._local import local_grid
from ._plan import Plan, TaskPlan

__all__ = [
    "__version__",
    "BadArgument",
    "Canceled",
    "CommunicationFailed",
    "Data",
    "DataNotFound",
    "Function",
    "FunctionNotFound",
    "Future",
    "Grid",
    "InvalidSessionId",
    "NinfError",
    "Parameter",
    "Plan",
    "Progress",
    "RpcRefused",
    "ServerNotFound",
    "SessionFailed",
    "TaskPlan",
    "Timeout",
    "Transaction",
    "connect",
    "local_grid",
    "wait_all",
    "wait_any",
]
