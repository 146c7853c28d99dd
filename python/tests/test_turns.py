"""Turns (docs/scheduling.md, "Turns"): a transaction's long calls take turns on their
server, so none of them stands stopped while another of its calls computes there, unless
``local_grid(turns=False)`` issues every call as soon as it is ready and the server
time-shares them."""

import numpy as np
import pytest

import ninf
from conftest import fortran

# Products of this order take about half a second on one core here, and the model gives
# them longer: well over the 0.1 s from which calls take turns, and over the servers' gang
# quantum (0.1 s), so that two of them sent at once share the processor.
N = 2000


@pytest.mark.parametrize("turns", [True, False])
def test_a_transactions_long_calls_take_turns_on_their_server_unless_turned_off(turns, rng):
    A, B = fortran(rng.random((N, N))), fortran(rng.random((N, N)))
    C, D = np.zeros((N, N), order="F"), np.zeros((N, N), order="F")
    with ninf.local_grid(servers=1, turns=turns) as grid:
        with grid.transaction(label=f"turns={turns}") as tx:
            tx.call("mmul", N, A, B, C)
            tx.call("mmul", N, B, A, D)
    np.testing.assert_allclose(C, A @ B, rtol=1e-10)
    np.testing.assert_allclose(D, B @ A, rtol=1e-10)
    stopped = [t.stopped_seconds for t in tx.plan.tasks]
    if turns:
        assert stopped == [0.0, 0.0], "one after the other, each alone on the processor"
    else:
        assert all(s > 0 for s in stopped), f"both at once, time-shared: {stopped}"
