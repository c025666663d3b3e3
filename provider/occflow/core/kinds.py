"""The conflict taxonomy: one enum every classifier maps into and every policy maps out of.

Modelled on delta-rs's ``CommitConflictError``: each reason keeps its message and its help text
next to it, so the CLI, the alerts and the docs all say the same thing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
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
class MetadataCommit:
    """A commit that changed the table's metadata, not its data (a schema change, a property):
    Iceberg writes a new metadata file and no snapshot, Delta a log version with a ``metaData``
    action. ``version`` is what the format numbers it by (Iceberg: the metadata file's number,
    ``00004-<uuid>.metadata.json`` / ``v4.metadata.json`` -> 4; Delta: the log version);
    ``location`` the metadata file where the format has one."""

    version: int | None = None
    location: str | None = None

    def describe(self) -> str:
        where = "" if self.location is None else f" ({self.location})"
        number = "a new metadata version" if self.version is None else f"metadata version {self.version}"
        return number + where

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "location": self.location}


@dataclass(frozen=True)
class WinningCommit:
    """The commit that won, as far as the engine or the reference engine lets us know it.

    ``dag_id`` / ``task_id`` / ``run_id`` / ``try_number`` name the Airflow try that made it when
    the commit carries occflow's tag (``tagged``); ``others`` are the other commits (versions, or
    snapshot ids on Iceberg) that landed since the losing attempt read the table, and ``basis``
    says how the winner was picked among them. ``metadata_version`` numbers a winner that
    changed only the table's metadata (Iceberg: a schema change writes no snapshot).
    """

    version: int | None = None
    operation: str | None = None
    timestamp: str | None = None
    snapshot_id: int | None = None
    tag: dict[str, str] = field(default_factory=dict)
    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    try_number: int | None = None
    tagged: bool = False
    others: tuple[int, ...] = ()
    basis: str | None = None
    metadata_version: int | None = None

    @property
    def writer(self) -> str | None:
        """``dag.task run R try N`` when the commit carries occflow's tag, else ``None``."""
        if not self.tagged or self.dag_id is None or self.task_id is None:
            return None
        text = f"{self.dag_id}.{self.task_id}"
        if self.run_id is not None:
            text += f" run {self.run_id}"
        if self.try_number is not None:
            text += f" try {self.try_number}"
        return text

    def describe(self) -> str:
        parts = []
        if self.version is not None:
            parts.append(f"version {self.version}")
        if self.snapshot_id is not None:
            parts.append(f"snapshot {self.snapshot_id}")
        if self.operation:
            parts.append(f"operation {self.operation}")
        if self.metadata_version is not None:
            parts.append(f"metadata version {self.metadata_version}")
        if self.timestamp:
            parts.append(f"at {self.timestamp}")
        if self.writer is not None:
            parts.append(f"by {self.writer}")
        if self.others:
            parts.append("also committed since the read: " + ", ".join(str(o) for o in self.others))
        return ", ".join(parts) if parts else "unknown"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (XCom): every field, ``others`` as a list."""
        return {
            "version": self.version,
            "snapshot_id": self.snapshot_id,
            "operation": self.operation,
            "timestamp": self.timestamp,
            "tag": dict(self.tag),
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "try_number": self.try_number,
            "tagged": self.tagged,
            "others": list(self.others),
            "basis": self.basis,
            "metadata_version": self.metadata_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WinningCommit:
        """The inverse of :meth:`to_dict`; keys it lacks keep their defaults (older reports)."""
        tag = data.get("tag") or {}
        return cls(
            version=_opt_int(data.get("version")),
            operation=data.get("operation"),
            timestamp=data.get("timestamp"),
            snapshot_id=_opt_int(data.get("snapshot_id")),
            tag={str(k): str(v) for k, v in tag.items()},
            dag_id=data.get("dag_id"),
            task_id=data.get("task_id"),
            run_id=data.get("run_id"),
            try_number=_opt_int(data.get("try_number")),
            tagged=bool(data.get("tagged", False)),
            others=tuple(int(o) for o in data.get("others") or ()),
            basis=data.get("basis"),
            metadata_version=_opt_int(data.get("metadata_version")),
        )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


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
            "winning_commit": None if self.winning_commit is None else self.winning_commit.to_dict(),
        }
