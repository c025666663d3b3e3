"""A Delta table's facts as delta-rs reads them from its log: partition columns and their types,
table properties (``delta.isolationLevel``, deletion vectors, row tracking) and protocol features."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ...core.partvalues import readable_types
from ...core.tablefacts import TableFacts
from .table import ENGINE, DeltaRsTable


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
    types = {
        f.name: str(getattr(f.type, "type", "")) for f in snapshot.schema().fields if f.name.lower() in partitioned
    }
    return TableFacts(
        table=table or str(uri),
        table_format="delta",
        engine=ENGINE,
        partition_columns=tuple(metadata.partition_columns),
        properties=dict(metadata.configuration),
        features=tuple(features),
        partition_column_types=readable_types(types),
    )
