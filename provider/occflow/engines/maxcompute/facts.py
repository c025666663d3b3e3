"""A MaxCompute table's facts as PyODPS reports them: partition columns and their types, ``transactional``, the
primary key (a Delta Table has one). ``core.tablefacts`` derives the profile from them."""

from __future__ import annotations

from typing import Any

from ...core.partvalues import readable_types
from ...core.tablefacts import TRANSACTIONAL, TableFacts


def maxcompute_table_facts(client: Any, table: str) -> TableFacts:
    """``client.get_table(table)`` read into ``TableFacts`` (``odps.ODPS`` or the stand-in)."""
    found = client.get_table(table)
    schema = getattr(found, "table_schema", None)
    partitions = list(getattr(schema, "partitions", None) or ())
    columns = tuple(str(getattr(c, "name", c)) for c in partitions)
    # PyODPS's Column.type is an odps.types type whose str() is MaxCompute's name ("bigint",
    # "string", "varchar(10)"); a column without one (the stand-in's) stays untyped.
    types = {str(c.name): str(c.type) for c in partitions if getattr(c, "type", None) is not None}
    properties = {str(k): str(v) for k, v in (getattr(found, "table_properties", None) or {}).items()}
    if getattr(found, "is_transactional", None) is not None:
        # PyODPS reads "Transactional" from the table's reserved metadata, the authoritative place.
        properties[TRANSACTIONAL] = str(bool(found.is_transactional)).lower()
    key = getattr(found, "primary_key", None)
    primary_key = None if key is None else tuple(str(k) for k in ([key] if isinstance(key, str) else key))
    return TableFacts(
        table, "maxcompute", "maxcompute", columns, properties, primary_key=primary_key,
        partition_column_types=readable_types(types),
    )
