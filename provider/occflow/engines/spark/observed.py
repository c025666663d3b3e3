"""What one Iceberg snapshot really touched, read from the table's metadata tables on Spark.

A snapshot's manifests list every file it added (status 1) and deleted (status 2), each with
its partition; the ``entries`` metadata table read *as of* that snapshot shows them, so commits
made since do not hide them. The ``snapshots`` table gives the operation, the parent (the
snapshot the commit was validated from) and the summary.

Iceberg records no predicate with a snapshot, so what a commit *read* (the conflict detection
filter its validation used) cannot be observed: ``whole_table`` stays ``False`` and only the
written partitions are compared with the declaration. Partition fields are named as in the
partition spec: an identity partition is named after its column (what a declaration names);
a transform's field (``ts_day``) shares no column with a declaration and is never reported.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.footprint import PartitionKey
from ...core.observed import ObservedFootprint, observed_partition_key
from .identifiers import quote_table

# Manifest entry status: what the snapshot that wrote the manifest did to the file.
ADDED, DELETED = 1, 2


def observe_iceberg_snapshot(spark: Any, table: str, snapshot_id: int) -> ObservedFootprint:
    """The observed footprint of snapshot ``snapshot_id`` of the Iceberg table ``table``
    (``catalog.db.table``, as the session resolves it)."""
    if isinstance(snapshot_id, bool) or not isinstance(snapshot_id, int):
        raise InvalidDeclarationError(f"an Iceberg snapshot id is an integer, got {snapshot_id!r}")
    q = quote_table(table)
    rows = spark.sql(
        f"SELECT operation, parent_id, summary FROM {q}.snapshots WHERE snapshot_id = {int(snapshot_id)}"
    ).collect()
    if not rows:
        raise InvalidDeclarationError(f"{table} has no snapshot {snapshot_id} (expired, or another table's)")
    snapshot = rows[0]
    added, removed = snapshot_partitions(spark, table, snapshot_id)
    operation = str(snapshot["operation"])
    return ObservedFootprint(
        table=table,
        version_or_snapshot=int(snapshot_id),
        operation=operation,
        partitions_added=added,
        partitions_removed=removed,
        predicate=None,
        read_version=None if snapshot["parent_id"] is None else int(snapshot["parent_id"]),
        blind_append=operation == "append",
        whole_table=False,
    )


def snapshot_partitions(
    spark: Any, table: str, snapshot_id: int
) -> tuple[frozenset[PartitionKey], frozenset[PartitionKey]]:
    """Partition keys of the files (data and delete files) snapshot ``snapshot_id`` added and
    deleted, from its own manifest entries (``entries`` as of that snapshot)."""
    entries = f"{quote_table(table)}.entries VERSION AS OF {int(snapshot_id)}"
    data_file = spark.sql(f"SELECT * FROM {entries} LIMIT 0").schema["data_file"].dataType
    partitioned = "partition" in data_file.fieldNames()
    part = "data_file.partition" if partitioned else "NULL"
    rows = spark.sql(
        f"SELECT status, {part} AS partition FROM {entries} "
        f"WHERE snapshot_id = {int(snapshot_id)} AND status IN ({ADDED}, {DELETED})"
    ).collect()
    added: set[PartitionKey] = set()
    removed: set[PartitionKey] = set()
    for row in rows:
        values = row["partition"].asDict() if row["partition"] is not None else {}
        key = observed_partition_key(values) if values else ""
        (added if int(row["status"]) == ADDED else removed).add(key)
    return frozenset(added), frozenset(removed)
