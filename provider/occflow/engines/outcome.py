"""The one outcome type every engine returns, its typed parts (what the write flow branches on),
and its JSON form (the spark-submit channel; a dict from before the typed parts loads too)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..core.causes import explicit_chain
from ..core.kinds import Classification, ConflictKind, WinningCommit

# A schema change's commit is core's type (the report names it too); engines import it from here.
from ..core.kinds import MetadataCommit as MetadataCommit
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
class FoundInTable:
    """The write's commit was in the table already (exactly-once): this attempt wrote nothing.

    ``reason`` says how it was found ("already committed by an earlier attempt", "found right
    before this attempt's commit", ...); ``by`` names the try whose commit it is (``try 2``)."""

    reason: str
    by: str | None = None


@dataclass(frozen=True)
class LeaseRefusal:
    """Nothing was committed: the write's lease was not certainly live where the commit was
    checked (a spark-submit driver checks it in its own process). ``at`` says where the check
    refused (``spark.submit_fence.AT_COMMIT`` / ``AT_STATEMENT_START``)."""

    reason: str
    at: str | None = None
    fence: int | None = None


class MalformedOutcome(ValueError):
    """A ``WriteOutcome`` dict (a spark-submit driver's outcome file) that cannot be read back:
    the message names the field that is wrong."""


#: The tag keys the typed fields were carried in before they existed. Still written beside the
#: typed fields (readers of older reports look them up), lifted back into the typed fields when
#: an old dict is read (``WriteOutcome.from_dict``); nothing decides on them.
LEGACY_FOUND = "exactly_once"
LEGACY_COMMITTED_BY = "committed_by"
LEGACY_LEASE_NOT_LIVE = "lease_not_live"
LEGACY_LEASE_REFUSED_AT = "lease_refused_at"
LEGACY_FENCE = "fence"


@dataclass(frozen=True)
class WriteOutcome:
    """What one attempt of a write did on its engine: committed (what it committed) or not (the
    engine's error and its classification).

    What the write flow branches on is a typed field, set by the engine's target: ``found``
    (the write was in the table already), ``lease_refused`` (nothing committed, the lease was
    not live), ``metadata_commit`` (a schema change's new metadata version), ``damage``. ``tag``
    is free-form payload (the commit's own labels, as text): nothing decides on its keys, nor
    reads values back from them (``engine_details`` holds them typed).
    """

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
    #: The write was in the table already: settled as committed, by the try ``found.by`` names.
    found: FoundInTable | None = None
    #: Not committed because the lease was not live where the commit was checked.
    lease_refused: LeaseRefusal | None = None
    #: The metadata version a schema change committed (Iceberg writes no snapshot for it).
    metadata_commit: MetadataCommit | None = None
    #: What the engine says about the attempt beyond its version, as JSON values of their own
    #: types (a number as a number, a flag as a boolean), set where the engine reports them
    #: (MaxCompute: the instance, its time version, whether it was reconnected to): the
    #: engine's target puts them in the report. Never parsed back from ``tag`` strings.
    engine_details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.found is not None and not self.committed:
            raise ValueError("an outcome found in the table is committed (found= with committed=False)")
        if self.lease_refused is not None and self.committed:
            raise ValueError("an outcome refused for its lease committed nothing (lease_refused= with committed=True)")

    # ------------------------------------------------------------------ constructors

    @classmethod
    def already_committed(
        cls,
        engine: str,
        table: str,
        operation: Operation,
        reason: str,
        *,
        by: str | None = None,
        version: int | None = None,
        snapshot_id: int | None = None,
        tag: Mapping[str, str] | None = None,
    ) -> WriteOutcome:
        """The write's commit is in the table already (exactly-once): settled, nothing written."""
        payload = {**(tag or {}), LEGACY_FOUND: reason}
        if by is not None:
            payload[LEGACY_COMMITTED_BY] = by
        return cls(
            engine=engine, table=table, operation=operation, committed=True, seconds=0.0,
            version=version, snapshot_id=snapshot_id, tag=payload, found=FoundInTable(reason, by),
        )

    @classmethod
    def refused_by_lease(
        cls,
        engine: str,
        table: str,
        operation: Operation,
        seconds: float,
        reason: str,
        *,
        at: str | None = None,
        fence: int | None = None,
    ) -> WriteOutcome:
        """Nothing committed: the lease was not certainly live at the check ``at``."""
        payload = {LEGACY_LEASE_NOT_LIVE: reason, LEGACY_FENCE: str(fence)}
        if at is not None:
            payload[LEGACY_LEASE_REFUSED_AT] = at
        return cls(
            engine=engine, table=table, operation=operation, committed=False, seconds=seconds,
            tag=payload, lease_refused=LeaseRefusal(reason, at, fence),
        )

    # ------------------------------------------------------------------ what it did

    @property
    def changed_nothing(self) -> bool:
        """Committed without a new version of the table: the engine had nothing to change (a
        DELETE that matched no row). A schema change is a new version (``metadata_commit``);
        a write found in the table is settled, not "nothing"."""
        return (
            self.committed
            and self.found is None
            and self.version is None
            and self.snapshot_id is None
            and self.metadata_commit is None
        )

    def with_winner(self, winner: WinningCommit | None) -> WriteOutcome:
        """This outcome with ``winner`` as its classification's winning commit (a lost write
        whose winner was found in the table's history); unchanged when there is none."""
        if winner is None or self.classification is None:
            return self
        return replace(self, classification=replace(self.classification, winning_commit=winner))

    # ------------------------------------------------------------------ JSON (the spark-submit channel)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = asdict(self)
        data["operation"] = self.operation.value
        data["engine_details"] = dict(self.engine_details)
        data["classification"] = None if self.classification is None else self.classification.to_dict()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> WriteOutcome:
        """The outcome in ``data`` (a ``to_dict`` value); a dict written before the typed fields
        existed loads too, its tag keys lifted into them. ``MalformedOutcome`` names what is wrong."""
        if not isinstance(data, Mapping):
            raise MalformedOutcome(f"a write outcome is a mapping, got {type(data).__name__}")
        tag = {str(k): str(v) for k, v in _mapping(data, "tag").items()}
        committed = data.get("committed")
        if not isinstance(committed, bool):
            raise MalformedOutcome(f"outcome.committed must be true or false, got {committed!r}")
        operation = _text(data, "operation")
        try:
            op = Operation(operation)
        except ValueError:
            raise MalformedOutcome(f"outcome.operation: unknown operation {operation!r}") from None
        seconds = data.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise MalformedOutcome(f"outcome.seconds must be a number, got {seconds!r}")
        found = _found(data, tag) if committed else None
        refused = None if committed else _lease_refused(data, tag)
        meta = _mapping(data, "metadata_commit")
        return cls(
            engine=_text(data, "engine"),
            table=_text(data, "table"),
            operation=op,
            committed=committed,
            seconds=float(seconds),
            version=_int(data, "version"),
            snapshot_id=_int(data, "snapshot_id"),
            rows=_int(data, "rows"),
            error=_error(data),
            classification=_classification(data),
            tag=tag,
            damage=_opt_text(data, "damage"),
            found=found,
            lease_refused=refused,
            metadata_commit=None if not meta else MetadataCommit(
                version=_int(meta, "version", "outcome.metadata_commit"),
                location=_opt_text(meta, "location", "outcome.metadata_commit"),
            ),
            engine_details=dict(_mapping(data, "engine_details")),
        )


def _text(data: Mapping[str, Any], key: str, where: str = "outcome") -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedOutcome(f"{where}.{key} must be a non-empty string, got {value!r}")
    return value


def _opt_text(data: Mapping[str, Any], key: str, where: str = "outcome") -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise MalformedOutcome(f"{where}.{key} must be a string or null, got {value!r}")
    return value


def _int(data: Mapping[str, Any], key: str, where: str = "outcome") -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedOutcome(f"{where}.{key} must be an integer or null, got {value!r}")
    return value


def _mapping(data: Mapping[str, Any], key: str, where: str = "outcome") -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise MalformedOutcome(f"{where}.{key} must be a mapping or null, got {type(value).__name__}")
    return value


def _found(data: Mapping[str, Any], tag: Mapping[str, str]) -> FoundInTable | None:
    typed = _mapping(data, "found")
    if typed:
        return FoundInTable(_text(typed, "reason", "outcome.found"), _opt_text(typed, "by", "outcome.found"))
    if "found" in data or LEGACY_FOUND not in tag:
        return None  # written with the typed field, which is empty: the tag key is payload only
    return FoundInTable(tag[LEGACY_FOUND], tag.get(LEGACY_COMMITTED_BY))


def _lease_refused(data: Mapping[str, Any], tag: Mapping[str, str]) -> LeaseRefusal | None:
    typed = _mapping(data, "lease_refused")
    if typed:
        return LeaseRefusal(
            _text(typed, "reason", "outcome.lease_refused"),
            _opt_text(typed, "at", "outcome.lease_refused"),
            _int(typed, "fence", "outcome.lease_refused"),
        )
    if "lease_refused" in data or not tag.get(LEGACY_LEASE_NOT_LIVE):
        return None
    fence = tag.get(LEGACY_FENCE, "")
    return LeaseRefusal(
        tag[LEGACY_LEASE_NOT_LIVE],
        tag.get(LEGACY_LEASE_REFUSED_AT) or None,
        int(fence) if fence.lstrip("-").isdigit() else None,  # old drivers wrote str(None) without a lease
    )


def _error(data: Mapping[str, Any]) -> ErrorInfo | None:
    err = _mapping(data, "error")
    if not err:
        return None
    messages = err.get("messages") or ()
    causes = err.get("cause_classes") or ()
    if not isinstance(messages, (list, tuple)) or not isinstance(causes, (list, tuple)):
        raise MalformedOutcome("outcome.error.messages and .cause_classes must be lists of strings")
    return ErrorInfo(
        exception_class=_text(err, "exception_class", "outcome.error"),
        messages=tuple(str(m) for m in messages),
        error_class=_opt_text(err, "error_class", "outcome.error"),
        cause_classes=tuple(str(c) for c in causes),
    )


def _classification(data: Mapping[str, Any]) -> Classification | None:
    cls = _mapping(data, "classification")
    if not cls:
        return None
    kind = _text(cls, "kind", "outcome.classification")
    try:
        conflict = ConflictKind(kind)
    except ValueError:
        raise MalformedOutcome(f"outcome.classification.kind: unknown conflict kind {kind!r}") from None
    wc = _mapping(cls, "winning_commit", "outcome.classification")
    return Classification(
        kind=conflict,
        engine=_opt_text(cls, "engine", "outcome.classification") or "",
        reason=_opt_text(cls, "reason", "outcome.classification") or "",
        winning_commit=None if not wc else WinningCommit.from_dict(wc),
        exception_class=_opt_text(cls, "exception_class", "outcome.classification"),
        error_class=_opt_text(cls, "error_class", "outcome.classification"),
    )
