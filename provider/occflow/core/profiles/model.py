"""The shape of a conflict matrix: cells, and a profile that holds one matrix and its rules."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import UnknownOperationError
from ..footprint import Validator
from ..kinds import ConflictKind
from ..operations import Operation, parse_operation


class Effect(str, enum.Enum):
    """What happens to the data when the later job commits."""

    OVERWRITE = "overwrite"  # both succeed; the later job's result replaces the earlier's
    APPEND = "append"  # both succeed; the later job's rows are added to the earlier result
    APPLIED = "applied"  # both succeed; the later change applies on top of the earlier result
    COMPACTION_COMPLETES = "compaction_completes"  # both succeed; the later compaction completes
    LATER_FAILS = "later_fails"  # the earlier result stands; the later job fails, writes nothing
    # both commit and the data is wrong (delta-rs: two compactions of the same files both land,
    # so the partition's rows appear twice): admission must never let the pair run together
    DUPLICATES_ROWS = "duplicates_rows"
    # both commit from one snapshot, but maintenance that deletes unreferenced files (VACUUM,
    # expire_snapshots, remove_orphan_files) under a retention shorter than the other job's run
    # deletes files that job's older snapshot still reads (delta-rs: "Object at location ... not
    # found", never a conflict, so never retried): admission never lets the pair run together.
    # Not ``corrupts_data``: at the engine's safe retention no job lives long enough to meet it,
    # so a write without admission needs no opt-in for it (the retention floor guards that).
    DELETES_FILES_IN_USE = "deletes_files_in_use"

    @property
    def corrupts_data(self) -> bool:
        return self is Effect.DUPLICATES_ROWS

    @property
    def keeps_apart(self) -> bool:
        """Both commit, yet the pair must not run together (admission, lint, explain)."""
        return self.corrupts_data or self is Effect.DELETES_FILES_IN_USE


class Condition(str, enum.Enum):
    """When a failing cell fails: always, or only when both jobs modify the same rows."""

    ALWAYS = "always"
    # Row-level concurrency (spec 004): the pair conflicts only when both jobs modify the same
    # rows; on different rows both commit and the later change applies on top. occflow cannot
    # see rows, so admission, the DAG linter and the reference engine treat every overlapping
    # footprint as "the same rows" (the cell's exception); the engine may still let it commit.
    SAME_ROWS = "same_rows"


class RuleKind(str, enum.Enum):
    """How the reference engine validates a commit for this profile."""

    OPERATION = "operation"  # MaxCompute: by the pair of operations on one table or partition
    FOOTPRINT = "footprint"  # Delta, Iceberg: by files and partitions read, removed and added


class OverwriteScope(str, enum.Enum):
    """What an overwrite replaces when it commits on a newer version than it read."""

    PARTITION_AT_COMMIT = "partition_at_commit"  # MaxCompute, Iceberg ReplacePartitions
    FILES_READ = "files_read"  # Delta: removes the files it read, newer blind appends survive


@dataclass(frozen=True)
class Cell:
    """Two jobs on the same non-partitioned table or partition; ``earlier`` commits first.

    ``exception`` is the kind the later job fails with in the pair's usual form; ``also_raises``
    lists the other kinds the engine really raises for the same pair in another form (delta-rs: a
    DELETE that removes whole files instead of rewriting them), each named in the cell's source.
    """

    earlier: Operation
    later: Operation
    later_fails: bool
    exception: ConflictKind | None
    effect: Effect
    source: str
    note: str = ""
    condition: Condition = Condition.ALWAYS
    also_raises: tuple[ConflictKind, ...] = ()

    def __post_init__(self) -> None:
        if self.later_fails != (self.exception is not None):
            raise ValueError(f"{self.earlier.value}->{self.later.value}: a failing cell needs an exception")
        if self.also_raises and (self.exception is None or self.exception in self.also_raises):
            raise ValueError(
                f"{self.earlier.value}->{self.later.value}: also_raises lists other kinds of a failing cell"
            )
        if self.later_fails != (self.effect is Effect.LATER_FAILS):
            raise ValueError(f"{self.earlier.value}->{self.later.value}: effect disagrees with outcome")
        if self.condition is Condition.SAME_ROWS and not self.later_fails:
            raise ValueError(
                f"{self.earlier.value}->{self.later.value}: only a failing cell can fail on the same rows only"
            )

    @property
    def kinds(self) -> tuple[ConflictKind, ...]:
        """Every kind the later job may fail with here (empty: it commits)."""
        return () if self.exception is None else (self.exception, *self.also_raises)

    def to_dict(self) -> dict[str, object]:
        return {
            "earlier": self.earlier.value,
            "later": self.later.value,
            "later_fails": self.later_fails,
            "exception": None if self.exception is None else self.exception.value,
            "effect": self.effect.value,
            "source": self.source,
            "note": self.note,
            "condition": self.condition.value,
            "also_raises": [kind.value for kind in self.also_raises],
        }


@dataclass(frozen=True)
class Profile:
    """A table format at one isolation level: its operations, its matrix and its commit rules."""

    name: str
    title: str
    table_format: str
    isolation: str
    rules: RuleKind
    overwrite_scope: OverwriteScope
    sources: tuple[str, ...]
    cells: tuple[Cell, ...]
    description: str = ""
    # Kinds the engine for this format can raise beyond the matrix (metadata lock, unknown state).
    extra_kinds: tuple[ConflictKind, ...] = ()
    # Operations that, when they fail on this format, may leave their data behind (spec 000:
    # a MaxCompute standard-table INTO job), with the source: the policy never retries them.
    residue_on_failure: tuple[Operation, ...] = ()
    residue_source: str = ""
    # A compaction whose files a concurrent write rewrote commits anyway and compacts the files
    # that now hold its rows (Delta with deletion vectors, spec 004); MaxCompute's operation rules
    # always do (smart conflict resolution).
    compaction_follows_rows: bool = False
    # Operations whose commit validation reads every file of the table on this engine, whatever
    # partitions they write (delta-rs: an append or OPTIMIZE has no read predicate), with the
    # source. Admission and the simulator give them the whole table as footprint.
    reads_whole_table: tuple[Operation, ...] = ()
    reads_whole_table_source: str = ""
    # For FOOTPRINT rules: the format's commit validator (a port of its conflict checker).
    validator: Validator | None = field(default=None, compare=False)
    _index: dict[tuple[Operation, Operation], Cell] = field(init=False, repr=False, compare=False)
    _operations: tuple[Operation, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        seen = {op for cell in self.cells for op in (cell.earlier, cell.later)}
        # Derived once: the simulator and the engine ask for it on every commit.
        object.__setattr__(self, "_operations", tuple(op for op in Operation if op in seen))
        index: dict[tuple[Operation, Operation], Cell] = {}
        for cell in self.cells:
            key = (cell.earlier, cell.later)
            if key in index:
                raise ValueError(f"profile {self.name}: duplicate cell {key}")
            index[key] = cell
        ops = self.operations
        missing = [(a.value, b.value) for a in ops for b in ops if (a, b) not in index]
        if missing:
            raise ValueError(f"profile {self.name}: matrix is missing cells {missing}")
        if bool(self.residue_on_failure) != bool(self.residue_source):
            raise ValueError(f"profile {self.name}: operations that leave residue need a source, and only they")
        strays = [op.value for op in self.residue_on_failure if op not in self._operations]
        if strays:
            raise ValueError(f"profile {self.name}: residue_on_failure names operations outside the matrix: {strays}")
        if bool(self.reads_whole_table) != bool(self.reads_whole_table_source):
            raise ValueError(f"profile {self.name}: operations that read the whole table need a source, and only they")
        # Maintenance that deletes unreferenced files lists and deletes in every partition: its
        # footprint is the whole table on every engine, whatever partitions it was declared with.
        partial = [
            op.value
            for op in self._operations
            if op.deletes_unreferenced_files and op not in self.reads_whole_table
        ]
        if partial:
            raise ValueError(f"profile {self.name}: {partial} delete files in every partition: list them in reads_whole_table")
        if (self.rules is RuleKind.FOOTPRINT) != (self.validator is not None):
            raise ValueError(f"profile {self.name}: footprint rules need a validator, operation rules none")
        object.__setattr__(self, "_index", index)

    @property
    def operations(self) -> tuple[Operation, ...]:
        return self._operations

    def operation(self, name: str | Operation) -> Operation:
        """Parse ``name`` and check this profile knows it."""
        op = parse_operation(name)
        if op not in self.operations:
            known = ", ".join(o.value for o in self.operations)
            raise UnknownOperationError(
                f"operation {op.value!r} is not in profile {self.name!r}; it knows: {known}"
            )
        return op

    def cell(self, earlier: str | Operation, later: str | Operation) -> Cell:
        return self._index[(self.operation(earlier), self.operation(later))]

    def later_fails(self, earlier: str | Operation, later: str | Operation) -> bool:
        return self.cell(earlier, later).later_fails

    def conflicts(self, a: str | Operation, b: str | Operation) -> bool:
        """Whether ``a`` and ``b`` must not run together on one footprint: in either commit
        order the later one fails, or both commit and corrupt the data."""
        return any(cell.later_fails or cell.effect.keeps_apart for cell in (self.cell(a, b), self.cell(b, a)))

    def commit_is_clean(self, earlier: str | Operation, later: str | Operation) -> bool:
        """Two writes from one snapshot, ``earlier`` committed first: the later one commits too
        and the data is right (the cell, read directly). Order-aware admission lets ``later``
        run beside ``earlier`` where only this order is clean, its commit held until
        ``earlier``'s lease ends."""
        cell = self.cell(earlier, later)
        return not cell.later_fails and not cell.effect.keeps_apart

    def __iter__(self) -> Iterator[Cell]:
        return iter(self.cells)

    def to_dict(self) -> dict[str, object]:
        return {
            "profile": self.name,
            "title": self.title,
            "table_format": self.table_format,
            "isolation": self.isolation,
            "operations": [op.value for op in self.operations],
            "cells": [cell.to_dict() for cell in self.cells],
        }


def expand_groups(
    groups: Mapping[str, Sequence[Operation]],
    rows: Iterable[tuple[str, str, ConflictKind | None, Effect, str]],
    note: str = "",
) -> tuple[Cell, ...]:
    """Cells from a spec table whose rows and columns name groups (``UPDATE / DELETE``)."""
    cells: list[Cell] = []
    for earlier_group, later_group, exception, effect, source in rows:
        for earlier in groups[earlier_group]:
            for later in groups[later_group]:
                cells.append(
                    Cell(
                        earlier=earlier,
                        later=later,
                        later_fails=exception is not None,
                        exception=exception,
                        effect=effect,
                        source=source,
                        note=note,
                    )
                )
    return tuple(cells)
