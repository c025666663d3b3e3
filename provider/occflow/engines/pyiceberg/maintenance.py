"""``expire_snapshots`` on a pyiceberg table, with Iceberg's retention floor.

pyiceberg 0.12's ``ExpireSnapshots`` (pyiceberg/table/update/snapshot.py, reached through
``table.maintenance.expire_snapshots()``) commits one ``RemoveSnapshotsUpdate``: the snapshots
leave the table's metadata and its snapshot log, and **no file is deleted** (the data and manifest
files only they referenced stay on storage until something removes orphan files). It has
``by_id`` / ``by_ids`` / ``older_than`` and skips branch and tag heads; Java's ``retainLast`` and
the table's ``history.expire.*`` defaults are not there, so occflow picks the snapshots itself
(``snapshots_to_expire``) and hands pyiceberg their ids.

What it does to a running writer: a pyiceberg write whose commit loses the catalog's
compare-and-swap re-reads the table and resolves the snapshot it started from
(``CommitWindow.resolve``); if an expire removed that snapshot meanwhile the write fails with
``ValidationException: Cannot find starting snapshot`` (an append too). A retention at the floor
(``RETENTION_FLOORS``: 5 days, or the table's longer ``history.expire.max-snapshot-age-ms``) keeps
every running job's snapshot; below it only with ``allow_unsafe_retention=True``.

Two expires planned on one snapshot: pyiceberg fails the later one's commit with a ``ValueError``
(the ids it planned are gone); occflow's expire plans again on the fresh table and commits what is
left, as Java's ``RemoveSnapshots`` does on its commit retry.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ...core.errors import InvalidDeclarationError
from ...core.operations import RETENTION_FLOORS, Operation, check_retention
from ..outcome import WriteOutcome
from .commit import EXPIRE_SNAPSHOTS_PREFIX, CommitOptions, schema_change_properties
from .table import PyIcebergTable

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: Iceberg's table properties for expiring snapshots (pyiceberg's ``TableProperties`` names them;
#: its ``ExpireSnapshots`` does not read them, occflow does, as Java's ``RemoveSnapshots`` does).
MAX_SNAPSHOT_AGE_MS = RETENTION_FLOORS[Operation.EXPIRE_SNAPSHOTS].table_property
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
_HOUR_MS = 3_600_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: pyiceberg/table/update/__init__.py ``_apply_table_update(RemoveSnapshotsUpdate)`` (0.12.0): the
#: catalog applies an expire's ids to the metadata current at its commit, and an id a concurrent
#: expire already removed is this ``ValueError`` (not a ``CommitFailedException``: pyiceberg does not
#: retry it). ``by_id`` words its own check differently ("Snapshot with ID ... does not exist.").
_REMOVED_MEANWHILE = re.compile(r"Snapshot with snapshot id (-?\d+) does not exist: ")
_REPLANS = 3


def _table_number(properties: Mapping[str, str], key: str, where: str) -> int | None:
    """A whole-number table property, ``None`` when unset; a value Iceberg would not read is an
    error naming it (the floor must not be guessed)."""
    value = properties.get(key)
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        number = -1
    if number < 0:
        raise InvalidDeclarationError(f"{where}: the table's {key} is {value!r}, not a whole number >= 0")
    return number


def check_retain_last(retain_last: object, where: str) -> None:
    """``retain_last`` is a whole number >= 1 (the current snapshot is always kept), or ``None``."""
    if retain_last is None:
        return
    if isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1:
        raise InvalidDeclarationError(
            f"{where}: retain_last={retain_last!r}: the number of the newest snapshots to keep is a whole number >= 1"
        )


def snapshots_to_expire(current: Table, cutoff_ms: int, retain_last: int) -> list[int]:
    """The ids Java's ``RemoveSnapshots`` would expire: snapshots older than ``cutoff_ms``, except
    the ``retain_last`` newest ancestors of main's head and every branch or tag head (pyiceberg
    skips those itself, and refuses ``by_id`` of one)."""
    metadata = current.metadata
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    kept: list[int] = []
    snapshot = current.current_snapshot()
    while snapshot is not None and len(kept) < retain_last:
        kept.append(snapshot.snapshot_id)
        parent = snapshot.parent_snapshot_id
        snapshot = None if parent is None else metadata.snapshot_by_id(parent)
    keep = protected | set(kept)
    return sorted(s.snapshot_id for s in metadata.snapshots if s.timestamp_ms < cutoff_ms and s.snapshot_id not in keep)


def expire_snapshots(
    table: PyIcebergTable,
    *,
    older_than_hours: float | None = None,
    retain_last: int | None = None,
    allow_unsafe_retention: bool = False,
    snapshot: Table | None = None,
    commit: CommitOptions | None = None,
    now: dt.datetime | None = None,
) -> WriteOutcome:
    """Expire the snapshots older than ``older_than_hours`` (the table's
    ``history.expire.max-snapshot-age-ms``, 5 days by default, when ``None``), keeping the
    ``retain_last`` newest (the table's ``history.expire.min-snapshots-to-keep``, 1 by default).

    A retention below the safe minimum (``RETENTION_FLOORS``, or the table's own longer setting)
    is refused before anything is committed, unless ``allow_unsafe_retention=True``. With nothing
    old enough, nothing is committed (as pyiceberg commits nothing for a change to nothing).
    The expire's labels and commit tag go into table properties of the same commit
    (``EXPIRE_SNAPSHOTS_PREFIX``): the ledger finds it there.
    """
    where = f"expire_snapshots of {table.identifier}"
    check_retain_last(retain_last, where)
    current = snapshot if snapshot is not None else table.load()
    properties = current.properties
    max_age_ms = _table_number(properties, MAX_SNAPSHOT_AGE_MS, where)
    table_hours = None if max_age_ms is None else max_age_ms / _HOUR_MS
    check_retention(
        Operation.EXPIRE_SNAPSHOTS,
        older_than_hours,
        table_minimum_hours=table_hours,
        allow_unsafe_retention=allow_unsafe_retention,
        where=where,
    )
    hours = older_than_hours if older_than_hours is not None else (
        table_hours if table_hours is not None else RETENTION_FLOORS[Operation.EXPIRE_SNAPSHOTS].hours
    )
    keep = retain_last if retain_last is not None else max(1, _table_number(properties, MIN_SNAPSHOTS_TO_KEEP, where) or 1)
    moment = now or dt.datetime.now(dt.timezone.utc)
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)  # naive: UTC
    # Whole milliseconds by integer division (a float timestamp can land a millisecond short).
    cutoff_ms = (moment - _EPOCH) // dt.timedelta(milliseconds=1) - int(hours * _HOUR_MS)

    def run(loaded: Table, props: dict[str, str]) -> dict[str, Any] | None:
        return {"details": {"expired_snapshots": _commit_expire(table, loaded, props, cutoff_ms, keep)}}

    return table._run(Operation.EXPIRE_SNAPSHOTS, current, run, commit)


def _commit_expire(table: PyIcebergTable, loaded: Table, props: dict[str, str], cutoff_ms: int, keep: int) -> list[int]:
    """Expire what ``loaded`` holds older than ``cutoff_ms`` beyond the ``keep`` newest, in one
    commit with its labels; the ids it removed (none: nothing committed)."""
    from pyiceberg.table.update.snapshot import ExpireSnapshots  # optional heavy dependency

    for _ in range(_REPLANS):
        ids = snapshots_to_expire(loaded, cutoff_ms, keep)
        if not ids:
            return []
        try:
            # One commit: the RemoveSnapshotsUpdate (what table.maintenance.expire_snapshots()
            # commits on its own) and the labels, so the ledger finds exactly what was committed.
            with loaded.transaction() as tx:
                ExpireSnapshots(transaction=tx).by_ids(ids).commit()
                tx.set_properties(schema_change_properties(props, EXPIRE_SNAPSHOTS_PREFIX))
        except ValueError as exc:
            gone = _REMOVED_MEANWHILE.match(str(exc))
            if gone is None or int(gone.group(1)) not in ids:
                raise
            # Another expire removed one of these snapshots since this one planned: nothing was
            # committed (the catalog refused the update); plan again on the table as it is now,
            # as Java's RemoveSnapshots refreshes and re-applies.
            # The fresh handle commits through the same catalog as ``loaded`` (during the write
            # ``_run`` made it the one that checks the lease right before the commit: fence.py).
            fresh = table.load()
            fresh.catalog = loaded.catalog
            loaded = fresh
            continue
        return ids
    raise RuntimeError(
        f"expire_snapshots of {table.identifier}: other expires kept removing the snapshots it planned, {_REPLANS} times"
    )


def expired_ids(outcome: WriteOutcome) -> list[int]:
    """The snapshot ids an ``expire_snapshots`` outcome removed (empty: nothing was old enough)."""
    found: Iterable[Any] = outcome.engine_details.get("expired_snapshots") or ()
    return [int(i) for i in found]


__all__ = [
    "MAX_SNAPSHOT_AGE_MS",
    "MIN_SNAPSHOTS_TO_KEEP",
    "check_retain_last",
    "expire_snapshots",
    "expired_ids",
    "snapshots_to_expire",
]
