"""What a transaction did: where each call ran, predicted against actual times."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple


@dataclass(frozen=True)
class TaskPlan:
    """One call of a transaction."""

    label: str
    function: str
    server: str
    #: Seconds from the graph's start, as the metaserver predicted and as it ran.
    predicted_start: float
    predicted_finish: float
    actual_start: float
    actual_finish: float
    compute_seconds: float
    #: Of ``compute_seconds``, the time the call's gang job stood stopped outside its
    #: slots (behind other jobs on its server): the routine ran for the rest.
    stopped_seconds: float
    #: The routine's status (LINPACK's ``info``).
    status: int

    @property
    def predicted_seconds(self) -> float:
        return self.predicted_finish - self.predicted_start

    @property
    def actual_seconds(self) -> float:
        return self.actual_finish - self.actual_start


class Plan:
    """A transaction's placement and timing (``tx.plan``)."""

    def __init__(self, data: dict) -> None:
        self.graph_id: int = data["graph_id"]
        self.scheduler: str = data["scheduler"]
        self.predicted_makespan: float = data["predicted_makespan"]
        self.actual_makespan: float = data["actual_makespan"]
        #: Share of edges whose two calls ran on different servers.
        self.inter_server_ratio: float = data["inter_server_ratio"]
        self.schedule_seconds: float = data["schedule_seconds"]
        self.tasks_retried: int = data["tasks_retried"]
        self.regenerated: int = data["regenerated"]
        self.edges: List[Tuple[int, int]] = [tuple(e) for e in data["edges"]]
        # One tuple per task in `TaskPlan`'s field order, made into `TaskPlan`s when first
        # read: for 10,000 tiny calls that took 27-37 ms, on every transaction's exit.
        self._rows_of_tasks: List[tuple] = data["tasks"]
        self._tasks: Optional[List[TaskPlan]] = None

    @property
    def tasks(self) -> List[TaskPlan]:
        """Every call of the transaction, in the order they were made."""
        if self._tasks is None:
            self._tasks = [TaskPlan(*row) for row in self._rows_of_tasks]
        return self._tasks

    @classmethod
    def empty(cls) -> "Plan":
        return cls(
            dict(
                graph_id=0,
                scheduler="",
                predicted_makespan=0.0,
                actual_makespan=0.0,
                inter_server_ratio=0.0,
                schedule_seconds=0.0,
                tasks_retried=0,
                regenerated=0,
                edges=[],
                tasks=[],
            )
        )

    def servers(self) -> Dict[str, int]:
        """Calls per server."""
        count: Dict[str, int] = {}
        for t in self.tasks:
            count[t.server] = count.get(t.server, 0) + 1
        return count

    def _rows(self) -> List[Tuple[str, ...]]:
        return [
            (
                t.label,
                t.server,
                f"{t.predicted_start:.3f}-{t.predicted_finish:.3f}",
                f"{t.actual_start:.3f}-{t.actual_finish:.3f}",
                f"{t.compute_seconds:.3f}",
                str(t.status),
            )
            for t in self.tasks
        ]

    _HEADER = ("task", "server", "predicted (s)", "actual (s)", "compute (s)", "status")

    def _title(self) -> str:
        return (
            f"graph {self.graph_id} ({self.scheduler}): predicted {self.predicted_makespan:.3f} s, "
            f"actual {self.actual_makespan:.3f} s, inter-server {self.inter_server_ratio:.0%}"
        )

    def __repr__(self) -> str:
        rows = [self._HEADER] + self._rows()
        widths = [max(len(r[i]) for r in rows) for i in range(len(self._HEADER))]
        lines = [self._title()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in self._HEADER)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self._rows()
        )
        return (
            f"<p>{html.escape(self._title())}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )
