"""Verify before retry: find a logical write's commit in the table's own history.

A retry is only safe if the earlier attempt did not commit. Engines report "failed" for commits
that landed (a timeout after the log entry was written, Iceberg's
``CommitStateUnknownException``, a worker killed between the commit and the task's success), so
before a retry occflow asks the table whether a commit with this write's tag
(``occflow.engines.tags``) is there:

- found: the write is done; its version / snapshot is the outcome, the job does not run again;
- not found: the job runs, its commit tagged.

A ``CommitLedger`` is that question for one table on one engine. Each engine keeps its own in
its folder: delta-rs (``deltars.DeltaRsLedger``: the ``txn`` map and the commit history),
Iceberg on Spark (``spark.IcebergLedger``: the ``snapshots`` metadata table), delta-spark
(``spark.DeltaSparkLedger``: ``DESCRIBE HISTORY``), MaxCompute (``maxcompute.MaxComputeLedger``:
the project's job instances, through a client). The task-side flow that uses a ledger lives in
``occflow.operators.exactly_once``.

Right before a commit the write checks again (another live try of the same task may have
committed meanwhile): a check that says "do not commit" raises a ``CommitRefused``, which the
engines let through untouched (it is the caller's decision, not an engine failure).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from ..core.operations import Operation
from .outcome import WriteOutcome
from .tags import CommitTag

#: How far back in a Delta history occflow looks for a tag (commits, newest first).
HISTORY_DEPTH = 1000


@dataclass(frozen=True)
class FoundCommit:
    """A commit that carries an occflow tag."""

    engine: str
    table: str
    tag: CommitTag
    version: int | None = None
    snapshot_id: int | None = None
    committed_at: str | None = None

    def outcome(self, operation: Operation, reason: str) -> WriteOutcome:
        """The write settled as committed by the try whose commit this is (``by``), as the
        attempt that found it reports it: nothing written by that attempt; ``reason`` says how
        it was found."""
        labels = {"write_id": self.tag.write_id}
        if self.committed_at is not None:
            labels["committed_at"] = self.committed_at
        return WriteOutcome.already_committed(
            self.engine, self.table, operation, reason,
            by=self.by, version=self.version, snapshot_id=self.snapshot_id, tag=labels,
        )

    def describe(self) -> str:
        where = f"version {self.version}" if self.version is not None else f"snapshot {self.snapshot_id}"
        return f"{where} of {self.table} ({self.tag.describe()})"

    @property
    def by(self) -> str:
        """Which try made the commit, as far as its tag says: ``try 2`` or ``another try``."""
        return "another try" if self.tag.try_number is None else f"try {self.tag.try_number}"


class CommitRefused(Exception):
    """A check right before a commit said the write must not commit now.

    Raised by a ``before_commit`` hook (or by an engine's own check of its transaction ids); the
    engines let it through instead of turning it into a failed outcome.
    """


class LeaseNotLive(CommitRefused):
    """The write's lease was not certainly live right before its commit: aborted uncommitted
    (someone else may hold the footprint now). ``fence``: the lease's token, where known."""

    def __init__(self, message: str, fence: int | None = None) -> None:
        super().__init__(message)
        self.fence = fence


class FencedOut(LeaseNotLive):
    """The engine refused the commit at the commit itself: the write's lease lapsed while it ran
    (a stalled writer) and a write admitted in its place committed first (``core.fencing``)."""


class AlreadyCommitted(CommitRefused):
    """The write is already in the table: another try (or attempt) of it committed.

    ``found`` is its commit when the check looked it up; ``None`` when only the format's own
    transaction id said so (the ledger then finds the commit).
    """

    def __init__(self, message: str, found: FoundCommit | None = None) -> None:
        super().__init__(message)
        self.found = found


class CommitLedger(Protocol):
    """One table's commit history as far as occflow's tags are concerned."""

    @property
    def engine(self) -> str: ...

    @property
    def table(self) -> str: ...

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        """The commit carrying ``tag``'s write id, or ``None`` if the write did not land."""
        ...

    def tagged_commits(self) -> Iterator[FoundCommit]:
        """Every commit in the table's history that carries an occflow tag, newest first."""
        ...

    def tagging(self, tag: CommitTag) -> contextlib.AbstractContextManager[None]:
        """Inside, the engine puts ``tag`` on every commit the job makes."""
        ...


class StaleOverwriteError(Exception):
    """An overwrite that a newer logical date's overwrite of the same partition already replaced."""

    def __init__(self, tag: CommitTag, newer: FoundCommit, action: str) -> None:
        super().__init__(
            f"not applying {tag.describe()}: {newer.describe()} overwrote the same data for a later "
            f"logical date; applying this one would replace fresher data with older data "
            f"(stale_overwrite={action!r}; set it to 'apply' to overwrite anyway)"
        )
        self.tag = tag
        self.newer = newer
        self.action = action


def newer_overwrite(ledger: CommitLedger, tag: CommitTag) -> FoundCommit | None:
    """The newest tagged overwrite of a partition ``tag`` also overwrites, for a later logical date."""
    if not tag.is_overwrite:
        return None
    for commit in ledger.tagged_commits():
        other = commit.tag
        if other.write_id != tag.write_id and other.is_overwrite and other.overlaps(tag) and other.is_later_than(tag):
            return commit
    return None
