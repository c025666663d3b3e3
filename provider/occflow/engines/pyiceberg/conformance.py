"""pyiceberg conformance: every ordered pair of the pyiceberg profiles' operations on real tables in
a SQL catalog on SQLite, both handles loaded at one snapshot, the earlier job committed first,
then the later one (which loses the catalog's compare-and-swap, re-reads the table and validates
against the earlier commit, as pyiceberg's commit retry does).

Runners: each isolation level pyiceberg reads (``write.update.isolation-level`` and
``write.delete.isolation-level`` set alike), on a table partitioned by identity and on one without
partitions, and on the partitioned table with the overwrite run as a dynamic partition overwrite.
Every runner is compared with its level's profile (they must all agree with it) and with Java
Iceberg's documented matrix at that level.
"""

from __future__ import annotations

import contextlib
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.operations import Operation
from ..conformance import Observation, pair_rows
from ..outcome import WriteOutcome
from .catalog import CatalogConfig
from .commit import CommitOptions
from .facts import DELETE_LEVEL, LEVELS, UPDATE_LEVEL
from .maintenance import expire_snapshots, expired_ids
from .table import ENGINE, PyIcebergTable, equals

#: The partition both jobs of a pair work on; ``other`` holds rows no job touches.
PAIR_PARTITION = "a"
OTHER_PARTITION = "b"
NAMESPACE = "conformance"
#: No wait between pyiceberg's commit retries: the race is already decided, waiting adds nothing.
_TABLE_PROPERTIES = {"commit.retry.min-wait-ms": "0"}


@dataclass(frozen=True)
class PairJobs:
    """How each canonical operation runs on partition ``a`` as one job of a pair. ``role``
    ("earlier" / "later") gives the two jobs different rows: neither writes what the other wrote."""

    table: PyIcebergTable
    dynamic_overwrite: bool = False

    def run(self, op: Operation, snapshot: Any, role: str) -> WriteOutcome:
        part = {"part": PAIR_PARTITION}
        base = 100 if role == "earlier" else 200
        commit = CommitOptions(metadata={"occflow.conformance": f"{role}:{op.value}"})
        if op is Operation.INSERT_INTO:
            return self.table.append(pair_rows(PAIR_PARTITION, [base + 1], base), snapshot=snapshot, commit=commit)
        if op is Operation.INSERT_OVERWRITE:
            data = pair_rows(PAIR_PARTITION, [base + 1, base + 2], base)
            if self.dynamic_overwrite:
                return self.table.dynamic_overwrite(data, snapshot=snapshot, commit=commit)
            return self.table.overwrite(data, where=part, snapshot=snapshot, commit=commit)
        if op is Operation.TRUNCATE:
            return self.table.truncate(where=part, snapshot=snapshot, commit=commit)
        if op is Operation.DELETE:
            # Every row of the partition but one: "id != k" matches every file's statistics, so the
            # delete reads the whole partition (as the matrix's two jobs on one partition mean) and
            # rewrites its files; a filter on a few ids would let deletes of disjoint files pass
            # (pyiceberg validates filters against file statistics: shown in the tests).
            from pyiceberg.expressions import And, NotEqualTo  # optional heavy dependency

            keep = 1 if role == "earlier" else 2
            differs: Any = NotEqualTo  # called through Any: see table.equals
            where = And(equals("part", PAIR_PARTITION), differs("id", keep))
            return self.table.delete(where, snapshot=snapshot, commit=commit)
        if op is Operation.MERGE:
            source = pair_rows(PAIR_PARTITION, [1 if role == "earlier" else 2, base + 5], base)
            return self.table.merge(source, ["id"], snapshot=snapshot, commit=commit, scope=part)
        if op is Operation.ALTER_METADATA:
            return self.table.add_columns({f"added_by_{role}": "long"}, snapshot=snapshot, commit=commit)
        if op is Operation.EXPIRE_SNAPSHOTS:
            # Every snapshot but the head the job read: a retention of 0 (refused unless said in so
            # many words) is what makes a pair of one table's fresh snapshots meet at all.
            return expire_snapshots(
                self.table, older_than_hours=0, allow_unsafe_retention=True, snapshot=snapshot, commit=commit
            )
        raise InvalidDeclarationError(f"pyiceberg conformance has no job for operation {op.value!r}")


@dataclass
class PyIcebergPairRunner:
    """Runs pairs on fresh tables of ``catalog`` at one isolation level, partitioned or not."""

    catalog: CatalogConfig
    isolation: str = "serializable"
    partitioned: bool = True
    dynamic_overwrite: bool = False
    engine: str = ENGINE
    profile: str = field(init=False)
    compare_with: tuple[str, ...] = field(init=False)
    label: str = field(init=False)
    _count: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.isolation not in LEVELS:
            raise InvalidDeclarationError(f"unknown pyiceberg isolation level {self.isolation!r}; use one of {', '.join(LEVELS)}")
        if self.dynamic_overwrite and not self.partitioned:
            raise InvalidDeclarationError("a dynamic partition overwrite needs a partitioned table")
        self.profile = f"pyiceberg-{self.isolation}"
        self.compare_with = (f"iceberg-{self.isolation}",)
        shape = "partitioned" if self.partitioned else "unpartitioned"
        self.label = f"pyiceberg {self.isolation}, {shape}" + (", dynamic overwrite" if self.dynamic_overwrite else "")

    def prepare(self, name: str) -> PyIcebergTable:
        """A fresh table: partition ``a`` in two files (rows 1-2, 3-4), partition ``b`` in one."""
        from pyiceberg.partitioning import PartitionField, PartitionSpec  # optional heavy dependency
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import LongType, NestedField, StringType

        schema = Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "part", StringType(), required=False),
            NestedField(3, "value", LongType(), required=False),
        )
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part")) if self.partitioned else PartitionSpec()
        table = PyIcebergTable(self.catalog, f"{NAMESPACE}.{name}")
        properties = {**_TABLE_PROPERTIES, UPDATE_LEVEL: self.isolation, DELETE_LEVEL: self.isolation}
        table.catalog.create_table(table.identifier, schema, partition_spec=spec, properties=properties)
        for rows in (pair_rows(PAIR_PARTITION, [1, 2], 0), pair_rows(PAIR_PARTITION, [3, 4], 0), pair_rows(OTHER_PARTITION, [1, 2], 0)):
            step = table.append(rows)
            if not step.committed:
                raise RuntimeError(f"could not prepare conformance table {table.identifier}: {step.error}")
        return table

    def run_pair(self, earlier: Operation, later: Operation) -> Observation:
        self._count += 1
        shape = ("p" if self.partitioned else "u") + ("d" if self.dynamic_overwrite else "")
        table = self.prepare(f"{self.isolation}_{shape}_{self._count:03d}_{earlier.value}_{later.value}")
        start = time.perf_counter()
        # Both jobs hold the same snapshot; the later one commits only after the earlier did.
        earlier_snapshot, later_snapshot = table.load(), table.load()
        jobs = PairJobs(table, self.dynamic_overwrite)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyiceberg warns of its commit retries and empty deletes
            first = jobs.run(earlier, earlier_snapshot, "earlier")
            if not first.committed:
                return Observation(
                    later_committed=False, earlier_committed=False,
                    earlier_error=None if first.error is None else first.error.text,
                    seconds=time.perf_counter() - start,
                )
            second = jobs.run(later, later_snapshot, "later")
        note = _expired_note(((earlier, "earlier", first), (later, "later", second)))
        if second.committed:
            return Observation(later_committed=True, seconds=time.perf_counter() - start, note=note)
        return Observation(
            later_committed=False,
            later_kind=None if second.classification is None else second.classification.kind,
            later_error=None if second.error is None else " ".join(second.error.messages),
            seconds=time.perf_counter() - start,
            note=note,
        )


def _expired_note(jobs: tuple[tuple[Operation, str, WriteOutcome], ...]) -> str:
    """What each committed expire of a pair removed: a pair whose expire removed nothing proves nothing."""
    return "; ".join(
        f"the {role} expire removed {len(expired_ids(outcome))} snapshots"
        for op, role, outcome in jobs
        if op is Operation.EXPIRE_SNAPSHOTS and outcome.committed
    )


def sqlite_catalog(root: Path) -> CatalogConfig:
    """A SQL catalog on SQLite with its warehouse under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    return CatalogConfig(
        "conformance", {"type": "sql", "uri": f"sqlite:///{root}/catalog.db", "warehouse": (root / "warehouse").as_uri()}
    )


@contextlib.contextmanager
def conformance_runners(workdir: Path) -> Iterator[list[PyIcebergPairRunner]]:
    """pyiceberg at both isolation levels, partitioned and not, and with a dynamic overwrite
    (the framework's engine entry point)."""
    root = Path(workdir) / "pyiceberg"
    catalog = sqlite_catalog(root)
    loaded = catalog.load()
    loaded.create_namespace_if_not_exists(NAMESPACE)
    try:
        yield [
            PyIcebergPairRunner(catalog, level, partitioned, dynamic)
            for level in LEVELS
            for partitioned, dynamic in ((True, False), (False, False), (True, True))
        ]
    finally:
        engine = getattr(loaded, "engine", None)
        if engine is not None:
            engine.dispose()
        shutil.rmtree(root, ignore_errors=True)


def conformance_meta() -> dict[str, str]:
    import pyiceberg  # optional heavy dependency

    return {"pyiceberg": str(pyiceberg.__version__), "catalog": "SQL catalog on SQLite"}


__all__ = [
    "OTHER_PARTITION",
    "PAIR_PARTITION",
    "PairJobs",
    "PyIcebergPairRunner",
    "conformance_meta",
    "conformance_runners",
    "sqlite_catalog",
]
