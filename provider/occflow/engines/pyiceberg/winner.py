"""The commit a lost pyiceberg write lost to, read from the table's own logs: the snapshot log
(main's history, by snapshot id, never a stale handle's idea of "current") and, for a schema
change that writes no snapshot, the metadata log."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...core.kinds import WinningCommit
from ..tags import with_writer
from .commit import COMMIT_ID_KEY, from_schema_change_properties, metadata_number

if TYPE_CHECKING:
    from pyiceberg.table import Table


def _when(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat()


def snapshots_after(current: Table, read_id: int | None) -> list[Any]:
    """The snapshots main's log records after ``read_id`` (all of them when ``None``), oldest first."""
    log = [entry.snapshot_id for entry in current.metadata.snapshot_log]
    if read_id is not None:
        log = log[log.index(read_id) + 1 :] if read_id in log else log
    found = (current.metadata.snapshot_by_id(i) for i in log)
    return [s for s in found if s is not None]


def find_winner(
    current: Table, read_id: int | None, read_metadata: str, commit_id: str, scope: Mapping[str, Any] | None = None
) -> WinningCommit | None:
    """The first commit after snapshot ``read_id`` (metadata file ``read_metadata``), what the
    attempt read before it ran (pyiceberg's commit retry refreshes the handle it was given), made
    by someone else: a snapshot, or else a metadata change (a schema change)."""
    others = [
        s for s in snapshots_after(current, read_id)
        if s.summary is None or s.summary[COMMIT_ID_KEY] != commit_id
    ]
    if others:
        first = others[0]
        summary = {} if first.summary is None else {k: str(v) for k, v in first.summary.additional_properties.items()}
        winner = WinningCommit(
            snapshot_id=first.snapshot_id,
            operation=None if first.summary is None else str(first.summary.operation.value),
            timestamp=_when(first.timestamp_ms),
            others=tuple(s.snapshot_id for s in others[1:]),
            basis="the first snapshot main's log records after the one this attempt read"
            + ("" if scope is None else " (pyiceberg validates by filter, any partition's commit can be it)"),
        )
        return with_writer(winner, summary)
    if current.metadata_location != read_metadata:
        labels = from_schema_change_properties(current.properties)
        winner = WinningCommit(
            metadata_version=metadata_number(current.metadata_location),
            operation="schema change" if labels else None,
            basis="no snapshot since this attempt read the table: a metadata change (the metadata log's newest file)",
        )
        return with_writer(winner, labels)
    return None


__all__ = ["find_winner", "snapshots_after"]
