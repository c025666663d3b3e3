"""What a transaction touches: the facts a commit validator compares with each newer commit."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .errors import InvalidFootprintError
from .identifiers import shown
from .kinds import ConflictKind
from .operations import Operation
from .ranges import ValueRange, parse_key_parts, values_overlap

#: A partition key: ``"ds=2024-01-01/country=NL"``; ``""`` is the single partition of an
#: unpartitioned table.
PartitionKey = str

V = TypeVar("V")


@dataclass(frozen=True, order=True)
class FileRef:
    path: str
    partition: PartitionKey = ""


@dataclass(frozen=True)
class Footprint:
    """One transaction's reads and writes.

    ``read_partitions`` is ``None`` when the transaction read the whole table (a MERGE whose
    condition names no partition) and empty when it read nothing (a blind append).
    """

    operation: Operation
    read_partitions: frozenset[PartitionKey] | None = frozenset()
    write_partitions: frozenset[PartitionKey] | None = frozenset()
    files_read: frozenset[FileRef] = frozenset()
    files_removed: frozenset[FileRef] = frozenset()
    files_added: frozenset[FileRef] = frozenset()
    data_change: bool = True
    blind_append: bool = False
    metadata_change: bool = False
    protocol_change: bool = False
    app_id: str | None = None
    app_version: int | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def read_whole_table(self) -> bool:
        return self.read_partitions is None

    def touched_partitions(self) -> frozenset[PartitionKey] | None:
        """Partitions read or written; ``None`` means the whole table."""
        if self.read_partitions is None or self.write_partitions is None:
            return None
        return self.read_partitions | self.write_partitions

    def overlaps(self, other: Footprint) -> bool:
        """Whether two footprints share a partition (or either covers the whole table)."""
        if self.metadata_change or other.metadata_change:
            return True
        mine, theirs = self.touched_partitions(), other.touched_partitions()
        if mine is None or theirs is None:
            return True
        return bool(mine & theirs)


def partitions(values: Iterable[PartitionKey] | None) -> frozenset[PartitionKey] | None:
    """Validate and freeze a set of partition keys (``None`` = whole table)."""
    if values is None:
        return None
    if isinstance(values, str):
        raise InvalidFootprintError(
            f"partitions must be a list of partition keys, not the string {shown(values)}"
        )
    out = frozenset(values)
    for key in out:
        if not isinstance(key, str):
            raise InvalidFootprintError(f"partition key {shown(key)} is not a string like 'ds=2024-01-01'")
    return out


def parse_partition_key(key: PartitionKey) -> dict[str, str | ValueRange]:
    """``"ds=2024-01-01/country=NL"`` -> ``{"ds": "2024-01-01", "country": "NL"}``; a range's
    parts, ``"ds>=2024-01-01/ds<2024-02-01"``, -> ``{"ds": ValueRange(...)}`` (``core.ranges``)."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidFootprintError(f"a partition key is a non-empty string like 'ds=2024-01-01', got {shown(key)}")
    return parse_key_parts(key, key.split("/"))


def specs_overlap(a: Mapping[str, V], b: Mapping[str, V], same: Callable[[V, V], bool] = values_overlap) -> bool:
    """Two partition specs may hold the same rows unless they disagree on a column both constrain.

    ``ds=1`` overlaps ``ds=1/country=NL`` and ``country=NL``; ``ds=1`` and ``ds=2`` do not; a
    value and a range disagree when the value is outside the range, two ranges when they share
    no value (``core.ranges.values_overlap``).
    ``same`` says whether two values may name one partition (the DAG linter lets a Jinja
    template match any value).
    """
    return all(same(a[c], b[c]) for c in a.keys() & b.keys())


def overlapping_specs(
    a: Iterable[Mapping[str, V]], b: Sequence[Mapping[str, V]], same: Callable[[V, V], bool] = values_overlap
) -> tuple[Mapping[str, V], Mapping[str, V]] | None:
    """The first pair of specs, one from each footprint, that may hold the same rows."""
    for x in a:
        for y in b:
            if specs_overlap(x, y, same):
                return x, y
    return None


def footprints_overlap(a: frozenset[PartitionKey] | None, b: frozenset[PartitionKey] | None) -> bool:
    """Whether two footprints of one table (partition keys; ``None`` = the whole table) overlap.

    They overlap unless they disagree on a column both constrain (a value outside a range, two
    ranges that share no value); the whole table overlaps everything. Admission and the DAG linter both decide overlap by this rule.
    """
    if a is None or b is None:
        return True
    if a & b:
        return True  # a shared key: no need to parse
    specs_b = [parse_partition_key(k) for k in b]
    return overlapping_specs((parse_partition_key(k) for k in a), specs_b) is not None


#: A commit validator for footprint-rule profiles: given the committing transaction and one
#: newer winning commit, the kind and reason of the conflict, or ``None`` when they do not clash.
Validator = Callable[[Footprint, Footprint], "tuple[ConflictKind, str] | None"]
