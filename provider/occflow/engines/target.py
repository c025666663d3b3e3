"""What the write flow needs from an engine, as one small protocol: ``WriteTarget``.

One implementation per engine folder (``deltars.target``, ``spark.target``,
``maxcompute.target``): run one attempt from a fresh snapshot, the table's commit ledger, what a
commit really touched, and what the engine adds to the report. The Airflow face holds a target
and never reaches into the engine around it; the engine knows nothing of Airflow (an attempt's
``AttemptContext`` carries what the task is, as plain values).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..core.declaration import WriteDeclaration
from ..core.fencing import CommitFence
from ..core.observed import ObservedFootprint
from .ledger import CommitLedger
from .outcome import WriteOutcome
from .tags import KEYS, CommitTag


def _no_check() -> None:
    return None


@dataclass(frozen=True)
class TaskRef:
    """The task instance a write runs in (``None`` outside Airflow): who made a commit."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    try_number: int = 1


@dataclass(frozen=True)
class AttemptContext:
    """One attempt of a write: its number, the check to run right before the commit, the
    lease's fencing token to stamp on it, the task, and the write's commit tag (exactly-once)."""

    number: int = 1
    before_commit: Callable[[], None] = field(default=_no_check, compare=False, repr=False)
    fence: int | None = None
    task: TaskRef | None = None
    tag: CommitTag | None = None
    #: What the task's Airflow context is to a user's callable (``data`` / ``job``): opaque here.
    user_context: Any = field(default=None, compare=False, repr=False)
    #: Until when (epoch seconds) the write's lease is certainly live (``None``: no admission);
    #: a commit made in another process (a spark-submit driver) checks it (``spark.lease_window``).
    lease_live_until: Callable[[], float | None] = field(default=lambda: None, compare=False, repr=False)
    #: What the commit carries to fence out writers whose leases lapsed (``core.fencing``),
    #: asked right before the engine call, after ``before_commit`` (``None``: no admission).
    commit_fence: Callable[[], CommitFence | None] = field(default=lambda: None, compare=False, repr=False)

    def commit_metadata(self, declaration: WriteDeclaration) -> dict[str, str]:
        """Who made a commit, written into it: what ``TableCommitSensor`` and alerts look up."""
        meta = {"occflow.operation": declaration.operation.value, "occflow.attempt": str(self.number)}
        keys = declaration.partition_keys()
        if keys:
            meta["occflow.partitions"] = ",".join(sorted(keys))
        if self.task is not None:
            meta.update(writer_metadata(self.task))
        return meta


def writer_metadata(task: TaskRef) -> dict[str, str]:
    """The commit-info keys naming the task instance that made a commit (delta-rs): the commit
    tag's own keys (``engines.tags.KEYS``), one spelling for every reader."""
    return {
        KEYS["dag_id"]: task.dag_id,
        KEYS["task_id"]: task.task_id,
        KEYS["run_id"]: task.run_id,
        KEYS["map_index"]: str(task.map_index),
    }


@runtime_checkable
class WriteTarget(Protocol):
    """One table on one engine, as the write flow runs writes on it."""

    @property
    def engine_name(self) -> str: ...

    def prepare(self) -> None:
        """Start what every attempt shares (a Spark session); not timed as an attempt."""

    def run_attempt(self, declaration: WriteDeclaration, attempt: AttemptContext) -> WriteOutcome:
        """Run the job once from a fresh snapshot; return the engine's outcome (or raise)."""

    def commit_ledger(self, only_if: Mapping[str, str] | None = None) -> CommitLedger | None:
        """The table's exactly-once ledger; ``None`` when the engine keeps none."""

    def observe_commit(self, outcome: WriteOutcome) -> ObservedFootprint | None:
        """What the committed ``outcome`` really touched, read from the engine's log or
        metadata (``None``: this engine cannot say)."""

    def report_details(
        self, declaration: WriteDeclaration, outcome: WriteOutcome | None
    ) -> Mapping[str, Any]:
        """Engine-specific entries for the write report (``{}`` for most engines)."""


__all__ = ["AttemptContext", "TaskRef", "WriteTarget", "writer_metadata"]
