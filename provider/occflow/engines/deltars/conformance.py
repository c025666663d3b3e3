"""delta-rs conformance: every ordered pair of the Delta profiles' operations on one partition of
a fresh real table, the later job planned on the earlier job's snapshot and committed after it.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.errors import InvalidDeclarationError
from ...core.operations import Operation
from ..conformance import Observation, pair_rows
from ..outcome import WriteOutcome
from .commit import CommitOptions
from .predicates import Compare, Where
from .table import ENGINE, DeltaRsTable
from .target import vacuum

if TYPE_CHECKING:
    from deltalake import DeltaTable


#: The partition both jobs of a pair work on; ``other`` holds rows no job touches.
PAIR_PARTITION = "a"
OTHER_PARTITION = "b"

_ISOLATION = {
    "WriteSerializable": ("delta-rs", ("delta-write-serializable",)),
    "Serializable": ("delta-rs", ("delta-serializable",)),
}


@dataclass(frozen=True)
class PairJobs:
    """How each canonical operation is run on partition ``a`` by one job of a pair.

    ``role`` ("earlier" / "later") gives the two jobs different rows, so neither writes what the
    other wrote; both stay inside the partition.
    """

    table: DeltaRsTable

    def run(self, op: Operation, snapshot: DeltaTable, role: str) -> WriteOutcome:
        part = {"part": PAIR_PARTITION}
        base = 100 if role == "earlier" else 200
        commit = CommitOptions(metadata={"occflow.conformance": f"{role}:{op.value}"})
        if op is Operation.INSERT_INTO:
            return self.table.append(pair_rows(PAIR_PARTITION, [base + 1], base), snapshot=snapshot, commit=commit)
        if op is Operation.INSERT_OVERWRITE:
            return self.table.overwrite(
                pair_rows(PAIR_PARTITION, [base + 1, base + 2], base), partition=part, snapshot=snapshot, commit=commit
            )
        if op is Operation.TRUNCATE:
            return self.table.truncate(partition=part, snapshot=snapshot, commit=commit)
        # Row-level jobs read the whole partition, as the matrix's "two jobs on one partition"
        # means: delta-rs matches its read predicate against file statistics, so a predicate
        # on a few ids would let jobs on disjoint files pass (shown separately in the tests).
        if op is Operation.UPDATE:
            return self.table.update(set_values={"value": base}, partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.DELETE:
            # "id != k" cannot be pruned by statistics: every file of the partition is read
            keep = 1 if role == "earlier" else 2
            return self.table.delete(Where((Compare("id", "!=", keep),)), partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.MERGE:
            source = pair_rows(PAIR_PARTITION, [1 if role == "earlier" else 2, base + 5], base)
            return self.table.merge(source, ["id"], partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.OPTIMIZE:
            return self.table.optimize(partition=part, snapshot=snapshot, commit=commit)
        if op is Operation.ALTER_METADATA:
            return self.table.set_properties(
                {f"occflow.conformance.{role}": "1"}, snapshot=snapshot, commit=commit
            )
        if op is Operation.VACUUM:
            # RETAIN 0 HOURS, the form users run into trouble with (allowed here in so many
            # words): it deletes the file the prepared tombstone in partition b left behind
            return vacuum(
                self.table, retention_hours=0, allow_unsafe_retention=True, snapshot=snapshot, commit=commit
            )
        raise InvalidDeclarationError(f"delta-rs conformance has no job for operation {op.value!r}")


@dataclass
class DeltaRsPairRunner:
    """Runs pairs on fresh delta-rs tables under ``workdir`` at one ``delta.isolationLevel``."""

    workdir: Path
    isolation: str = "WriteSerializable"
    engine: str = ENGINE
    profile: str = field(init=False)
    compare_with: tuple[str, ...] = field(init=False)
    label: str = field(init=False)
    _count: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.label = f"delta-rs {self.isolation}"
        try:
            self.profile, self.compare_with = _ISOLATION[self.isolation]
        except KeyError:
            raise InvalidDeclarationError(
                f"unknown delta.isolationLevel {self.isolation!r}; use one of {', '.join(_ISOLATION)}"
            ) from None

    def prepare(self, name: str, tombstone: bool = False) -> DeltaRsTable:
        """A fresh table: partition ``a`` in two files (rows 1-2, 3-4), partition ``b`` in one;
        ``tombstone``: ``b`` overwritten once more, so a VACUUM has a removed file to delete."""
        path = self.workdir / name
        if path.exists():
            shutil.rmtree(path)
        table = DeltaRsTable(path)
        steps = [
            table.create(
                pair_rows(PAIR_PARTITION, [1, 2], 0),
                partition_by=["part"],
                configuration={"delta.isolationLevel": self.isolation},
            ),
            table.append(pair_rows(PAIR_PARTITION, [3, 4], 0)),
            table.append(pair_rows(OTHER_PARTITION, [1, 2], 0)),
        ]
        if tombstone:
            steps.append(
                table.overwrite(pair_rows(OTHER_PARTITION, [1, 2], 1), partition={"part": OTHER_PARTITION})
            )
        for step in steps:
            if not step.committed:
                raise RuntimeError(f"could not prepare conformance table {path}: {step.error}")
        return table

    def run_pair(self, earlier: Operation, later: Operation) -> Observation:
        self._count += 1
        table = self.prepare(
            f"{self.isolation.lower()}-{self._count:03d}-{earlier.value}-{later.value}",
            tombstone=Operation.VACUUM in (earlier, later),
        )
        start = time.perf_counter()
        read_version = table.version()
        # Both jobs hold the same snapshot; the later one plans on it only after the earlier
        # committed, so delta-rs must check it against the winning commit.
        earlier_snapshot = table.load(read_version)
        later_snapshot = table.load(read_version)
        jobs = PairJobs(table)
        first = jobs.run(earlier, earlier_snapshot, "earlier")
        if not first.committed:
            return Observation(
                later_committed=False,
                earlier_committed=False,
                earlier_error=None if first.error is None else first.error.text,
                seconds=time.perf_counter() - start,
            )
        second = jobs.run(later, later_snapshot, "later")
        note = f"read version {read_version}; earlier committed {first.version}"
        if second.committed:
            note += f", later committed {second.version}"
            unreadable = _unreadable(table)
            if unreadable:
                note += f"; THE LATEST VERSION IS UNREADABLE: {unreadable}"
                return Observation(later_committed=True, seconds=time.perf_counter() - start, note=note)
            duplicated = _duplicated_ids(table)
            if duplicated:
                note += f"; DUPLICATED ROWS in partition {PAIR_PARTITION}: ids {duplicated}"
            return Observation(later_committed=True, seconds=time.perf_counter() - start, note=note)
        kind = None if second.classification is None else second.classification.kind
        return Observation(
            later_committed=False,
            later_kind=kind,
            later_error=None if second.error is None else " ".join(second.error.messages),
            seconds=time.perf_counter() - start,
            note=note,
        )


def _unreadable(table: DeltaRsTable) -> str:
    """Why the table's latest version cannot be read whole (a VACUUM deleted a file it names),
    or "" when it can."""
    try:
        table.load().to_pyarrow_table()
    except Exception as exc:  # noqa: BLE001 - delta-rs raises several types for a missing file
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return ""


def _duplicated_ids(table: DeltaRsTable) -> list[int]:
    """Ids that appear more than once in the pair's partition: no job here writes an id twice."""
    import pyarrow.compute as pc  # optional heavy dependency

    data = table.load().to_pyarrow_table(columns=["id", "part"])
    ids = data.filter(pc.equal(data["part"], PAIR_PARTITION))["id"].to_pylist()
    return sorted({i for i in ids if ids.count(i) > 1})


@contextlib.contextmanager
def conformance_runners(workdir: Path) -> Iterator[list[DeltaRsPairRunner]]:
    """delta-rs at both isolation levels it implements (the framework's engine entry point)."""
    root = Path(workdir) / "delta-rs"
    root.mkdir(parents=True, exist_ok=True)
    try:
        yield [DeltaRsPairRunner(root, "WriteSerializable"), DeltaRsPairRunner(root, "Serializable")]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def conformance_meta() -> dict[str, str]:
    import deltalake  # optional heavy dependency

    return {"deltalake": str(deltalake.__version__)}

