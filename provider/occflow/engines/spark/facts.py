"""A table's facts as a Spark session reads them: Iceberg (``DESCRIBE TABLE EXTENDED``'s
partitioning and table properties) and Delta through delta-spark (``DESCRIBE DETAIL``); for both,
the types of the partition columns from ``DESCRIBE TABLE EXTENDED``'s column rows."""

from __future__ import annotations

from typing import Any

from ...core.engines import SPARK
from ...core.errors import InvalidDeclarationError
from ...core.partvalues import readable_types
from ...core.tablefacts import TableFacts
from .identifiers import quote_table

#: Spark's table providers whose facts occflow reads, and the engine that commits to each: the
#: Spark spec's committers (``core.engines.SPARK``).
ENGINES = {c.table_format: c.name for c in SPARK.commits}


def spark_table_facts(spark: Any, table: str) -> TableFacts:
    """The facts of ``table`` (``catalog.db.table``) in ``spark``'s catalogs.

    An identity partition field is a partition column; a transform (``days(ts)``,
    ``bucket(16, id)``) is recorded in ``partition_transforms``. A table whose provider is
    neither Iceberg nor Delta is an error naming it.
    """
    quoted = quote_table(table)  # every part back-quoted: the name reaches SQL only this way
    try:
        rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quoted}").collect()
    except Exception as exc:  # noqa: BLE001 - Spark's analysis errors differ by catalog
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidDeclarationError(f"cannot read the table facts of {table} on Spark: {first}") from exc
    described = _described(rows)
    provider = described.get("Provider", "").lower()
    if provider == "iceberg":
        return _iceberg_facts(spark, table, quoted, rows)
    if provider == "delta":
        return _delta_facts(spark, table, quoted, rows)
    raise InvalidDeclarationError(
        f"table {table} is a {provider or 'table of unknown provider'} table: occflow reads the facts "
        "of Iceberg and Delta tables (their formats detect conflicts)"
    )


def _described(rows: list[Any]) -> dict[str, str]:
    """``DESCRIBE TABLE EXTENDED``'s key rows (``Provider``, ...), the first of each key."""
    out: dict[str, str] = {}
    for row in rows:
        key, value = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if key and key not in out:
            out[key] = value
    return out


def column_types(rows: list[Any], columns: tuple[str, ...]) -> dict[str, str]:
    """The types of ``columns`` (lower-cased) as ``DESCRIBE TABLE EXTENDED``'s first section
    lists them (one row per column, Spark's ``simpleString``: ``int``, ``date``, ``decimal(10,2)``),
    kept where ``core.partvalues`` reads the type."""
    wanted = {c.lower() for c in columns}
    types: dict[str, str] = {}
    for row in rows:
        key, value = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if not key or key.startswith("#"):
            break  # the column rows end at the first blank or section row
        if key.lower() in wanted:
            types[key.lower()] = value
    return readable_types(types)


def partition_fields(rows: list[Any]) -> list[str]:
    """The partition fields ``DESCRIBE TABLE EXTENDED`` lists. Spark prints them two ways: all
    identity, as Hive's ``# Partition Information`` (a ``# col_name`` header, then one row per
    column); with a transform, as ``# Partitioning`` (``Part 0  ds``, ``Part 1  days(ts)``)."""
    fields: list[str] = []
    section = ""
    for row in rows:
        key, value = str(row["col_name"] or "").strip(), str(row["data_type"] or "").strip()
        if key == "# col_name":
            continue  # the column header of "# Partition Information"
        if key.startswith("#"):
            section = key if key in ("# Partition Information", "# Partitioning") else ""
            continue
        if not key:
            section = ""
        elif section == "# Partition Information":
            fields.append(key)
        elif section == "# Partitioning" and key.startswith("Part "):
            fields.append(value)
    return fields


def _iceberg_facts(spark: Any, table: str, quoted: str, rows: list[Any]) -> TableFacts:
    fields = partition_fields(rows)
    identity = tuple(_unquote(f) for f in fields if "(" not in f)
    transforms = tuple(f for f in fields if "(" in f)
    properties = {str(r["key"]): str(r["value"]) for r in spark.sql(f"SHOW TBLPROPERTIES {quoted}").collect()}
    return TableFacts(
        table=table,
        table_format="iceberg",
        engine=ENGINES["iceberg"],
        partition_columns=identity,
        properties=properties,
        partition_transforms=transforms,
        features=(f"format-version={properties['format-version']}",) if "format-version" in properties else (),
        partition_column_types=column_types(rows, identity),
    )


def _delta_facts(spark: Any, table: str, quoted: str, rows: list[Any]) -> TableFacts:
    detail = spark.sql(f"DESCRIBE DETAIL {quoted}").collect()[0].asDict(recursive=True)
    features = sorted({*(detail.get("tableFeatures") or ())})
    partitioned = tuple(str(c) for c in detail.get("partitionColumns") or ())
    return TableFacts(
        table=table,
        table_format="delta",
        engine=ENGINES["delta"],
        partition_columns=partitioned,
        properties={str(k): str(v) for k, v in (detail.get("properties") or {}).items()},
        features=tuple(features),
        partition_column_types=column_types(rows, partitioned),
    )


def _unquote(name: str) -> str:
    """A partition field as Spark prints it: back-quoted when the name needs quoting."""
    if len(name) >= 2 and name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name
