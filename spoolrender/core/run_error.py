"""Why a run did not publish: the ``error`` of a run record, built in one place.

Whoever decides a run that failed (the executor, a chunk's or a split job's run, the
recoverer, ``spoolrender cancel``, a publish that could not be carried out) builds a
:class:`RunError` and writes :meth:`RunError.to_record` into the run record
(``run-NNNN.json``, and from there into ``failure.json``, ``result.json`` and hook
payloads). The record is exactly the object every version has written: ``kind``,
``message`` and ``transient`` (job.schema.json's ``error``), so records of older versions
read back unchanged, and keys a newer version may add beside them are kept as read.

:attr:`RunError.kind` stays a plain ``str``: a command renderer or a future worker may
report kinds no :class:`spoolrender.core.vocabulary.FailureKind` names (passed through).

This module imports only spoolrender.core.vocabulary, so any module may import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spoolrender.core.vocabulary import FailureKind

_FIELDS = ("kind", "message", "transient")


@dataclass(frozen=True)
class RunError:
    """A run's failure: its ``kind``, its message (first line: what ``status`` and
    failure.json show, so short and useful) and whether another attempt may succeed."""

    kind: str
    message: str
    transient: bool
    # Keys beside the three that a record read back held (a newer version's): kept as read.
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Any string: a renderer's own kinds pass through as reported (none was ever refused).
        if not isinstance(self.kind, str):
            raise ValueError(f"RunError.kind: expected a string, got {self.kind!r}")
        if not isinstance(self.message, str):
            raise ValueError(f"RunError.message: expected a string, got {self.message!r}")
        if not isinstance(self.transient, bool):
            raise ValueError(f"RunError.transient: expected True or False, got {self.transient!r}")
        if not isinstance(self.extra, Mapping) or any(k in _FIELDS or not isinstance(k, str) for k in self.extra):
            raise ValueError(f"RunError.extra: expected other keys than {', '.join(_FIELDS)}, got {self.extra!r}")

    def with_message(self, message: str) -> RunError:
        return replace(self, message=message)

    def to_record(self) -> dict[str, Any]:
        """The run record's ``error`` object (a new dict: the caller may keep it)."""
        return {"kind": self.kind, "message": self.message, "transient": self.transient, **self.extra}

    @classmethod
    def from_record(cls, raw: object) -> RunError:
        """A record's ``error`` as written (any version's); ValueError if it is not one."""
        if not isinstance(raw, Mapping):
            raise ValueError(f"a run error is an object, got {raw!r}")
        missing = [k for k in _FIELDS if k not in raw]
        if missing:
            raise ValueError(f"a run error without {', '.join(missing)}: {dict(raw)!r}")
        extra = {k: v for k, v in raw.items() if k not in _FIELDS}
        return cls(raw["kind"], raw["message"], raw["transient"], extra)


# What a failed chunk whose record holds no readable error reports (spoolrender.chunks.ledger).
UNREADABLE_CHUNK_ERROR = RunError(FailureKind.ERROR, "failed", False)
