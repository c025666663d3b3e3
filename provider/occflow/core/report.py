"""The typed result of one write task: ``WriteReport`` (committed, failed or skipped).

Every write pushes one, whatever its end, and every surface reads it back typed: the "Table
writes" view, the notifier, OpenLineage, the extra links, metrics and the CLI. XCom holds
``to_dict()``, a JSON-ready dict; ``from_dict()`` is its one inverse, and refuses what is not a
report (``MalformedReport``, naming the field) instead of letting a bad value travel on.

A lost attempt is one ``LostAttempt``: its classification (kind, reason, the winning commit as
the engine's log records it), the policy's decision and the engine's message. ``conflicts`` and
``decisions`` in the dict are its two views (the layout the XCom payload has always had).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .kinds import ConflictKind, MetadataCommit, WinningCommit
from .policy import Action

#: What ``to_dict`` writes as ``format``: a reader can tell a report from any other XCom value.
REPORT_FORMAT = "occflow.write_report/1"


class MalformedReport(ValueError):
    """A value that claims to be a write report and is not one (names the field)."""


class WriteStatus(str, enum.Enum):
    """How the write task's try ended."""

    COMMITTED = "committed"  # committed now, or found already committed by an earlier try
    FAILED = "failed"  # failed fast, or a non-conflict error for Airflow's ordinary retries
    SKIPPED = "skipped"  # nothing left to do (a compaction whose files all changed)
    RESCHEDULED = "rescheduled"  # ended this try to come back later (the write is not settled)


@dataclass(frozen=True)
class LostAttempt:
    """One attempt that did not commit: what it lost to and what the policy did next."""

    attempt: int
    kind: ConflictKind
    action: Action
    delay_seconds: float = 0.0
    reason: str = ""  # the classifier's evidence
    decision_reason: str = ""  # the policy's reason for ``action``
    winner: WinningCommit | None = None
    seconds: float | None = None  # the engine's time for the attempt, where it said
    error: str = ""  # the engine's own message

    @property
    def is_conflict(self) -> bool:
        return self.kind.is_conflict

    def winner_text(self) -> str | None:
        """``v30 UPDATE by reprocess`` / ``snapshot 12 append``: the winner in a few words."""
        won = self.winner
        if won is None:
            return None
        where = (
            f"v{won.version}"
            if won.version is not None
            else (f"snapshot {won.snapshot_id}" if won.snapshot_id is not None else "")
        )
        what = won.operation or ""
        if won.metadata_version is not None:  # a schema change writes no snapshot: its metadata version names it
            what = ", ".join(p for p in (what, f"metadata version {won.metadata_version}") if p)
        parts = [p for p in (where, what) if p]
        if won.task_id:
            parts.append(f"by task {won.task_id}")
        return " ".join(parts) or None

    def conflict_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "kind": self.kind.value,
            "reason": self.reason,
            "winning_commit": None if self.winner is None else self.winner.to_dict(),
            "seconds": self.seconds,
            "error": self.error,
        }

    def decision_dict(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "kind": self.kind.value,
            "action": self.action.value,
            "delay_seconds": self.delay_seconds,
            "reason": self.decision_reason,
        }


@dataclass(frozen=True)
class LeaseLoss:
    """An attempt aborted before its commit because its lease was not live (nothing written)."""

    attempt: int
    fence: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "fence": self.fence, "reason": self.reason}


@dataclass(frozen=True)
class WriteReport:
    """What one write task's try did, and what it cost."""

    table: str
    operation: str
    profile: str
    engine: str
    status: WriteStatus
    partitions: tuple[Mapping[str, Any], ...] | None = None
    version: int | None = None
    snapshot_id: int | None = None
    rows: int | None = None
    seconds: float | None = None
    attempts: int = 0
    lost: tuple[LostAttempt, ...] = ()
    wasted_seconds: float = 0.0
    tag: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None  # the engine's message when the try did not commit
    fence: int | None = None
    lease_lost: tuple[LeaseLoss, ...] = ()
    committed_by: str | None = None  # "try N" when an earlier try had committed the write
    observed_footprint: Mapping[str, Any] | None = None
    footprint_exceeded: Mapping[str, Any] | None = None
    engine_details: Mapping[str, Any] = field(default_factory=dict)  # e.g. ``maxcompute``
    #: The table's identity to admission when it is a location (delta-rs): its leases' table.
    table_key: str | None = None
    #: Seconds from the grant of this try's lease to the start of its first attempt (engine
    #: start-up, reading the task's state): what admission cost before any work ran. ``None``
    #: without a lease, or for a lease this try could not time (older reports).
    grant_to_start_seconds: float | None = None
    #: The metadata version a schema change committed (Iceberg writes no snapshot for it; Delta
    #: numbers it by its log version, ``version`` too); ``None`` for a data commit.
    metadata_commit: MetadataCommit | None = None

    @property
    def committed(self) -> bool:
        return self.status is WriteStatus.COMMITTED

    @property
    def conflicts(self) -> tuple[LostAttempt, ...]:
        """The lost attempts that lost a write conflict (not the other failures)."""
        return tuple(a for a in self.lost if a.is_conflict)

    @property
    def last_lost(self) -> LostAttempt | None:
        return self.lost[-1] if self.lost else None

    def with_status(self, status: WriteStatus, error: str | None = None) -> WriteReport:
        return replace(self, status=status, error=error if error is not None else self.error)

    # ------------------------------------------------------------------ XCom

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "format": REPORT_FORMAT,
            "status": self.status.value,
            "table": self.table,
            "operation": self.operation,
            "profile": self.profile,
            "partitions": None if self.partitions is None else [dict(p) for p in self.partitions],
            "engine": self.engine,
            "committed": self.committed,
            "version": self.version,
            "snapshot_id": self.snapshot_id,
            "rows": self.rows,
            "seconds": self.seconds,
            "attempts": self.attempts,
            "conflicts": [a.conflict_dict() for a in self.conflicts],
            "decisions": [a.decision_dict() for a in self.lost],
            "lost_attempts": [_lost_dict(a) for a in self.lost],
            "wasted_seconds": round(self.wasted_seconds, 3),
            "tag": dict(self.tag),
            "error": self.error,
            "fence": self.fence,
            "lease_lost": [loss.to_dict() for loss in self.lease_lost],
            "committed_by": self.committed_by,
            "observed_footprint": None if self.observed_footprint is None else dict(self.observed_footprint),
            "footprint_exceeded": None if self.footprint_exceeded is None else dict(self.footprint_exceeded),
            "table_key": self.table_key,
            "grant_to_start_seconds": self.grant_to_start_seconds,
            "metadata_commit": None if self.metadata_commit is None else self.metadata_commit.to_dict(),
        }
        for key, value in self.engine_details.items():
            data[key] = value
        return data

    @classmethod
    def from_dict(cls, data: Any) -> WriteReport:
        """The report in ``data`` (a ``to_dict`` value, or the layout before ``format`` and
        ``status`` existed); ``MalformedReport`` naming the field that is wrong otherwise."""
        if not isinstance(data, Mapping):
            raise MalformedReport(f"a write report is a mapping, got {type(data).__name__}")
        r = _Reader(data, "report")
        committed = r.opt_bool("committed")
        status_text = r.opt_str("status")
        if status_text is not None:
            try:
                status = WriteStatus(status_text)
            except ValueError:
                raise MalformedReport(f"report.status: unknown status {status_text!r}") from None
        else:
            status = WriteStatus.COMMITTED if committed else WriteStatus.FAILED
        lost = _lost_attempts(r)
        known = _KNOWN_KEYS
        return cls(
            table=r.text("table"),
            operation=r.text("operation"),
            profile=r.opt_str("profile") or "",
            engine=r.opt_str("engine") or "unknown",
            status=status,
            partitions=_partitions(r),
            version=r.opt_int("version"),
            snapshot_id=r.opt_int("snapshot_id"),
            rows=r.opt_int("rows"),
            seconds=r.opt_float("seconds"),
            attempts=r.opt_int("attempts") or 0,
            lost=lost,
            wasted_seconds=r.opt_float("wasted_seconds") or 0.0,
            tag={str(k): str(v) for k, v in r.opt_mapping("tag").items()},
            error=r.opt_str("error"),
            fence=r.opt_int("fence"),
            lease_lost=tuple(
                LeaseLoss(
                    attempt=e.whole("attempt"), fence=e.opt_int("fence"), reason=e.opt_str("reason") or ""
                )
                for e in r.records("lease_lost")
            ),
            committed_by=r.opt_str("committed_by"),
            observed_footprint=r.opt_mapping("observed_footprint") or None,
            footprint_exceeded=r.opt_mapping("footprint_exceeded") or None,
            engine_details={k: v for k, v in data.items() if k not in known},
            table_key=r.opt_str("table_key"),
            grant_to_start_seconds=r.opt_float("grant_to_start_seconds"),
            metadata_commit=_metadata_commit(r),
        )

    @staticmethod
    def looks_like(data: Any) -> bool:
        """Whether ``data`` claims to be a write report (it may still be malformed)."""
        return isinstance(data, Mapping) and (
            data.get("format") == REPORT_FORMAT
            or {"table", "operation", "attempts", "conflicts"} <= set(data)
        )


_KNOWN_KEYS = frozenset(
    {
        "format",
        "status",
        "table",
        "operation",
        "profile",
        "partitions",
        "engine",
        "committed",
        "version",
        "snapshot_id",
        "rows",
        "seconds",
        "attempts",
        "conflicts",
        "decisions",
        "lost_attempts",
        "wasted_seconds",
        "tag",
        "error",
        "fence",
        "lease_lost",
        "committed_by",
        "observed_footprint",
        "footprint_exceeded",
        "table_key",
        "grant_to_start_seconds",
        "metadata_commit",
    }
)


def _lost_dict(a: LostAttempt) -> dict[str, Any]:
    return {
        **a.conflict_dict(),
        **a.decision_dict(),
        "reason": a.reason,
        "decision_reason": a.decision_reason,
    }


def _lost_attempts(r: _Reader) -> tuple[LostAttempt, ...]:
    """``lost_attempts`` when present; else joined from the older ``conflicts`` + ``decisions``."""
    if r.data.get("lost_attempts") is not None:
        return tuple(
            _lost_from(
                e, e, e.opt_str("reason") or "", e.opt_str("decision_reason") or "", e.whole("attempt")
            )
            for e in r.records("lost_attempts")
        )
    # Reports written by hand or before attempts were numbered: the n-th entry is attempt n.
    conflicts = {_number(e, i): e for i, e in enumerate(r.records("conflicts"))}
    out = []
    for i, d in enumerate(r.records("decisions")):
        number = _number(d, i)
        c = conflicts.pop(number, None)
        reason = "" if c is None else c.opt_str("reason") or ""
        out.append(_lost_from(c or d, d, reason, d.opt_str("reason") or "", number))
    for number, c in conflicts.items():  # a conflict without a decision
        out.append(_lost_from(c, None, c.opt_str("reason") or "", "", number))
    return tuple(sorted(out, key=lambda a: a.attempt))


def _number(e: _Reader, index: int) -> int:
    number = e.opt_int("attempt")
    return index + 1 if number is None else number


def _lost_from(c: _Reader, d: _Reader | None, reason: str, decision_reason: str, attempt: int) -> LostAttempt:
    """One lost attempt: ``c`` holds what was lost (kind, winner, error), ``d`` the decision."""
    kind_text = c.text("kind")
    try:
        kind = ConflictKind(kind_text)
    except ValueError:
        raise MalformedReport(f"{c.where}.kind: unknown conflict kind {kind_text!r}") from None
    action = Action.DEFAULT
    if d is not None and d.opt_str("action") is not None:
        try:
            action = Action(d.text("action"))
        except ValueError:
            raise MalformedReport(f"{d.where}.action: unknown action {d.data.get('action')!r}") from None
    winner_data = c.opt_mapping("winning_commit")
    try:
        winner = (
            WinningCommit.from_dict(winner_data) if any(v is not None for v in winner_data.values()) else None
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise MalformedReport(f"{c.where}.winning_commit: {exc}") from None
    return LostAttempt(
        attempt=attempt,
        kind=kind,
        action=action,
        delay_seconds=(None if d is None else d.opt_float("delay_seconds")) or 0.0,
        reason=reason,
        decision_reason=decision_reason,
        winner=winner,
        seconds=c.opt_float("seconds"),
        error=c.opt_str("error") or "",
    )


def _metadata_commit(r: _Reader) -> MetadataCommit | None:
    """``metadata_commit``: a schema change's metadata version (reports from before it was a
    typed field carried the same mapping among the engine details, under the same key)."""
    data = r.opt_mapping("metadata_commit")
    if not data:
        return None
    m = _Reader(data, f"{r.where}.metadata_commit")
    return MetadataCommit(version=m.opt_int("version"), location=m.opt_str("location"))


def _partitions(r: _Reader) -> tuple[Mapping[str, Any], ...] | None:
    value = r.data.get("partitions")
    if value is None:
        return None
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise MalformedReport(
            f"{r.where}.partitions: a list of {{column: value}}, got {type(value).__name__}"
        )
    out = []
    for i, spec in enumerate(value):
        if not isinstance(spec, Mapping):
            raise MalformedReport(
                f"{r.where}.partitions[{i}]: a {{column: value}} mapping, got {type(spec).__name__}"
            )
        out.append(dict(spec))
    return tuple(out)


@dataclass(frozen=True)
class _Reader:
    """Typed reads of one mapping, each error naming the field."""

    data: Mapping[str, Any]
    where: str

    def _get(self, key: str, types: tuple[type, ...], what: str, optional: bool) -> Any:
        value = self.data.get(key)
        if value is None:
            if optional:
                return None
            raise MalformedReport(f"{self.where}.{key}: missing")
        if isinstance(value, bool) and bool not in types:
            raise MalformedReport(f"{self.where}.{key}: {what}, got {value!r}")
        if not isinstance(value, types):
            raise MalformedReport(
                f"{self.where}.{key}: {what}, got {type(value).__name__} {str(value)[:40]!r}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise MalformedReport(f"{self.where}.{key}: a finite number, got {value!r}")
        return value

    def text(self, key: str) -> str:
        return str(self._get(key, (str,), "text", optional=False))

    def opt_str(self, key: str) -> str | None:
        value = self._get(key, (str,), "text", optional=True)
        return None if value is None else str(value)

    def whole(self, key: str) -> int:
        return int(self._get(key, (int,), "a whole number", optional=False))

    def opt_int(self, key: str) -> int | None:
        value = self._get(key, (int,), "a whole number", optional=True)
        return None if value is None else int(value)

    def opt_float(self, key: str) -> float | None:
        value = self._get(key, (int, float), "a number", optional=True)
        return None if value is None else float(value)

    def opt_bool(self, key: str) -> bool | None:
        value = self._get(key, (bool,), "true or false", optional=True)
        return None if value is None else bool(value)

    def opt_mapping(self, key: str) -> Mapping[str, Any]:
        value = self._get(key, (Mapping,), "a mapping", optional=True)
        return {} if value is None else dict(value)

    def records(self, key: str) -> list[_Reader]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
            raise MalformedReport(f"{self.where}.{key}: a list, got {type(value).__name__}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise MalformedReport(f"{self.where}.{key}[{i}]: a mapping, got {type(item).__name__}")
            out.append(_Reader(item, f"{self.where}.{key}[{i}]"))
        return out


__all__ = ["REPORT_FORMAT", "LeaseLoss", "LostAttempt", "MalformedReport", "WriteReport", "WriteStatus"]
