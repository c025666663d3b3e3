"""An Iceberg table's facts as pyiceberg reads them from its metadata: identity partition
columns and their types, the other partition fields, and the table's properties (the isolation
levels pyiceberg validates at)."""

from __future__ import annotations

from typing import Any

from ...core.partvalues import readable_types
from ...core.tablefacts import TableFacts
from .table import ENGINE, PyIcebergTable

#: The properties pyiceberg 0.12 reads its isolation level from (``TableMetadata.isolation_level``):
#: an overwrite (``Operation.OVERWRITE``) the update level, a delete the delete level.
UPDATE_LEVEL = "write.update.isolation-level"
DELETE_LEVEL = "write.delete.isolation-level"
LEVELS = ("serializable", "snapshot")


def pyiceberg_table_facts(iceberg: PyIcebergTable, table: Any = None) -> TableFacts:
    """The facts of the table (``table``: a handle already loaded, else the current one)."""
    handle = table if table is not None else iceberg.load()
    schema = handle.schema()
    identity: list[str] = []
    transforms: list[str] = []
    types: dict[str, str] = {}
    for field in handle.spec().fields:
        source = schema.find_column_name(field.source_id) or field.name
        if str(field.transform) == "identity":
            identity.append(source)
            types[source] = str(schema.find_type(field.source_id))
        else:
            transforms.append(f"{field.transform}({source})")
    return TableFacts(
        table=iceberg.identifier,
        table_format="iceberg",
        engine=ENGINE,
        partition_columns=tuple(identity),
        partition_transforms=tuple(transforms),
        properties=dict(handle.properties),
        partition_column_types=readable_types(types),
    )


def isolation_level(properties: dict[str, str] | Any) -> str:
    """The level pyiceberg validates a table's writes at: ``serializable`` unless both levels it
    reads say ``snapshot`` (a table whose two levels differ is held to the stricter)."""
    levels = {str(properties.get(key, "serializable")).strip().lower() for key in (UPDATE_LEVEL, DELETE_LEVEL)}
    return "snapshot" if levels == {"snapshot"} else "serializable"


__all__ = ["DELETE_LEVEL", "LEVELS", "UPDATE_LEVEL", "isolation_level", "pyiceberg_table_facts"]
