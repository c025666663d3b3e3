"""A Delta table's facts as delta-rs reads them from its log: partition columns, table
properties (``delta.isolationLevel``, deletion vectors, row tracking) and protocol features."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

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
    return TableFacts(
        table=table or str(uri),
        table_format="delta",
        engine=ENGINE,
        partition_columns=tuple(metadata.partition_columns),
        properties=dict(metadata.configuration),
        features=tuple(features),
    )
