"""One local grid for the whole session: two compute servers serving the standard modules
and `selftest`, started by `ninf.local_grid` from the grid's programs the wheel installed
(scripts/test-python runs the suite with no NINF_BIN_DIR and nothing else on PATH)."""

import tomllib
import urllib.request

import numpy as np
import pytest

import ninf


@pytest.fixture(scope="session")
def grid():
    with ninf.local_grid(servers=2, selftest=True) as g:
        yield g


@pytest.fixture
def rng():
    return np.random.default_rng(2026)


def fortran(m):
    """The standard routines read matrices column-major."""
    return np.asfortranarray(m)


def metric_sum(grid, service, metric, labels=()):
    """The sum of `metric`'s samples carrying every one of `labels` (`name="value"`) that
    `service` (`proxy`, `metaserver`, `server-0`, ...) serves at its metrics address, which
    the grid file lists."""
    with open(grid.grid_file, "rb") as f:
        address = tomllib.load(f)["metrics"][service]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((metric + "{", metric + " ")) and all(label in line for label in labels)
    )
