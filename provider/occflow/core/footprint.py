"""What a transaction touches: the facts a commit validator compares with each newer commit."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .errors import InvalidFootprintError
from .kinds import ConflictKind
from .operations import Operation

#: A partition key: ``"ds=2024-01-01/country=NL"``; ``""`` is the single partition of an
#: unpartitioned table.
PartitionKey = str


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
            f"partitions must be a list of partition keys, not the string {values!r}"
        )
    out = frozenset(values)
    for key in out:
        if not isinstance(key, str):
            raise InvalidFootprintError(f"partition key {key!r} is not a string like 'ds=2024-01-01'")
    return out


#: A commit validator for footprint-rule profiles: given the committing transaction and one
#: newer winning commit, the kind and reason of the conflict, or ``None`` when they do not clash.
Validator = Callable[[Footprint, Footprint], "tuple[ConflictKind, str] | None"]
