"""Data kept on the grid between calls and transactions (the GridRPC data-management API;
docs/data.md): :meth:`Grid.put` and :meth:`Grid.empty` make a :class:`Data`, which goes
wherever an array argument goes."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy

from . import _native


class Data:
    """A handle of an array kept on the grid.

    Pass it wherever an array argument goes, in :meth:`Grid.call`, :meth:`Grid.call_async`
    and transactions: an IN argument reads it where it is, an INOUT one updates it there,
    an OUT one writes it there. Nothing comes back unless asked with :meth:`get`.

    It lives until :meth:`free`, or until its lease runs out once the client that made it
    is gone (the client renews it while it lives). A freed, expired or unknown handle
    raises :class:`DataNotFound` naming it, and the call sends nothing.
    """

    __slots__ = ("_native",)

    def __init__(self, native: "_native.DataHandle") -> None:
        self._native = native

    @property
    def id(self) -> str:
        """Its id: 128 random bits in hex."""
        return self._native.id

    @property
    def nbytes(self) -> int:
        return self._native.nbytes

    @property
    def dtype(self) -> numpy.dtype:
        return numpy.dtype(self._native.dtype)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self._native.shape)

    @property
    def mode(self) -> str:
        """``"sticky"``, ``"unique_sticky"`` or ``"persistent"`` (docs/data.md)."""
        return self._native.mode

    @property
    def servers(self) -> List[str]:
        """The compute servers holding a copy now (none until a value is written)."""
        return list(self._native.servers())

    def get(self, out: Optional[numpy.ndarray] = None) -> numpy.ndarray:
        """Its value as a NumPy array; with ``out``, written into that array in place (a
        writable contiguous array of its dtype and size) and returned."""
        if out is None:
            order = "F" if self._native.fortran_order else "C"
            out = numpy.empty(self.shape, dtype=self.dtype, order=order)
        self._native.read_into(out)
        return out

    def free(self) -> None:
        """Deletes it and its data on the grid."""
        self._native.free()

    def __repr__(self) -> str:
        return (
            f"<ninf.Data {self.id[:8]} {self.dtype.name}{list(self.shape)} "
            f"{self.nbytes} bytes {self.mode}>"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Data) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)


def unwrap(args: Tuple[Any, ...]) -> Tuple[Any, ...]:
    """Call arguments as the native layer takes them: each :class:`Data` as its handle."""
    return tuple(a._native if isinstance(a, Data) else a for a in args)
