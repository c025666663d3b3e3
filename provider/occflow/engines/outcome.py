"""The one outcome type every engine returns, and its JSON form (the spark-submit channel)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..core.causes import explicit_chain
from ..core.kinds import Classification, WinningCommit
from ..core.operations import Operation


@dataclass(frozen=True)
class ErrorInfo:
    """A failure as the engine raised it: outermost exception first in ``messages``."""

    exception_class: str
    messages: tuple[str, ...]
    error_class: str | None = None
    cause_classes: tuple[str, ...] = ()

    @classmethod
    def from_exception(cls, exc: BaseException) -> ErrorInfo:
        """A Python exception as the outcome records it: class, message chain, cause classes.

        The chain is the one Python's traceback prints (``occflow.core.causes.explicit_chain``).
        """
        chain = list(explicit_chain(exc))
        return cls(
            exception_class=type(exc).__name__,
            messages=tuple(str(e) for e in chain),
            cause_classes=tuple(type(e).__name__ for e in chain[1:]),
        )

    @property
    def text(self) -> str:
        head = [self.exception_class] + list(self.cause_classes)
        return "\n".join(head + list(self.messages))


class NeverRetry(Exception):
    """A failed write that a retry would make worse (rows a failed job left behind would be
    written twice): the task fails, Airflow does not retry it. Engines raise a subclass naming
    what the user must repair."""


@dataclass(frozen=True)
class WriteOutcome:
    engine: str
    table: str
    operation: Operation
    committed: bool
    seconds: float
    version: int | None = None
    snapshot_id: int | None = None
    rows: int | None = None
    error: ErrorInfo | None = None
    classification: Classification | None = None
    tag: dict[str, str] = field(default_factory=dict)
    #: Committed, yet the table is now wrong because of it, in the engine's words (delta-rs: a
    #: compaction committed beside another of the same files, the rows are in twice): the flow
    #: fails the task loudly, naming both commits, instead of reporting a clean commit.
    damage: str | None = None

    def with_winner(self, winner: WinningCommit | None) -> WriteOutcome:
        """This outcome with ``winner`` as its classification's winning commit (a lost write
        whose winner was found in the table's history); unchanged when there is none."""
        if winner is None or self.classification is None:
            return self
        return replace(self, classification=replace(self.classification, winning_commit=winner))

    def to_json(self) -> str:
        data: dict[str, Any] = asdict(self)
        data["operation"] = self.operation.value
        data["classification"] = None if self.classification is None else self.classification.to_dict()
        return json.dumps(data, sort_keys=True)
