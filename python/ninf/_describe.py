"""Routine interfaces as plain Python objects (``grid.describe(name)``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

#: The NumPy dtype each IDL element type takes.
DTYPES = {
    "char": "uint8",
    "short": "int16",
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "scomplex": "complex64",
    "dcomplex": "complex128",
}


@dataclass(frozen=True)
class Parameter:
    """One parameter of a routine, in IDL order."""

    name: str
    #: ``"IN"``, ``"OUT"``, ``"INOUT"`` or ``"WORK"``.
    mode: str
    #: The IDL element type: ``"double"``, ``"int"``, ``"string"``, ...
    type: str
    #: Each dimension's expression, outermost first; empty for a scalar.
    dimensions: Tuple[str, ...] = ()

    @property
    def is_array(self) -> bool:
        return bool(self.dimensions)

    @property
    def dtype(self) -> Optional[str]:
        """The NumPy dtype an array argument must have (None for a scalar)."""
        return DTYPES.get(self.type) if self.is_array else None

    @property
    def writes(self) -> bool:
        """Whether the routine writes it (the caller's array is written in place)."""
        return self.mode in ("OUT", "INOUT")

    def __str__(self) -> str:
        dims = "".join(f"[{d}]" for d in self.dimensions)
        return f"{self.mode} {self.type} {self.name}{dims}"


@dataclass(frozen=True)
class Function:
    """A routine's interface, as its IDL declares it."""

    name: str
    module: str
    description: Optional[str]
    parameters: Tuple[Parameter, ...]
    #: Floating-point operations of one call, as an expression of the parameters.
    calc_order: Optional[str] = None
    #: ``"sequential"``, ``"threads"`` for a routine that may compute with several threads
    #: (IDL ``Threads``), or ``"parallel"`` for SPMD routines.
    parallelism: str = "sequential"
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, text: str) -> "Function":
        data = json.loads(text)
        parameters = tuple(
            Parameter(p["name"], p["mode"], p["type"], tuple(p.get("dimensions", ())))
            for p in data["parameters"]
        )
        return cls(
            name=data["name"],
            module=data["module"],
            description=data.get("description"),
            parameters=parameters,
            calc_order=data.get("calc_order"),
            parallelism=data.get("parallelism", {}).get("kind", "sequential"),
            raw=data,
        )

    @property
    def signature(self) -> str:
        """``mmul(IN int n, IN double A[n][n], ...)``."""
        return f"{self.name}({', '.join(str(p) for p in self.parameters)})"

    def parameter(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(f"`{self.name}` has no parameter `{name}`")

    def __str__(self) -> str:
        text = f"{self.module}.{self.signature}"
        return f"{text}\n    {self.description}" if self.description else text

    @property
    def inputs(self) -> List[Parameter]:
        return [p for p in self.parameters if p.mode in ("IN", "INOUT")]

    @property
    def outputs(self) -> List[Parameter]:
        return [p for p in self.parameters if p.writes]
