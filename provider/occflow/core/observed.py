"""What a commit really touched, and where that goes beyond what its task declared.

Admission keeps writes apart by the footprint each task *declares*. The engines decide conflicts
by what each commit *does*: the files it removed and added, and (delta-rs) the predicate it
read with. A MERGE whose condition does not name the partition reads, and may rewrite, files of
every partition (spec 004, "Avoid conflicts using partitioning and disjoint command
conditions"), so two tasks admitted side by side on "disjoint" partitions still conflict.

``ObservedFootprint`` is that commit as the engine recorded it (engines build it from the Delta
log or the Iceberg snapshot); ``excess`` compares it with the declaration, partition by
partition, with the rule admission uses (``core.footprint.specs_overlap``): an observed
partition is covered when some declared spec agrees with it on every column both name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .declaration import WriteDeclaration, partition_key
from .errors import InvalidFootprintError
from .footprint import PartitionKey, parse_partition_key, specs_overlap

#: The value Delta and Hive give a partition whose value is null.
NULL_PARTITION_VALUE = "__HIVE_DEFAULT_PARTITION__"

#: What to change when a write touched more than it declared (spec 004).
ADVICE = (
    "make the write's condition name its partition (spec 004, 'Avoid conflicts using partitioning "
    "and disjoint command conditions'): put the partition values into the MERGE ON / UPDATE / DELETE "
    "condition, e.g. \"t.user_id = s.user_id AND t.date = '2024-01-01' AND t.country = 'NL'\" instead "
    "of \"t.user_id = s.user_id AND t.date = s.date AND t.country = s.country\", so the engine reads and "
    "rewrites only that partition; or declare what the write really touches (partitions=[...] with "
    "every partition, or partitions=None for the whole table) so admission keeps it apart from the "
    "writes it conflicts with"
)


def observed_partition_key(values: Mapping[str, Any]) -> PartitionKey:
    """A partition as an engine records it (``{"ds": "1"}``, values may be null or typed) as the
    canonical key a declaration would give (``core.declaration.partition_key``)."""
    cleaned: dict[str, Any] = {}
    for column, value in values.items():
        if value is None:
            value = NULL_PARTITION_VALUE
        elif isinstance(value, str):
            # '/' separates columns in a key; Hive escapes it the same way in partition paths.
            value = value.replace("%", "%25").replace("/", "%2F")
        cleaned[column] = value
    return partition_key(cleaned)


@dataclass(frozen=True)
class ObservedFootprint:
    """One commit as the engine recorded it.

    ``partitions_added`` / ``partitions_removed`` are canonical partition keys of the files the
    commit added and removed (``""``, the one partition, on an unpartitioned table).
    ``whole_table`` says the commit read the whole table: its predicate pins no partition
    column (a Delta MERGE / UPDATE / DELETE / overwrite) or it has none.
    """

    table: str
    version_or_snapshot: int
    operation: str
    partitions_added: frozenset[PartitionKey] = frozenset()
    partitions_removed: frozenset[PartitionKey] = frozenset()
    predicate: str | None = None
    read_version: int | None = None
    blind_append: bool = False
    whole_table: bool = False

    @property
    def partitions_touched(self) -> frozenset[PartitionKey]:
        return self.partitions_added | self.partitions_removed

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version_or_snapshot": self.version_or_snapshot,
            "operation": self.operation,
            "partitions_added": sorted(self.partitions_added),
            "partitions_removed": sorted(self.partitions_removed),
            "predicate": self.predicate,
            "read_version": self.read_version,
            "blind_append": self.blind_append,
            "whole_table": self.whole_table,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ObservedFootprint:
        """The inverse of ``to_dict`` (a write report read back from XCom)."""
        try:
            return cls(
                table=str(data["table"]),
                version_or_snapshot=int(data["version_or_snapshot"]),
                operation=str(data["operation"]),
                partitions_added=frozenset(str(k) for k in data.get("partitions_added") or ()),
                partitions_removed=frozenset(str(k) for k in data.get("partitions_removed") or ()),
                predicate=None if data.get("predicate") is None else str(data["predicate"]),
                read_version=None if data.get("read_version") is None else int(data["read_version"]),
                blind_append=bool(data.get("blind_append", False)),
                whole_table=bool(data.get("whole_table", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidFootprintError(f"not an observed footprint: {dict(data)!r} ({exc})") from None


@dataclass(frozen=True)
class Excess:
    """Where a commit went beyond its declaration: partitions touched outside the declared ones,
    and whether it read the whole table although the declaration said it did not."""

    table: str
    operation: str
    declared: tuple[PartitionKey, ...]
    partitions: frozenset[PartitionKey]
    read_whole_table: bool
    advice: str = ADVICE

    def describe(self) -> str:
        what = []
        if self.partitions:
            what.append(f"touched partition(s) {', '.join(sorted(self.partitions))}")
        if self.read_whole_table:
            what.append("read the whole table (its condition names no partition column)")
        return (
            f"{self.operation} on {self.table} declared partition(s) {', '.join(self.declared)} but "
            f"{' and '.join(what)}: writes admitted beside it as disjoint can conflict with it"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "operation": self.operation,
            "declared": list(self.declared),
            "partitions": sorted(self.partitions),
            "read_whole_table": self.read_whole_table,
            "message": self.describe(),
            "advice": self.advice,
        }


def uncovered(declared: Iterable[PartitionKey], observed: Iterable[PartitionKey]) -> frozenset[PartitionKey]:
    """The observed keys no declared key covers; ``""`` (an unpartitioned table's one partition)
    is covered by anything, since there is nothing finer to declare."""
    specs = [parse_partition_key(k) for k in declared]
    out = set()
    for key in observed:
        if key == "":
            continue
        spec = parse_partition_key(key)
        if not any(specs_overlap(spec, d) for d in specs):
            out.add(key)
    return frozenset(out)


def excess(declared: WriteDeclaration, observed: ObservedFootprint) -> Excess | None:
    """What ``observed`` touched beyond ``declared``, or ``None`` when the declaration covers it.

    A declaration of the whole table (no partitions) covers everything.
    """
    keys = declared.partition_keys()
    if keys is None:
        return None
    outside = uncovered(keys, observed.partitions_touched)
    read_all = observed.whole_table and not declared.reads_whole_table and not observed.blind_append
    if not outside and not read_all:
        return None
    return Excess(
        table=declared.table,
        operation=declared.operation.value,
        declared=tuple(sorted(keys)),
        partitions=outside,
        read_whole_table=read_all,
    )
