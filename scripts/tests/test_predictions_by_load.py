"""`scripts/predictions-by-load` on a metaserver database built from the metaserver's own
SQLite migrations (so a column renamed there breaks this test), holding four finished graphs
of two calls each whose figures are worked out by hand below, and one graph still running,
which the script must leave out. Then the bad inputs: a file that is not there, a database
with no finished graph."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "predictions-by-load"
MIGRATIONS = ROOT / "metaserver" / "migrations" / "sqlite"

# (id, created, predicted makespan, actual makespan). Graph 3 is placed while graph 2 runs
# (10.0 < 10.1 < 10.2): one graph in flight; the others none.
GRAPHS = [
    (1, 0.0, 0.12, 0.10),
    (2, 10.0, 0.10, 0.20),
    (3, 10.1, 0.30, 0.20),
    (4, 20.0, 0.20, 0.40),
]

# (graph, task, server, predicted start, predicted finish, actual start, actual finish,
#  compute, stopped, fetch, queue). Task 1 reads task 0's output.
PLACEMENTS = [
    (1, 0, "a", 0.00, 0.05, 0.00, 0.05, 0.04, 0.00, 0.000, 0.000),
    (1, 1, "a", 0.05, 0.12, 0.05, 0.10, 0.04, 0.01, 0.002, 0.003),
    (2, 0, "a", 0.00, 0.05, 0.00, 0.10, 0.08, 0.02, 0.000, 0.000),
    (2, 1, "a", 0.05, 0.10, 0.10, 0.20, 0.09, 0.00, 0.000, 0.000),
    (3, 0, "b", 0.00, 0.15, 0.00, 0.10, 0.09, 0.00, 0.000, 0.000),
    (3, 1, "b", 0.15, 0.30, 0.10, 0.20, 0.08, 0.00, 0.000, 0.000),
    (4, 0, "a", 0.00, 0.10, 0.00, 0.20, 0.18, 0.03, 0.000, 0.000),
    (4, 1, "a", 0.10, 0.20, 0.20, 0.40, 0.16, 0.04, 0.000, 0.000),
]


def migrated(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    for migration in sorted(MIGRATIONS.glob("*.sql")):
        db.executescript(migration.read_text())
    return db


def insert_graph(db, graph, created, predicted, actual, state="done") -> None:
    db.execute(
        "INSERT INTO graphs (id, label, proxy, scheduler, predictor, tasks, edges, created, "
        "predicted_makespan, inter_server_ratio, actual_makespan, state, error) "
        "VALUES (?, 'cascade', 'proxy', 'heft', 'latest', 2, 1, ?, ?, 0, ?, ?, '')",
        (graph, created, predicted, actual, state),
    )
    db.execute(
        "INSERT INTO graph_edges (graph_id, from_task, to_task, bytes) VALUES (?, 0, 1, 8)",
        (graph,),
    )


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "metaserver.db"
    db = migrated(path)
    for graph in GRAPHS:
        insert_graph(db, *graph)
    db.executemany(
        "INSERT INTO placements (graph_id, task, label, function, server_address, processors, "
        "predicted_start, predicted_finish, actual_start, actual_finish, compute_seconds, "
        "stopped_seconds, fetch_seconds, queue_seconds) "
        "VALUES (?, ?, 'mmul', 'mmul', ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
        PLACEMENTS,
    )
    # Still running when the database was read: no makespan, no finishes. Placed while
    # graph 2 ran, it would change graph 3's load if the script counted it.
    insert_graph(db, 5, 10.05, 0.1, None, state="running")
    db.execute(
        "INSERT INTO placements (graph_id, task, label, function, server_address, processors, "
        "predicted_start, predicted_finish) VALUES (5, 0, 'mmul', 'mmul', 'b', 1, 0, 0.1)"
    )
    db.commit()
    db.close()
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
    )


def percent(output: str, before: str) -> float:
    """The percentage printed right after `before`."""
    found = re.search(re.escape(before) + r"\s*(-?[0-9.]+)%", output)
    assert found, f"no percentage after {before!r} in:\n{output}"
    return float(found.group(1))


def table(output: str, header: str) -> list[list[str]]:
    """The rows of the table under `header`, split on white space, to the next line that
    does not start with a number or a group label."""
    lines = output.splitlines()
    start = lines.index(header) + 1
    rows = []
    for line in lines[start:]:
        cells = line.split()
        if not cells or not re.fullmatch(r"[0-9]+(\+|-[0-9]+)?", cells[0]):
            break
        rows.append(cells)
    return rows


def test_the_figures_of_a_known_database(database: Path) -> None:
    done = run(str(database), "--tenths")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # Graphs 1, 2 and 4 met no other graph (predicted 0.12, 0.10, 0.20; actual 0.10, 0.20,
    # 0.40); graph 3 met one. The running graph 5 is in neither.
    assert table(out, "in flight  graphs  predicted (ms)  actual (ms)") == [
        ["0", "3", "120.0", "200.0"],
        ["1", "1", "300.0", "200.0"],
    ]
    # Errors 0.2, 0.5, 0.5, 0.5; each group's median (0.2 and 0.2) errs by 1, 0, 0.5 and 0.
    assert percent(out, "per-graph error (mean):") == pytest.approx(42.5)
    assert percent(out, "knowing each group's median:") == pytest.approx(37.5)
    # Over their lives graphs 2 and 3 each ran half their time beside the other (two
    # quarters), 1 and 4 alone: groups {0.1, 0.4} (best constant 0.1, errors 0 and 0.75) and
    # {0.2, 0.2}.
    assert "knowing in advance each graph's mean load over its life (2 groups):" in out
    assert percent(out, "over its life (2 groups):") == pytest.approx(18.8)
    # Task finishes err by 0, 0.2 and six times 0.5. Each position's median finish (0.1 for
    # the first calls, 0.2 for the second) errs by 1, 0, 0, 0.5 at each position; knowing
    # the graphs in flight as well changes nothing here; knowing the load over the graph's
    # life splits {0.05, 0.2} (median 0.125: 1.5 and 0.375) from {0.1, 0.1}.
    assert percent(out, "per-task error (median):") == pytest.approx(50.0)
    assert percent(out, "knowing each task position's median:") == pytest.approx(25.0)
    assert percent(out, "the graphs in flight at its placement:") == pytest.approx(25.0)
    assert percent(out, "mean load over its life:") == pytest.approx(18.8)
    # The mean of |k * predicted - actual| / actual falls to k = 5/6 and rises after it:
    # the best step of the search is 0.83.
    assert "best single scale on every prediction: x0.83," in out
    assert percent(out, "x0.83,") == pytest.approx(35.5)
    # Calls (finish less start) and running times (compute less stopped), medians by
    # position.
    assert table(out, "task  predicted call (ms)  actual call (ms)  running (ms)") == [
        ["0", "75.00", "100.00", "75.00"],
        ["1", "85.00", "100.00", "85.00"],
    ]
    # Each quiet graph's one first call is alone among the graph's first calls.
    assert table(
        out, "calls on their server  calls  predicted finish (ms)  actual finish (ms)"
    ) == [["1", "4", "75.00", "100.00"]]
    # The eight calls in one band: running .03-.15 (median .085), stopped .005, and the
    # rest of the call (call less compute, fetch and admission) .005-.04 (median .015).
    assert table(
        out, "in flight  calls  running  stopped  fetching  admission  rest of the call (ms)"
    ) == [["0-1", "8", "85.00", "5.00", "0.00", "0.00", "15.00"]]


def test_whole_points_and_a_last_group_that_takes_the_rest(database: Path) -> None:
    done = run(str(database), "--cap", "1")
    assert done.returncode == 0, done.stderr
    assert table(done.stdout, "in flight  graphs  predicted (ms)  actual (ms)") == [
        ["0", "3", "120.0", "200.0"],
        ["1+", "1", "300.0", "200.0"],
    ]
    assert "per-graph error (mean): 42%; knowing each group's median: 38%" in done.stdout


def test_a_missing_file_is_named_and_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    done = run(str(missing))
    assert done.returncode != 0
    assert done.stderr.strip() == f"{missing}: no such file"
    assert not missing.exists()


def test_a_database_with_no_finished_graph_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    db = migrated(path)
    insert_graph(db, 1, 0.0, 0.1, None, state="running")
    db.commit()
    db.close()
    done = run(str(path))
    assert done.returncode != 0
    assert done.stderr.strip() == f"{path}: no finished graph"


def test_a_file_that_is_not_a_metaserver_database_is_named(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    done = run(str(path))
    assert done.returncode != 0
    assert done.stderr.strip() == (
        f"{path}: not a metaserver database (no such table: graphs)"
    )
