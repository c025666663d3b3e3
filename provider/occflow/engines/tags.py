"""Commit tags: every commit occflow makes names the logical write it belongs to.

A logical write is one task instance's write: DAG, task, map index and DAG run. Its
``write_id`` is a hash of exactly those four, so every try and every in-task attempt of the
task carries the same id, and a retry can ask the table "did this write already land?".

The tag goes on the commit with each table format's own mechanism, encoded in the engine's
folder (engines never import each other, so each owns its encoding):

- delta-rs: a Delta ``txn`` action (``app_transactions``: app id ``occflow-<write id>``,
  version 1) plus the tag in the commit info (``custom_metadata``): ``deltars.deltars_commit``;
- delta-spark: the ``txnAppId`` / ``txnVersion`` writer options (or their session confs
  ``spark.databricks.delta.write.txnAppId`` / ``txnVersion`` for SQL) plus
  ``spark.databricks.delta.commitInfo.userMetadata``: ``spark.delta_spark``;
- Iceberg on Spark: snapshot summary properties (``snapshot-property.*`` writer options for
  DataFrame writes; Iceberg's ``CommitMetadata`` commit properties for SQL): ``spark.iceberg``;
- MaxCompute: job hints (settings) on the SQL instance: ``maxcompute.maxcompute_hints``.

The logical date travels in the tag too: before an overwrite, occflow looks for a newer
logical date's overwrite of the same partition (``ledger.newer_overwrite``). So do the try that
made the commit and the fencing token of its lease: they say who wrote it, not which write it
is, so they are not part of the write id and do not make two tags differ.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.errors import InvalidDeclarationError
from ..core.kinds import WinningCommit
from ..core.operations import Operation, parse_operation

PREFIX = "occflow."
#: The property every tagged commit carries; the other keys describe the write.
WRITE_ID = PREFIX + "write-id"
KEYS = {
    "write_id": WRITE_ID,
    "dag_id": PREFIX + "dag-id",
    "task_id": PREFIX + "task-id",
    "map_index": PREFIX + "map-index",
    "run_id": PREFIX + "run-id",
    "logical_date": PREFIX + "logical-date",
    "operation": PREFIX + "write-operation",
    "partitions": PREFIX + "write-partitions",
    "try_number": PREFIX + "try-number",
    "fence": PREFIX + "fence",
}
#: The fencing token of the lease the commit was made under (docs/admission.md).
FENCE = KEYS["fence"]
#: A logical write commits once, so its Delta ``txn`` version is always 1: "this write is done"
#: (shared by delta-rs and delta-spark, which cannot import each other).
APP_VERSION = 1

Partition = tuple[tuple[str, str], ...]


def write_id_of(dag_id: str, task_id: str, map_index: int, run_id: str) -> str:
    """The id of a logical write: stable across tries (no try number in it), 32 hex digits."""
    for name, value in (("dag_id", dag_id), ("task_id", task_id), ("run_id", run_id)):
        if not isinstance(value, str) or not value:
            raise InvalidDeclarationError(f"a commit tag needs a non-empty {name}, got {value!r}")
    if isinstance(map_index, bool) or not isinstance(map_index, int):
        raise InvalidDeclarationError(f"map_index must be an integer (-1 when not mapped), got {map_index!r}")
    text = json.dumps([dag_id, task_id, map_index, run_id], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _partitions(value: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None) -> tuple[Partition, ...] | None:
    """Partition specs as sorted ``(column, text)`` pairs, so equal specs compare equal."""
    if value is None:
        return None
    specs = [value] if isinstance(value, Mapping) else list(value)
    out = []
    for spec in specs:
        if not isinstance(spec, Mapping) or not spec:
            raise InvalidDeclarationError(f"a partition spec is a non-empty mapping column -> value, got {spec!r}")
        out.append(tuple(sorted((str(k), _text(v)) for k, v in spec.items())))
    return tuple(sorted(out))


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, (dt.date, dt.datetime)) else str(value)


def _int(text: Any) -> int | None:
    return None if text is None else int(text)


def _date(text: str | None) -> dt.datetime | None:
    if text is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InvalidDeclarationError(f"logical date {text!r} is not an ISO 8601 date-time") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.timezone.utc)


@dataclass(frozen=True)
class CommitTag:
    """Which logical write a commit belongs to. ``partitions=None`` means the whole table."""

    dag_id: str
    task_id: str
    run_id: str
    operation: Operation
    map_index: int = -1
    logical_date: str | None = None
    partitions: tuple[Partition, ...] | None = None
    #: Who made the commit (not which write it is): the Airflow try and its lease's fence.
    try_number: int | None = field(default=None, compare=False)
    fence: int | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        write_id_of(self.dag_id, self.task_id, self.map_index, self.run_id)  # validates
        if not isinstance(self.operation, Operation):
            object.__setattr__(self, "operation", parse_operation(str(self.operation)))
        if isinstance(self.logical_date, (dt.date, dt.datetime)):
            object.__setattr__(self, "logical_date", _text(self.logical_date))
        _date(self.logical_date)
        if self.partitions is not None and not (
            isinstance(self.partitions, tuple) and all(isinstance(p, tuple) for p in self.partitions)
        ):
            object.__setattr__(self, "partitions", _partitions(self.partitions))  # type: ignore[arg-type]

    @classmethod
    def create(
        cls,
        dag_id: str,
        task_id: str,
        run_id: str,
        operation: Operation | str,
        *,
        map_index: int = -1,
        logical_date: dt.datetime | str | None = None,
        partitions: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        try_number: int | None = None,
        fence: int | None = None,
    ) -> CommitTag:
        op = operation if isinstance(operation, Operation) else parse_operation(operation)
        date = _text(logical_date) if isinstance(logical_date, (dt.date, dt.datetime)) else logical_date
        return cls(dag_id, task_id, run_id, op, map_index, date, _partitions(partitions), try_number, fence)

    @property
    def write_id(self) -> str:
        return write_id_of(self.dag_id, self.task_id, self.map_index, self.run_id)

    @property
    def app_id(self) -> str:
        """The Delta ``txn`` application id of this write."""
        return "occflow-" + self.write_id

    @property
    def logical_datetime(self) -> dt.datetime | None:
        return _date(self.logical_date)

    @property
    def is_overwrite(self) -> bool:
        return self.operation in (Operation.INSERT_OVERWRITE, Operation.TRUNCATE)

    def overlaps(self, other: CommitTag) -> bool:
        """Whether the two writes touch a common partition (``None`` = the whole table)."""
        if self.partitions is None or other.partitions is None:
            return True
        return bool(set(self.partitions) & set(other.partitions))

    def is_later_than(self, other: CommitTag) -> bool:
        mine, theirs = self.logical_datetime, other.logical_datetime
        return mine is not None and theirs is not None and mine > theirs

    # -- the tag as commit properties --------------------------------------------------------

    def properties(self) -> dict[str, str]:
        """The tag as string properties (commit info, snapshot summary, job hints)."""
        out = {
            KEYS["write_id"]: self.write_id,
            KEYS["dag_id"]: self.dag_id,
            KEYS["task_id"]: self.task_id,
            KEYS["map_index"]: str(self.map_index),
            KEYS["run_id"]: self.run_id,
            KEYS["operation"]: self.operation.value,
        }
        if self.logical_date is not None:
            out[KEYS["logical_date"]] = self.logical_date
        if self.partitions is not None:
            out[KEYS["partitions"]] = json.dumps([dict(p) for p in self.partitions], sort_keys=True)
        if self.try_number is not None:
            out[KEYS["try_number"]] = str(self.try_number)
        if self.fence is not None:
            out[KEYS["fence"]] = str(self.fence)
        return out

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> CommitTag | None:
        """The tag a commit carries, or ``None`` for a commit occflow did not tag."""
        if not props.get(WRITE_ID):
            return None
        try:
            raw_parts = props.get(KEYS["partitions"])
            parts = None if raw_parts is None else _partitions(json.loads(str(raw_parts)))
            tag = cls(
                dag_id=str(props[KEYS["dag_id"]]),
                task_id=str(props[KEYS["task_id"]]),
                run_id=str(props[KEYS["run_id"]]),
                operation=parse_operation(str(props[KEYS["operation"]])),
                map_index=int(props[KEYS["map_index"]]),
                logical_date=None if props.get(KEYS["logical_date"]) is None else str(props[KEYS["logical_date"]]),
                partitions=parts,
                try_number=_int(props.get(KEYS["try_number"])),
                fence=_int(props.get(KEYS["fence"])),
            )
        except (KeyError, ValueError, InvalidDeclarationError) as exc:
            raise InvalidDeclarationError(f"a commit carries a malformed occflow tag {dict(props)!r}: {exc}") from exc
        if tag.write_id != str(props[WRITE_ID]):
            raise InvalidDeclarationError(
                f"a commit's occflow tag does not hash to its write id {props[WRITE_ID]!r}: {dict(props)!r}"
            )
        return tag

    def describe(self) -> str:
        where = "whole table" if self.partitions is None else ", ".join(
            "/".join(f"{k}={v}" for k, v in p) for p in self.partitions
        )
        return (
            f"{self.operation.value} by {self.dag_id}.{self.task_id}"
            f"{'' if self.map_index < 0 else f'[{self.map_index}]'} run {self.run_id}"
            f" (logical date {self.logical_date or 'none'}; {where})"
        )


def with_writer(winner: WinningCommit, props: Mapping[str, Any]) -> WinningCommit:
    """``winner`` with the Airflow try that made it, read from the commit's properties (commit
    info, snapshot summary, user metadata) when they carry occflow's tag.

    A malformed tag names no writer: the winner stays untagged, with the reason in its ``tag``.
    """
    try:
        tag = CommitTag.from_properties(props)
    except InvalidDeclarationError as exc:
        return replace(winner, tag={**winner.tag, "occflow_tag": f"malformed: {exc}"})
    if tag is None:
        return winner
    return replace(
        winner,
        dag_id=tag.dag_id,
        task_id=tag.task_id,
        run_id=tag.run_id,
        try_number=tag.try_number,
        tagged=True,
        tag={**winner.tag, WRITE_ID: tag.write_id},
    )
