"""A Delta table's facts as delta-rs reads them from its log: partition columns and their types,
table properties (``delta.isolationLevel``, deletion vectors, row tracking), protocol features, and
under column mapping the physical column each partition column's values are stored under."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ...core.partvalues import readable_types
from ...core.tablefacts import TableFacts
from .table import ENGINE, DeltaRsTable

COLUMN_MAPPING = "delta.columnMapping.mode"
PHYSICAL_NAME = "delta.columnMapping.physicalName"


def deltars_table_facts(
    uri: str | Path, storage_options: Mapping[str, str] | None = None, table: str | None = None
) -> TableFacts:
    """The facts of the Delta table at ``uri`` (latest version), for a write delta-rs commits.

    ``table`` names it in messages (default: the location). A location that holds no Delta
    table raises delta-rs's own ``TableNotFoundError``.
    """
    snapshot = DeltaRsTable(uri, storage_options).load()
    metadata = snapshot.metadata()
    protocol = snapshot.protocol()
    features = sorted({*(protocol.reader_features or ()), *(protocol.writer_features or ())})
    partitioned = {c.lower() for c in metadata.partition_columns}
    # Delta's schema names a primitive type as the protocol spells it ("integer", "date",
    # "decimal(10,2)"); a partition column is always primitive.
    fields = [f for f in snapshot.schema().fields if f.name.lower() in partitioned]
    types = {f.name: str(getattr(f.type, "type", "")) for f in fields}
    # Column mapping (Delta protocol, "Column Mapping"): a column's values are stored under its
    # physical name, which a rename never changes; the logical name can come to mean another
    # column. Kept only where the two differ.
    mapped = (metadata.configuration or {}).get(COLUMN_MAPPING, "none").strip().lower() in ("name", "id")
    physical = {
        f.name: str((f.metadata or {}).get(PHYSICAL_NAME))
        for f in fields
        if mapped and (f.metadata or {}).get(PHYSICAL_NAME) not in (None, f.name)
    }
    return TableFacts(
        table=table or str(uri),
        table_format="delta",
        engine=ENGINE,
        partition_columns=tuple(metadata.partition_columns),
        properties=dict(metadata.configuration),
        features=tuple(features),
        partition_column_types=readable_types(types),
        physical_columns=physical,
    )
