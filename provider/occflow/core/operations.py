"""Canonical write operations, and the parser for the SQL spellings users write."""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from .errors import InvalidDeclarationError, UnknownOperationError


class Operation(str, enum.Enum):
    INSERT_OVERWRITE = "insert_overwrite"
    TRUNCATE = "truncate"
    INSERT_INTO = "insert_into"
    UPDATE = "update"
    DELETE = "delete"
    MERGE = "merge"
    SMALL_FILE_MERGE = "small_file_merge"
    MINOR_COMPACT = "minor_compact"
    MAJOR_COMPACT = "major_compact"
    OPTIMIZE = "optimize"
    ALTER_METADATA = "alter_metadata"
    # Delta's REORG TABLE ... APPLY (UPGRADE ...): a protocol change, conflicts with every
    # ongoing operation (spec 004), unlike REORG ... APPLY (PURGE), which rewrites like OPTIMIZE.
    UPGRADE_PROTOCOL = "upgrade_protocol"
    # MaxCompute's clustering: reorganises the layout, no new time version (specs 001, 002).
    CLUSTERING = "clustering"
    # Table maintenance (issue 36). Delta's VACUUM deletes the files no version younger than its
    # retention references; Iceberg's expire_snapshots drops old snapshots (and the files only
    # they reference), remove_orphan_files deletes files no metadata references,
    # rewrite_manifests regroups manifests, rewrite_position_delete_files compacts delete files.
    VACUUM = "vacuum"
    EXPIRE_SNAPSHOTS = "expire_snapshots"
    REMOVE_ORPHAN_FILES = "remove_orphan_files"
    REWRITE_MANIFESTS = "rewrite_manifests"
    REWRITE_POSITION_DELETES = "rewrite_position_deletes"

    @property
    def changes_data(self) -> bool:
        """False for operations that only reorganise files (no new time version, spec 001) and
        for table maintenance (no row changes)."""
        return self not in _LAYOUT_ONLY and self not in _MAINTENANCE

    @property
    def is_maintenance(self) -> bool:
        """Table maintenance beyond compaction: VACUUM, expire snapshots, orphan files, manifests
        and delete files. It changes no row and is scheduled after data writes."""
        return self in _MAINTENANCE

    @property
    def yields_to_data_writes(self) -> bool:
        """Compactions and table maintenance: admission's queue serves them after the data
        writes waiting beside them (``leases.model.AdmissionPriorities``, the simulator's
        ``maintenance_last``), none of which changes a row."""
        return self.is_compaction or self.is_maintenance

    @property
    def deletes_unreferenced_files(self) -> bool:
        """Deletes files (or snapshots) the table's current version no longer references, older
        than a retention: a job running across it on an older snapshot can lose files it reads
        (delta-rs: "Object at location ... not found", never a conflict), so its footprint is
        the whole table and its cells keep it apart from every write (``Effect``)."""
        return self in _DELETES_UNREFERENCED

    @property
    def is_compaction(self) -> bool:
        return self in _LAYOUT_ONLY

    @property
    def reads_table(self) -> bool:
        """Read-modify-write: the job reads the target before writing (not a blind append)."""
        return self in _READ_MODIFY_WRITE

    @property
    def is_blind_append(self) -> bool:
        return self is Operation.INSERT_INTO

    @property
    def changes_table_metadata(self) -> bool:
        """A schema / property change or a protocol upgrade: one for all partitions, so its
        footprint is the whole table whatever partitions it names (a Delta write of any
        partition fails with ``metadata_changed`` / "protocol changed" across it)."""
        return self in (Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL)


_LAYOUT_ONLY = frozenset(
    {
        Operation.SMALL_FILE_MERGE,
        Operation.MINOR_COMPACT,
        Operation.MAJOR_COMPACT,
        Operation.OPTIMIZE,
        Operation.CLUSTERING,
    }
)
_MAINTENANCE = frozenset(
    {
        Operation.VACUUM,
        Operation.EXPIRE_SNAPSHOTS,
        Operation.REMOVE_ORPHAN_FILES,
        Operation.REWRITE_MANIFESTS,
        Operation.REWRITE_POSITION_DELETES,
    }
)
_DELETES_UNREFERENCED = frozenset({Operation.VACUUM, Operation.EXPIRE_SNAPSHOTS, Operation.REMOVE_ORPHAN_FILES})
_READ_MODIFY_WRITE = frozenset(
    {
        Operation.INSERT_OVERWRITE,
        Operation.TRUNCATE,
        Operation.UPDATE,
        Operation.DELETE,
        Operation.MERGE,
        Operation.SMALL_FILE_MERGE,
        Operation.MINOR_COMPACT,
        Operation.MAJOR_COMPACT,
        Operation.OPTIMIZE,
        Operation.CLUSTERING,
    }
)

# Ordered: the first pattern that matches the start of the statement wins. Word boundaries and
# free whitespace, so "insert   overwrite table t" and "INSERT INTO TABLE t" both parse.
_SQL_SPELLINGS: tuple[tuple[str, Operation], ...] = (
    (r"insert\s+overwrite\b", Operation.INSERT_OVERWRITE),
    (r"dynamic\s+insert\s+overwrite\b", Operation.INSERT_OVERWRITE),
    (r"truncate(\s+table)?\b", Operation.TRUNCATE),
    (r"insert\s+into\b", Operation.INSERT_INTO),
    (r"dynamic\s+insert\s+into\b", Operation.INSERT_INTO),
    (r"insert\b", Operation.INSERT_INTO),
    (r"append\b", Operation.INSERT_INTO),
    (r"update\b", Operation.UPDATE),
    (r"delete(\s+from)?\b", Operation.DELETE),
    (r"merge\s+into\b", Operation.MERGE),
    (r"merge\s+smallfiles\b", Operation.SMALL_FILE_MERGE),
    (r"small\s+file\s+merge\b", Operation.SMALL_FILE_MERGE),
    (r"optimize\b", Operation.OPTIMIZE),
    (r"reorg\s+table\s+\S+\s+apply\s*\(\s*upgrade\b", Operation.UPGRADE_PROTOCOL),
    (r"reorg\s+table\b", Operation.OPTIMIZE),
    (r"rewrite\s+data\s+files\b", Operation.OPTIMIZE),
    (r"call\s+[\w.`]*rewrite_data_files\b", Operation.OPTIMIZE),
    (r"cluster\s+by\b", Operation.OPTIMIZE),
    (r"vacuum\b", Operation.VACUUM),
    (r"call\s+[\w.`]*expire_snapshots\b", Operation.EXPIRE_SNAPSHOTS),
    (r"call\s+[\w.`]*remove_orphan_files\b", Operation.REMOVE_ORPHAN_FILES),
    (r"call\s+[\w.`]*rewrite_manifests\b", Operation.REWRITE_MANIFESTS),
    (r"call\s+[\w.`]*rewrite_position_delete_files\b", Operation.REWRITE_POSITION_DELETES),
    (r"(minor\s+compact(ion)?|compact\s+minor)\b", Operation.MINOR_COMPACT),
    (r"(major\s+compact(ion)?|compact\s+major)\b", Operation.MAJOR_COMPACT),
)

# ALTER TABLE has many endings; these decide what it is, anything else is a metadata change.
_ALTER_ENDINGS: tuple[tuple[str, Operation], ...] = (
    (r"\bcompact\s+minor\b", Operation.MINOR_COMPACT),
    (r"\bcompact\s+major\b", Operation.MAJOR_COMPACT),
    (r"\bmerge\s+smallfiles\b", Operation.SMALL_FILE_MERGE),
)

_ALTER_METADATA = re.compile(
    r"alter\s+table\s+\S+(\s+partition\s*\(.*?\))?\s+"
    r"(add|drop|rename|change|alter|replace|set|unset|modify)\b",
    re.IGNORECASE | re.DOTALL,
)


def known_spellings() -> list[str]:
    names = [op.value for op in Operation]
    sql = [
        "INSERT OVERWRITE",
        "TRUNCATE",
        "INSERT INTO",
        "UPDATE",
        "DELETE",
        "MERGE INTO",
        "ALTER TABLE ... MERGE SMALLFILES",
        "ALTER TABLE ... COMPACT MINOR",
        "ALTER TABLE ... COMPACT MAJOR",
        "OPTIMIZE",
        "REORG TABLE ... APPLY (PURGE)",
        "REORG TABLE ... APPLY (UPGRADE ...)",
        "CALL ...rewrite_data_files",
        "VACUUM",
        "CALL ...expire_snapshots",
        "CALL ...remove_orphan_files",
        "CALL ...rewrite_manifests",
        "CALL ...rewrite_position_delete_files",
        "ALTER TABLE ... ADD/DROP/RENAME/SET ...",
    ]
    return names + sql


def parse_operation(text: str | Operation) -> Operation:
    """An operation from its canonical name or from the SQL statement (or its leading words).

    Raises ``UnknownOperationError`` naming the known spellings.
    """
    if isinstance(text, Operation):
        return text
    if not isinstance(text, str) or not text.strip():
        raise UnknownOperationError(
            f"empty operation {text!r}; known operations: {', '.join(known_spellings())}"
        )
    stripped = _strip_sql_prefix(text)
    canonical = stripped.lower().replace("-", "_").replace(" ", "_")
    for op in Operation:
        if canonical == op.value:
            return op
    lowered = stripped.lower()
    if re.match(r"alter\s+table\b", lowered):
        for pattern, op in _ALTER_ENDINGS:
            if re.search(pattern, lowered):
                return op
        if _ALTER_METADATA.match(stripped):
            return Operation.ALTER_METADATA
    else:
        for pattern, op in _SQL_SPELLINGS:
            if re.match(pattern, lowered):
                return op
    first = " ".join(stripped.split()[:3])
    raise UnknownOperationError(
        f"unknown operation {first!r}; known operations: {', '.join(known_spellings())}"
    )


def _strip_sql_prefix(text: str) -> str:
    """Drop leading comments and CTEs' ``WITH`` so ``WITH s AS (...) MERGE INTO`` parses."""
    out = re.sub(r"^\s*(--[^\n]*\n|/\*.*?\*/\s*)*", "", text, flags=re.DOTALL).strip()
    if re.match(r"with\b", out, re.IGNORECASE):
        depth = 0
        for i, ch in enumerate(out):
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    rest = out[i + 1 :].lstrip()
                    if not rest.startswith(","):
                        return rest
    return out


# ---------------------------------------------------------------------------------------------
# Retention: how old a file or snapshot must be before maintenance may delete it.


@dataclass(frozen=True)
class RetentionFloor:
    """The engine's safe minimum for one maintenance operation's retention, with its source.

    ``parameter`` is what the user sets (``retention_hours``, ``older_than_hours``); a table's own
    setting (``table_property``) raises the floor, never lowers it below what the table says.
    """

    operation: Operation
    parameter: str
    hours: float
    table_property: str
    source: str


#: One floor per maintenance operation that deletes files (``deletes_unreferenced_files``).
RETENTION_FLOORS: Mapping[Operation, RetentionFloor] = {
    Operation.VACUUM: RetentionFloor(
        Operation.VACUUM,
        "retention_hours",
        168.0,
        "delta.deletedFileRetentionDuration",
        "Delta PROTOCOL.md and delta-rs DeltaTable.vacuum: delta.deletedFileRetentionDuration, "
        "default interval 1 week; delta-rs and delta-spark refuse less unless retention checks are off",
    ),
    Operation.EXPIRE_SNAPSHOTS: RetentionFloor(
        Operation.EXPIRE_SNAPSHOTS,
        "older_than_hours",
        120.0,
        "history.expire.max-snapshot-age-ms",
        "Iceberg TableProperties: history.expire.max-snapshot-age-ms, default 5 days; a job still "
        "running on an expired snapshot fails (a rewrite: 'Cannot determine history between ...')",
    ),
    Operation.REMOVE_ORPHAN_FILES: RetentionFloor(
        Operation.REMOVE_ORPHAN_FILES,
        "older_than_hours",
        72.0,
        "",
        "Iceberg Spark procedures (remove_orphan_files): older_than defaults to 3 days; a shorter "
        "interval deletes the files of writes still in progress and corrupts the table",
    ),
}


def check_retention(
    operation: Operation,
    hours: float | None,
    *,
    table_minimum_hours: float | None = None,
    allow_unsafe_retention: bool = False,
    where: str = "",
) -> None:
    """Refuse a retention below the engine's safe minimum (``RETENTION_FLOORS``, raised by the
    table's own setting ``table_minimum_hours``) unless ``allow_unsafe_retention=True`` says so
    in so many words; ``hours=None`` is the engine's default, always safe. The error names the
    value, the minimum and where it comes from; an operation without a floor takes no retention.
    """
    prefix = f"{where}: " if where else ""
    floor = RETENTION_FLOORS.get(operation)
    if floor is None:
        if hours is not None:
            raise InvalidDeclarationError(
                f"{prefix}{operation.value} takes no retention (given {hours!r}); only "
                f"{', '.join(op.value for op in RETENTION_FLOORS)} do"
            )
        return
    if hours is None:
        return
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours < 0:
        raise InvalidDeclarationError(
            f"{prefix}{operation.value} {floor.parameter}={hours!r}: a retention is a number of hours >= 0"
        )
    minimum = floor.hours if table_minimum_hours is None else max(floor.hours, float(table_minimum_hours))
    if hours >= minimum or allow_unsafe_retention:
        return
    by_table = (
        f" (the table's {floor.table_property})"
        if table_minimum_hours is not None and table_minimum_hours > floor.hours
        else ""
    )
    raise InvalidDeclarationError(
        f"{prefix}{operation.value} {floor.parameter}={hours:g} is below the safe minimum of "
        f"{minimum:g} hours{by_table}: files a running reader or writer still needs could be deleted "
        f"({floor.source}). Raise {floor.parameter} to at least {minimum:g}, or pass "
        "allow_unsafe_retention=True if no job can run on this table meanwhile"
    )


_RETAIN_HOURS = re.compile(r"\bretain\s+(\d+(?:\.\d+)?)\s+hours?\b", re.IGNORECASE)
_OLDER_THAN = re.compile(r"\bolder_than\s*=>\s*timestamp\s*'([^']+)'", re.IGNORECASE)


def statement_retention_hours(operation: Operation, statement: str, now: datetime) -> float | None:
    """The retention a maintenance statement asks for, in hours before ``now``: Delta's
    ``VACUUM t RETAIN n HOURS``, Iceberg's ``older_than => TIMESTAMP '...'`` (a time at or after
    ``now`` is 0 hours); ``None`` when it leaves the retention to the engine's default. A
    timestamp it cannot read is an error: the retention must not be guessed. Naive times are UTC
    (Spark's session time zone is the caller's to set)."""
    if operation is Operation.VACUUM:
        found = _RETAIN_HOURS.search(statement)
        return None if found is None else float(found.group(1))
    if operation not in RETENTION_FLOORS:
        return None
    stamp = _OLDER_THAN.search(statement)
    if stamp is None:
        return None
    try:
        when = datetime.fromisoformat(stamp.group(1).strip())
    except ValueError:
        raise InvalidDeclarationError(
            f"{operation.value}: older_than => TIMESTAMP {stamp.group(1)!r} is not a timestamp "
            "('YYYY-MM-DD HH:MM:SS')"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (now - when).total_seconds() / 3600)
