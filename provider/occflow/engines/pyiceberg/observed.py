"""What a pyiceberg commit really touched, read from its snapshots' manifests: the partitions of
the data files each snapshot added and deleted (the manifest entries it wrote, by snapshot id)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...core.observed import ObservedFootprint, observed_partition_key
from .table import PyIcebergTable


def observe_pyiceberg_commit(iceberg: PyIcebergTable, snapshot_ids: Sequence[int]) -> ObservedFootprint | None:
    """The observed footprint of the snapshots one write committed (``None`` when none is in the
    table any more). Partition values are keyed by the source column of each identity field;
    a table without partitions touches ``""``, its one partition."""
    from pyiceberg.manifest import ManifestEntryStatus  # optional heavy dependency

    table = iceberg.load()
    snapshots = [s for s in (table.metadata.snapshot_by_id(i) for i in snapshot_ids) if s is not None]
    if not snapshots:
        return None
    added: set[str] = set()
    removed: set[str] = set()
    operations = []
    for snapshot in snapshots:
        operations.append("unknown" if snapshot.summary is None else str(snapshot.summary.operation.value))
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                if entry.snapshot_id != snapshot.snapshot_id:
                    continue  # an entry another snapshot wrote, carried over
                key = _partition(table, manifest.partition_spec_id, entry.data_file.partition)
                if entry.status == ManifestEntryStatus.ADDED:
                    added.add(key)
                elif entry.status == ManifestEntryStatus.DELETED:
                    removed.add(key)
    return ObservedFootprint(
        table=iceberg.identifier,
        version_or_snapshot=snapshots[-1].snapshot_id,
        operation="+".join(operations),
        partitions_added=frozenset(added),
        partitions_removed=frozenset(removed),
        blind_append=all(op == "append" for op in operations),
    )


def _partition(table: Any, spec_id: int, record: Any) -> str:
    """The canonical key of a data file's partition (identity fields, by source column)."""
    spec = table.specs()[spec_id]
    schema = table.schema()
    values: dict[str, Any] = {}
    for position, field in enumerate(spec.fields):
        if str(field.transform) != "identity":
            continue  # a transform's value is not a column's: occflow keys by identity columns only
        values[schema.find_column_name(field.source_id) or field.name] = record[position]
    return observed_partition_key(values) if values else ""


__all__ = ["observe_pyiceberg_commit"]
