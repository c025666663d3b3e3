"""The exactly-once ledger of a pyiceberg table: the snapshot log (main's history, newest first)
and, for a schema change or an expire (no snapshot), the labels it left in the table's properties."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..ledger import HISTORY_DEPTH, FoundCommit
from ..tags import CommitTag
from .commit import (
    EXPIRE_SNAPSHOTS_PREFIX,
    SCHEMA_CHANGE_PREFIX,
    ambient_tag,
    from_schema_change_properties,
    metadata_number,
)
from .table import ENGINE, PyIcebergTable
from .winner import snapshots_after


@dataclass(frozen=True)
class PyIcebergLedger:
    """A pyiceberg table as a ``CommitLedger``."""

    iceberg: PyIcebergTable
    engine: str = ENGINE
    #: Tag only commits whose labels hold these entries (``ambient_tag``'s ``only_if``).
    only_if: Mapping[str, str] | None = None

    @property
    def table(self) -> str:
        return self.iceberg.identifier

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        for commit in self.tagged_commits():
            if commit.tag.write_id == tag.write_id:
                return commit
        return None

    def tagged_commits(self) -> Iterator[FoundCommit]:
        current = self.iceberg.load()
        # A schema change or an expire commits no snapshot: the newest of each left its tag in the
        # table's properties.
        for prefix in (SCHEMA_CHANGE_PREFIX, EXPIRE_SNAPSHOTS_PREFIX):
            metadata_only = CommitTag.from_properties(from_schema_change_properties(current.properties, prefix))
            if metadata_only is not None:
                yield FoundCommit(self.engine, self.table, metadata_only, version=metadata_number(current.metadata_location))
        for snapshot in reversed(snapshots_after(current, None)[-HISTORY_DEPTH:]):
            props = {} if snapshot.summary is None else dict(snapshot.summary.additional_properties)
            found = CommitTag.from_properties(props)
            if found is not None:
                when = dt.datetime.fromtimestamp(snapshot.timestamp_ms / 1000, tz=dt.timezone.utc).isoformat()
                yield FoundCommit(self.engine, self.table, found, snapshot_id=snapshot.snapshot_id, committed_at=when)

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        with ambient_tag(tag, self.only_if):
            yield


__all__ = ["PyIcebergLedger"]
