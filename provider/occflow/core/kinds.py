"""The conflict taxonomy: one enum every classifier maps into and every policy maps out of.

Modelled on delta-rs's ``CommitConflictError``: each reason keeps its message and its help text
next to it, so the CLI, the alerts and the docs all say the same thing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class ConflictKind(str, enum.Enum):
    """Why a commit lost (or ``NOT_A_CONFLICT`` when it did not lose to a concurrent writer)."""

    CONCURRENT_APPEND = "concurrent_append"
    CONCURRENT_DELETE_READ = "concurrent_delete_read"
    CONCURRENT_DELETE_DELETE = "concurrent_delete_delete"
    METADATA_CHANGED = "metadata_changed"
    PROTOCOL_CHANGED = "protocol_changed"
    CONCURRENT_TRANSACTION = "concurrent_transaction"
    CONCURRENT_WRITE = "concurrent_write"
    COMMIT_RETRIES_EXHAUSTED = "commit_retries_exhausted"
    COMMIT_FAILED = "commit_failed"
    VALIDATION_CONFLICT = "validation_conflict"
    COMMIT_STATE_UNKNOWN = "commit_state_unknown"
    OPERATION_CONFLICT = "operation_conflict"
    METADATA_LOCK_CONFLICT = "metadata_lock_conflict"
    NOT_A_CONFLICT = "not_a_conflict"

    @property
    def is_conflict(self) -> bool:
        return self is not ConflictKind.NOT_A_CONFLICT

    @property
    def retry_safe(self) -> bool:
        """Whether running the job again from a fresh snapshot can succeed without risk.

        Protocol changes need a newer client, duplicated transaction ids mean two writers share
        one identity, and an unknown commit state may already have landed: none of these is
        fixed by trying again, and ``NOT_A_CONFLICT`` is never retried as a conflict.
        """
        return self not in _NOT_RETRY_SAFE

    @property
    def message(self) -> str:
        return _TEXT[self][0]

    @property
    def help(self) -> str:
        return _TEXT[self][1]


_NOT_RETRY_SAFE = frozenset(
    {
        ConflictKind.PROTOCOL_CHANGED,
        ConflictKind.CONCURRENT_TRANSACTION,
        ConflictKind.COMMIT_STATE_UNKNOWN,
        ConflictKind.NOT_A_CONFLICT,
    }
)

_TEXT: dict[ConflictKind, tuple[str, str]] = {
    ConflictKind.CONCURRENT_APPEND: (
        "A concurrent transaction added files (rows) in a partition this transaction read.",
        "Make the partition explicit in the operation's condition (e.g. `t.ds = '2024-01-01'` in a "
        "MERGE ON clause) so disjoint partitions stop conflicting, or admit one writer per partition.",
    ),
    ConflictKind.CONCURRENT_DELETE_READ: (
        "A concurrent transaction removed (rewrote) a file this transaction read.",
        "Retry from a fresh snapshot; separate UPDATE/DELETE/MERGE jobs by partition or serialise "
        "them with admission control.",
    ),
    ConflictKind.CONCURRENT_DELETE_DELETE: (
        "A concurrent transaction removed a file this transaction also removes.",
        "Usually two compactions rewriting the same files: run one compaction per partition at a "
        "time.",
    ),
    ConflictKind.METADATA_CHANGED: (
        "A concurrent transaction changed the table's metadata (schema or properties).",
        "Retry on the new schema; schedule ALTER TABLE outside the write window.",
    ),
    ConflictKind.PROTOCOL_CHANGED: (
        "A concurrent transaction upgraded the table's protocol (reader/writer features).",
        "Do not retry: upgrade the writer's Delta/Iceberg library to one that supports the new "
        "protocol.",
    ),
    ConflictKind.CONCURRENT_TRANSACTION: (
        "Another writer committed with the same application transaction id.",
        "Do not retry: two jobs share one streaming checkpoint or transaction id; give each writer "
        "its own.",
    ),
    ConflictKind.CONCURRENT_WRITE: (
        "A concurrent writer committed first and the commit could not be reconciled.",
        "Retry from a fresh snapshot.",
    ),
    ConflictKind.COMMIT_RETRIES_EXHAUSTED: (
        "The engine retried the commit until its own retry budget ran out.",
        "Reduce concurrency on this table or raise the engine's commit retries.",
    ),
    ConflictKind.COMMIT_FAILED: (
        "The commit lost a race on the table's metadata pointer (stale metadata).",
        "Retry: the engine re-reads the latest metadata and commits again.",
    ),
    ConflictKind.VALIDATION_CONFLICT: (
        "Commit validation found a concurrent change to data this operation depends on.",
        "Retry from a fresh snapshot, or filter the operation to disjoint partitions.",
    ),
    ConflictKind.COMMIT_STATE_UNKNOWN: (
        "The commit may or may not have landed: the catalog did not answer.",
        "Do not retry blindly: check the table's history for this write first.",
    ),
    ConflictKind.OPERATION_CONFLICT: (
        "MaxCompute rejected the later job: an earlier job committed a conflicting operation on "
        "the same table or partition.",
        "The job that finishes first succeeds: rerun the later job, or keep conflicting jobs on a "
        "partition apart.",
    ),
    ConflictKind.METADATA_LOCK_CONFLICT: (
        "MaxCompute could not take the metadata lock: a concurrent job is updating metadata.",
        "Retry after a short backoff.",
    ),
    ConflictKind.NOT_A_CONFLICT: (
        "The error is not a write conflict.",
        "Handled by the task's ordinary retries; occflow never retries it as a conflict.",
    ),
}


@dataclass(frozen=True)
class WinningCommit:
    """The commit that won, as far as the engine or the reference engine lets us know it."""

    version: int | None = None
    operation: str | None = None
    timestamp: str | None = None
    snapshot_id: int | None = None
    tag: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        parts = []
        if self.version is not None:
            parts.append(f"version {self.version}")
        if self.snapshot_id is not None:
            parts.append(f"snapshot {self.snapshot_id}")
        if self.operation:
            parts.append(f"operation {self.operation}")
        if self.timestamp:
            parts.append(f"at {self.timestamp}")
        return ", ".join(parts) if parts else "unknown"


@dataclass(frozen=True)
class Classification:
    """What ``occflow.classify`` says about an error."""

    kind: ConflictKind
    engine: str
    reason: str
    winning_commit: WinningCommit | None = None
    exception_class: str | None = None
    error_class: str | None = None

    @property
    def is_conflict(self) -> bool:
        return self.kind.is_conflict

    @property
    def retry_safe(self) -> bool:
        return self.kind.retry_safe

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "engine": self.engine,
            "reason": self.reason,
            "retry_safe": self.retry_safe,
            "exception_class": self.exception_class,
            "error_class": self.error_class,
            "winning_commit": None
            if self.winning_commit is None
            else {
                "version": self.winning_commit.version,
                "snapshot_id": self.winning_commit.snapshot_id,
                "operation": self.winning_commit.operation,
                "timestamp": self.winning_commit.timestamp,
            },
        }
