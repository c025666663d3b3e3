"""The reference MVCC/OCC commit engine: the MetaService model of specs 001/002.

A table is a sequence of snapshots. A transaction starts on one, declares its operation and
footprint, stages its changes, and commits by validating against every commit made since its
snapshot, using its profile's rules: operation-level for MaxCompute (the matrix cell of the two
operations, on overlapping partitions), footprint-level for Delta and Iceberg (the format's
ported conflict checker). A transaction that conflicts with nothing but read a stale snapshot is
rebased onto the latest version without redoing its work (meta-level retry). The version swap
is atomic and publishes a commit's snapshot and history entry together (one lock, which readers
of both take too), so many threads committing at once never lose or duplicate a version, and
never validate against a version whose commit they cannot see yet.

Data model. The logical truth is a map ``partition -> {row id: value}``; files are the physical
layout the footprint validators reason about. Every job's change is row-level (insert rows, set
values, delete rows), computed from its snapshot, and applied at commit on the latest version:
which is what makes a meta-level retry correct, and what lets tests compare the committed
history with a serial re-execution of the winners.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .errors import CommitConflict, InvalidFootprintError, conflict_error
from .footprint import FileRef, Footprint, PartitionKey
from .kinds import ConflictKind, WinningCommit
from .operations import Operation
from .profiles import OverwriteScope, Profile, RuleKind, get_profile

RowId = str
Rows = Mapping[RowId, int]
# A commit's working copies of the partitions it touches (the rest is shared, never mutated).
_PartRows = dict[PartitionKey, dict[RowId, int]]
_PartFiles = dict[PartitionKey, dict[FileRef, frozenset[RowId]]]
_Layout = Mapping[PartitionKey, Mapping[FileRef, frozenset[RowId]]]


@dataclass(frozen=True)
class Snapshot:
    """One version of a table: its rows, its files, and its metadata versions.

    Partitions a commit does not touch are shared with the previous snapshot, so a commit costs
    what it changes, not the size of the table.
    """

    version: int
    rows: Mapping[PartitionKey, Rows]
    partition_files: Mapping[PartitionKey, Mapping[FileRef, frozenset[RowId]]]
    schema_version: int = 0
    protocol_version: int = 1

    @property
    def files(self) -> dict[FileRef, frozenset[RowId]]:
        return {f: rows for files in self.partition_files.values() for f, rows in files.items()}

    def live_files(self, partition: PartitionKey) -> frozenset[FileRef]:
        return frozenset(self.partition_files.get(partition, {}))

    def row_count(self, partition: PartitionKey | None = None) -> int:
        if partition is not None:
            return len(self.rows.get(partition, {}))
        return sum(len(r) for r in self.rows.values())

    @property
    def partitions(self) -> tuple[PartitionKey, ...]:
        return tuple(sorted(self.rows))


@dataclass(frozen=True)
class Commit:
    """One entry of the table's history."""

    version: int  # the ID version: every commit, compactions included
    time_version: float | None  # the time version: only commits that change data logically
    txn_id: str
    footprint: Footprint
    read_version: int
    rebased: bool  # committed on a newer version than it read (meta-level retry)
    committed_at: float

    @property
    def operation(self) -> Operation:
        return self.footprint.operation

    def winner(self) -> WinningCommit:
        return WinningCommit(version=self.version, operation=self.operation.value, tag={"txn": self.txn_id})


@dataclass(frozen=True)
class Change:
    """What a transaction does to the rows of the partitions it writes."""

    upserts: Mapping[PartitionKey, Rows] = field(default_factory=dict)
    deletes: Mapping[PartitionKey, frozenset[RowId]] = field(default_factory=dict)
    replace_partitions: frozenset[PartitionKey] = frozenset()  # overwrite / truncate
    compact: bool = False
    # The rows a compaction read: under operation-level rules it compacts whatever files hold
    # them at commit (smart resolution), even if a concurrent job moved them meanwhile.
    compacted_rows: Mapping[PartitionKey, frozenset[RowId]] = field(default_factory=dict)


def _delete_predicate(row_id: RowId) -> bool:
    """DELETE's condition: a deterministic half of the rows, independent of their values."""
    return hashlib.sha1(row_id.encode()).digest()[0] % 2 == 0


class Transaction:
    """A job on one table, started on a snapshot. Call ``commit()`` once."""

    def __init__(
        self,
        table: ReferenceTable,
        txn_id: str,
        snapshot: Snapshot,
        footprint: Footprint,
        change: Change,
    ) -> None:
        self.table = table
        self.txn_id = txn_id
        self.snapshot = snapshot
        self.footprint = footprint
        self.change = change
        self.committed: Commit | None = None
        self.conflict: CommitConflict | None = None

    @property
    def operation(self) -> Operation:
        return self.footprint.operation

    def commit(self) -> Commit:
        if self.committed is not None or self.conflict is not None:
            raise RuntimeError(f"transaction {self.txn_id} already finished")
        try:
            self.committed = self.table._commit(self)
        except CommitConflict as exc:
            self.conflict = exc
            raise
        return self.committed


class ReferenceTable:
    """A table governed by one profile, with an atomic, validated commit protocol."""

    def __init__(
        self,
        profile: str | Profile,
        partitions: Sequence[PartitionKey] = ("",),
        rows_per_insert: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.profile = get_profile(profile)
        if not partitions:
            raise InvalidFootprintError("a table needs at least one partition ('' if unpartitioned)")
        self._partitions = tuple(partitions)
        self._rows_per_insert = rows_per_insert
        self._clock = clock
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._files = itertools.count(1)
        self._snapshots: list[Snapshot] = [
            Snapshot(
                version=0,
                rows={p: {} for p in self._partitions},
                partition_files={p: {} for p in self._partitions},
            )
        ]
        self._history: list[Commit] = []
        self._last_time = 0.0
        self.rebases = 0
        self.validations = 0

    # -- reading -------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._snapshots[-1].version

    def snapshot(self, version: int | None = None) -> Snapshot:
        return self._snapshots[-1 if version is None else version]

    @property
    def history(self) -> tuple[Commit, ...]:
        with self._lock:  # never a half-published commit
            return tuple(self._history)

    def changes_since(self, version: float, by: str = "id") -> list[Commit]:
        """Incremental read: commits after an ID version, or after a time version.

        By time, compaction and clustering commits are left out: they have no time version
        (spec 001, "Data file version management").
        """
        history = self.history
        if by == "id":
            return [c for c in history if c.version > version]
        if by == "time":
            return [c for c in history if c.time_version is not None and c.time_version > version]
        raise ValueError(f"incremental reads are by 'id' or 'time', not {by!r}")

    # -- writing -------------------------------------------------------------------------
    def begin(
        self,
        operation: str | Operation,
        partitions: Iterable[PartitionKey] | None = None,
        *,
        reads_whole_table: bool = False,
        app_id: str | None = None,
        app_version: int | None = None,
        protocol_change: bool = False,
        txn_id: str | None = None,
    ) -> Transaction:
        """Start a transaction on the latest snapshot and stage its changes.

        ``partitions`` None means every partition of the table (a whole-table job).
        """
        op = self.profile.operation(operation)
        snap = self._snapshots[-1]
        txn_id = txn_id or f"t{next(self._ids)}"
        written = self._partitions if partitions is None else tuple(dict.fromkeys(partitions))
        unknown = [p for p in written if p not in self._partitions]
        if unknown or not written:
            raise InvalidFootprintError(
                f"partitions {unknown or list(written)!r} are not partitions of this table "
                f"({', '.join(repr(p) for p in self._partitions)})"
            )
        footprint, change = self._plan(op, snap, txn_id, written, partitions is None or reads_whole_table)
        footprint = replace(
            footprint,
            app_id=app_id,
            app_version=app_version,
            protocol_change=footprint.protocol_change or protocol_change,
            metadata_change=footprint.metadata_change or protocol_change,
        )
        return Transaction(self, txn_id, snap, footprint, change)

    def run(self, operation: str | Operation, partitions: Iterable[PartitionKey] | None = None) -> Commit:
        """Begin and commit at once (a job with no concurrent writer in between)."""
        return self.begin(operation, partitions).commit()

    def _new_file(self, partition: PartitionKey, txn_id: str) -> FileRef:
        return FileRef(f"{txn_id}-f{next(self._files)}", partition)

    def _plan(
        self, op: Operation, snap: Snapshot, txn_id: str, written: Sequence[PartitionKey], whole_table: bool
    ) -> tuple[Footprint, Change]:
        """The canonical footprint and row change of ``op`` (docs/reference-engine.md)."""
        write_set = frozenset(written)
        if op is Operation.ALTER_METADATA:
            return Footprint(op, frozenset(), frozenset(), data_change=False, metadata_change=True), Change()
        if op is Operation.UPGRADE_PROTOCOL:  # depends on every file; its rewrite changes no row
            every = frozenset(f for p in self._partitions for f in snap.live_files(p))
            return Footprint(op, None, frozenset(), every, data_change=False, metadata_change=True, protocol_change=True), Change()
        if op.is_maintenance:
            # Table maintenance commits no data file: VACUUM / expire_snapshots delete what no
            # version references. It depends on the whole table (the engines give it no read
            # predicate) and changes no row.
            return Footprint(op, None, frozenset(), data_change=False), Change()
        if op is Operation.INSERT_INTO:
            appended = frozenset(self._new_file(p, txn_id) for p in written)
            rows_in = {p: {f"{txn_id}-{p}-{i}": 0 for i in range(self._rows_per_insert)} for p in written}
            return (
                Footprint(op, frozenset(), write_set, files_added=appended, blind_append=True),
                Change(upserts=rows_in),
            )
        read_parts = self._partitions if whole_table else written
        files_read = frozenset(f for p in read_parts for f in snap.live_files(p))
        removed = frozenset(f for f in files_read if f.partition in write_set)
        change = self._row_change(op, snap, txn_id, written)
        # A new file wherever rows are written or removed files leave rows to carry over.
        added = frozenset(
            self._new_file(p, txn_id)
            for p in written
            if change.upserts.get(p)
            or (op is not Operation.TRUNCATE and any(f.partition == p for f in removed))
        )
        footprint = Footprint(
            op,
            None if whole_table else write_set,
            write_set,
            files_read=files_read,
            files_removed=removed,
            files_added=added,
            data_change=op.changes_data,
        )
        return footprint, change

    def _row_change(self, op: Operation, snap: Snapshot, txn_id: str, written: Sequence[PartitionKey]) -> Change:
        """What a job that reads before it writes does to the rows of ``written``, from ``snap``."""
        if op is Operation.TRUNCATE:
            return Change(replace_partitions=frozenset(written))
        if op is Operation.INSERT_OVERWRITE:
            rows_in = {p: {f"{txn_id}-{p}-{i}": 0 for i in range(self._rows_per_insert)} for p in written}
            return Change(upserts=rows_in, replace_partitions=frozenset(written))
        if op is Operation.UPDATE:
            return Change(upserts={p: {r: v + 1 for r, v in snap.rows[p].items()} for p in written})
        if op is Operation.DELETE:
            return Change(deletes={p: frozenset(r for r in snap.rows[p] if _delete_predicate(r)) for p in written})
        if op is Operation.MERGE:
            return Change(
                upserts={p: {**{r: v + 10 for r, v in snap.rows[p].items()}, f"{txn_id}-{p}-m": 0} for p in written}
            )
        # Compactions rewrite files and change no row.
        return Change(compact=True, compacted_rows={p: frozenset(snap.rows[p]) for p in written})

    # -- the commit protocol --------------------------------------------------------------
    def _validate(self, txn: Transaction, winner: Commit) -> None:
        self.validations += 1
        verdict = judge(self.profile, txn.footprint, winner.footprint)
        if verdict is not None:
            kind, reason = verdict
            raise conflict_error(
                kind,
                f"{txn.operation.value} ({txn.txn_id}) lost to {winner.operation.value} committed as "
                f"version {winner.version}: {reason}",
                winner.winner(),
            )

    def _commit(self, txn: Transaction) -> Commit:
        checked = txn.snapshot.version
        while True:
            # Validate outside the lock against what is committed now, then swap under it only
            # if nobody committed meanwhile; otherwise validate the newcomers and try again.
            latest, winners = self._published_since(checked)
            for winner in winners:
                self._validate(txn, winner)
            checked = latest
            with self._lock:
                if self._snapshots[-1].version != latest:
                    continue
                return self._apply(txn, latest)

    def _published_since(self, version: int) -> tuple[int, list[Commit]]:
        """The latest version and every commit after ``version``, read together under the lock.

        A commit publishes its snapshot and its history entry under the same lock, so a reader
        never sees a version without its commit (and so never skips validating against it).
        """
        with self._lock:
            latest = self._snapshots[-1].version
            return latest, self._history[version:latest]

    def _apply(self, txn: Transaction, latest: int) -> Commit:
        """Apply ``txn``'s change on the latest snapshot and publish the new version (lock held)."""
        base = self._snapshots[-1]
        change, fp = txn.change, txn.footprint
        affected = (
            set(change.replace_partitions)
            | set(change.upserts)
            | set(change.deletes)
            | {f.partition for f in fp.files_removed | fp.files_added}
        )
        # Copy only what this commit touches; the rest is shared with the previous snapshot.
        part_rows = {p: dict(base.rows[p]) for p in affected}
        part_files = {p: dict(base.partition_files[p]) for p in affected}
        self._replace_partitions(part_rows, part_files, change, fp)
        touched = self._write_rows(part_rows, part_files, change, fp)
        if change.compact:
            self._compact(part_files, change, fp)
        else:
            for f in sorted(fp.files_added):
                written = touched.get(f.partition, set()) & set(part_rows[f.partition])
                if written:
                    part_files[f.partition][f] = frozenset(written)
        # The log records what the commit really removed: an overwrite or truncate that replaces
        # its partition at commit (MaxCompute, Iceberg) also drops files newer than its snapshot,
        # and later validations must see that (Iceberg: "Missing required files to delete").
        removed_now = frozenset(f for p in affected for f in base.partition_files[p] if f not in part_files[p])
        if not removed_now <= fp.files_removed:
            fp = replace(fp, files_removed=fp.files_removed | removed_now)
        rows = {**base.rows, **part_rows}
        layout = {**base.partition_files, **part_files}
        return self._publish(txn, fp, base, latest, rows, layout)

    def _replace_partitions(
        self, part_rows: _PartRows, part_files: _PartFiles, change: Change, fp: Footprint
    ) -> None:
        """An overwrite or truncate drops the files (and their rows) of the partitions it replaces."""
        scope = self.profile.overwrite_scope
        for p in change.replace_partitions:
            files = part_files[p]
            if scope is OverwriteScope.PARTITION_AT_COMMIT:
                gone = set(files)
            else:  # Delta: only the files this job read; newer blind appends survive
                gone = {f for f in fp.files_removed if f.partition == p and f in files}
            for f in gone:
                for r in files.pop(f):
                    part_rows[p].pop(r, None)

    def _write_rows(
        self, part_rows: _PartRows, part_files: _PartFiles, change: Change, fp: Footprint
    ) -> dict[PartitionKey, set[RowId]]:
        """Delete and upsert rows; returns the rows each partition's new file takes over."""
        touched: dict[PartitionKey, set[RowId]] = {}
        if self.profile.rules is RuleKind.FOOTPRINT and not change.compact:
            # Copy-on-write (Delta, Iceberg): the files read and rewritten go; the rows they
            # held that this job does not delete are carried into its new file.
            for f in sorted(fp.files_removed):
                if f in part_files[f.partition]:
                    touched.setdefault(f.partition, set()).update(part_files[f.partition].pop(f))
        for p, deleted in change.deletes.items():
            for r in deleted:
                part_rows[p].pop(r, None)
            touched.setdefault(p, set()).update(deleted)
        for p, upserts in change.upserts.items():
            part_rows[p].update(upserts)
            touched.setdefault(p, set()).update(upserts)
        # Rows this job wrote move to its new file; files left empty disappear (merge-on-read
        # semantics, which is also what copy-on-write leaves once the removed files are gone).
        for p, moved in touched.items():
            files = part_files[p]
            for f in list(files):
                kept = files[f] - moved
                if kept:
                    files[f] = frozenset(kept)
                else:
                    del files[f]
        return touched

    def _compact(self, part_files: _PartFiles, change: Change, fp: Footprint) -> None:
        """Merge the compacted files of each partition into the compaction's new file."""
        new_files = sorted(fp.files_added)
        operation_rules = self.profile.rules is RuleKind.OPERATION or self.profile.compaction_follows_rows
        for p in {f.partition for f in fp.files_added}:
            files = part_files[p]
            merged: set[RowId] = set()
            targets = [
                f
                for f in files
                if f in fp.files_removed or (operation_rules and files[f] & change.compacted_rows[p])
            ]
            for f in targets:
                merged |= files.pop(f)
            target = next((f for f in new_files if f.partition == p), None)
            if merged and target is not None:
                files[target] = frozenset(merged)

    def _publish(
        self, txn: Transaction, fp: Footprint, base: Snapshot, latest: int, rows: Mapping[PartitionKey, Rows], layout: _Layout
    ) -> Commit:
        """The new version: its snapshot and its history entry, published together (lock held)."""
        now = max(self._clock(), self._last_time + 1e-6)
        data_change = fp.data_change and not fp.metadata_change
        if data_change:
            self._last_time = now
        version = latest + 1
        snap = Snapshot(
            version=version,
            rows=rows,
            partition_files=layout,
            schema_version=base.schema_version + (1 if fp.metadata_change else 0),
            protocol_version=base.protocol_version + (1 if fp.protocol_change else 0),
        )
        commit = Commit(
            version=version,
            time_version=now if data_change else None,
            txn_id=txn.txn_id,
            footprint=fp,
            read_version=txn.snapshot.version,
            rebased=txn.snapshot.version != latest,
            committed_at=now,
        )
        if commit.rebased:
            self.rebases += 1
        self._snapshots.append(snap)
        self._history.append(commit)
        return commit

def judge(profile: Profile, mine: Footprint, theirs: Footprint) -> tuple[ConflictKind, str] | None:
    """Whether ``mine``, committing after ``theirs``, loses: the kind and the rule that says so.

    Operation-level profiles (MaxCompute): the matrix cell of the two operations, when their
    partitions overlap. Footprint-level profiles (Delta, Iceberg): the format's ported checker.
    """
    if profile.rules is RuleKind.OPERATION:
        if not mine.overlaps(theirs):
            return None
        cell = profile.cell(theirs.operation, mine.operation)
        if not cell.later_fails:
            return None
        assert cell.exception is not None
        return cell.exception, cell.source
    assert profile.validator is not None
    return profile.validator(mine, theirs)


def expected_loser_kind(profile: Profile, txn: Transaction, winners: Iterable[Commit]) -> ConflictKind | None:
    """The kind the matrix predicts for ``txn`` against ``winners`` (None: it commits).

    Used by tests and the simulator: the first winner, in commit order, whose cell (or
    footprint rule) makes this operation fail.
    """
    for winner in winners:
        verdict = judge(profile, txn.footprint, winner.footprint)
        if verdict is not None:
            return verdict[0]
    return None
