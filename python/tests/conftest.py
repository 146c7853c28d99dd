"""One local grid for the whole session: two compute servers serving the standard modules
and `selftest`, started by `ninf.local_grid` from the programs in $NINF_BIN_DIR (scripts/test
builds them and sets it)."""

import os

import numpy as np
import pytest

import ninf


@pytest.fixture(scope="session")
def grid():
    if not os.environ.get("NINF_BIN_DIR"):
        raise RuntimeError(
            "set NINF_BIN_DIR to the folder holding `ninf` and the `ninf-exec-*` programs "
            "(scripts/test does)"
        )
    with ninf.local_grid(servers=2, selftest=True) as g:
        yield g


@pytest.fixture
def rng():
    return np.random.default_rng(2026)


def fortran(m):
    """The standard routines read matrices column-major."""
    return np.asfortranarray(m)
