"""What one delta-rs commit really touched, read from the Delta log.

The commit's ``add`` and ``remove`` actions carry the partition values of every file it wrote
and dropped; its ``commitInfo`` the operation, the predicate it read with (``predicate``, or
``mergePredicate`` for a MERGE), ``readVersion`` and, where the writer records it,
``isBlindAppend``. Those are the facts delta-rs's conflict checker decides on.

The commit file ``_delta_log/<version>.json`` is read by its number (``log.DeltaLog``, on any
storage ``deltalake`` opens): exact, and cheap whatever the table's size. ``diff_snapshots``
derives the same file actions from versions ``v - 1`` and ``v`` (a cross-check).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

from ...core.errors import InvalidDeclarationError
from ...core.footprint import PartitionKey
from ...core.observed import ObservedFootprint, observed_partition_key
from .log import DeltaLog

# Operations that read the table before they write (their predicate says how much of it).
_READING = frozenset({"DELETE", "UPDATE", "MERGE"})
# A predicate conjunct that pins a column to values: col = x, col IN (...), ranges.
_PINNING = (exp.EQ, exp.In, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between)


@dataclass(frozen=True)
class CommitActions:
    """One commit's file actions (partition values per file) and its commit info."""

    added: tuple[Mapping[str, Any], ...]
    removed: tuple[Mapping[str, Any], ...]
    info: Mapping[str, Any]


def observe_deltars_commit(
    uri: str | Path, version: int, storage_options: Mapping[str, str] | None = None
) -> ObservedFootprint:
    """The observed footprint of commit ``version`` of the Delta table at ``uri``."""
    from deltalake import DeltaTable  # optional heavy dependency

    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidDeclarationError(f"a Delta table version is an integer >= 0, got {version!r}")
    table = DeltaTable(str(uri), version=version, storage_options=dict(storage_options or {}) or None)
    actions = read_commit_file(str(uri), version, storage_options)
    if actions is None:
        actions = diff_snapshots(str(uri), version, storage_options, table)
    return footprint_of(str(uri), version, actions, list(table.metadata().partition_columns))


def footprint_of(table: str, version: int, actions: CommitActions, partition_columns: Sequence[str]) -> ObservedFootprint:
    """The footprint of one commit's actions on a table partitioned by ``partition_columns``."""
    info = actions.info
    operation = str(info.get("operation") or "UNKNOWN")
    params = info.get("operationParameters") or {}
    predicate = params.get("predicate") or params.get("mergePredicate")
    mode = str(params.get("mode") or "")
    if "isBlindAppend" in info:
        blind = bool(info["isBlindAppend"])
    else:  # delta-rs does not write isBlindAppend: a write that only adds files, not an overwrite
        blind = operation in ("WRITE", "CREATE TABLE") and mode != "Overwrite" and not actions.removed
    reads = operation in _READING or (operation == "WRITE" and mode == "Overwrite")
    read_version = info.get("readVersion")
    return ObservedFootprint(
        table=table,
        version_or_snapshot=version,
        operation=operation,
        partitions_added=_keys(actions.added),
        partitions_removed=_keys(actions.removed),
        predicate=None if predicate is None else str(predicate),
        read_version=None if read_version is None else int(read_version),
        blind_append=blind,
        whole_table=reads and not pins_partition(None if predicate is None else str(predicate), partition_columns),
    )


def pins_partition(predicate: str | None, partition_columns: Iterable[str]) -> bool:
    """Whether ``predicate`` (DataFusion SQL, as delta-rs records it) limits some partition column
    to values in a top-level ``AND`` conjunct: ``t.ds = '1'`` does, ``t.ds = s.ds`` (the spec's
    MERGE that reads the whole table) and ``ds = '1' OR id = 2`` do not."""
    columns = {c.lower() for c in partition_columns}
    if not predicate or not columns:
        return False
    try:
        tree = sqlglot.parse_one(predicate, read="postgres")
    except sqlglot.errors.SqlglotError:
        return False  # a predicate we cannot read pins nothing we can vouch for
    for conjunct in tree.flatten() if isinstance(tree, exp.And) else [tree]:
        if isinstance(conjunct, exp.Paren):
            conjunct = conjunct.unnest()
        if not isinstance(conjunct, _PINNING):
            continue
        named = [c for c in conjunct.find_all(exp.Column)]
        if len(named) == 1 and named[0].name.lower() in columns:
            return True  # one column, the rest literals: the column is pinned
    return False


def _keys(files: Iterable[Mapping[str, Any]]) -> frozenset[PartitionKey]:
    return frozenset(observed_partition_key(values) if values else "" for values in files)


# ----------------------------------------------------------------------- reading the log


def read_commit_file(uri: str, version: int, storage_options: Mapping[str, str] | None = None) -> CommitActions | None:
    """The actions of ``_delta_log/<version>.json`` (``log.DeltaLog``, any storage ``deltalake``
    opens); ``None`` when the file is gone (log cleanup)."""
    found = DeltaLog(uri, storage_options).commit(version)
    if found is None:
        return None
    return CommitActions(
        tuple(dict(f.partition) for f in found.added), tuple(dict(f.partition) for f in found.removed), found.info
    )


def diff_snapshots(
    uri: str, version: int, storage_options: Mapping[str, str] | None, table: Any
) -> CommitActions:
    """The commit's file actions as the difference of versions ``version - 1`` and ``version``,
    and its commit info read from the log by number (never from ``history()``'s labels)."""
    from deltalake import DeltaTable  # optional heavy dependency

    after = _files(table)
    before: dict[str, dict[str, Any]] = {}
    if version > 0:
        before = _files(DeltaTable(uri, version=version - 1, storage_options=dict(storage_options or {}) or None))
    logged = DeltaLog(uri, storage_options).commit(version)
    if logged is None:
        raise InvalidDeclarationError(f"the log of the Delta table at {uri} holds no commit info for version {version}")
    return CommitActions(
        added=tuple(v for p, v in after.items() if p not in before),
        removed=tuple(v for p, v in before.items() if p not in after),
        info=logged.info,
    )


def _files(table: Any) -> dict[str, dict[str, Any]]:
    """Path -> partition values of every live file of a loaded ``DeltaTable``."""
    import pyarrow as pa  # optional heavy dependency

    actions = pa.table(table.get_add_actions(flatten=True))
    prefix = "partition."
    columns = [c for c in actions.column_names if c.startswith(prefix)]
    out: dict[str, dict[str, Any]] = {}
    for row in actions.select(["path", *columns]).to_pylist():
        out[str(row["path"])] = {c[len(prefix):]: row[c] for c in columns}
    return out
