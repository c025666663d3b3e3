"""Spark DDL occflow runs itself: ``CREATE TABLE IF NOT EXISTS`` for ``create_if_missing``.

Every identifier is quoted and every type checked against Spark's type names: no text a DAG
passes as a name or a type reaches the statement unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from sqlglot import exp

from ...core.errors import InvalidDeclarationError
from .identifiers import split_table

#: Spark SQL type names a created table's columns may have (``DECIMAL(p, s)`` and
#: ``VARCHAR(n)`` / ``CHAR(n)`` with their numbers): the whole type must match, so no text a DAG
#: passes as a "type" reaches the statement.
_SPARK_TYPE = re.compile(
    r"^(?:STRING|BIGINT|LONG|INT|INTEGER|SMALLINT|SHORT|TINYINT|BYTE|DOUBLE|FLOAT|REAL|BOOLEAN|"
    r"DATE|TIMESTAMP|TIMESTAMP_NTZ|TIMESTAMP_LTZ|BINARY|"
    r"DECIMAL(?:\(\s*\d{1,2}\s*(?:,\s*\d{1,2}\s*)?\))?|(?:VAR)?CHAR\(\s*\d{1,5}\s*\))$",
    re.IGNORECASE,
)
_COLUMN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_USING = {"iceberg": "iceberg", "delta": "delta", "parquet": "parquet", "hive": "hive"}


def table_columns(
    schema: Mapping[str, str] | None, partition_by: Sequence[str], where: str
) -> list[tuple[str, str]]:
    """``schema`` checked: each column a name, each type a Spark type name, each partition
    column one of the columns; an error naming what is wrong otherwise."""
    if not schema:
        raise InvalidDeclarationError(f"{where}: create_if_missing needs schema={{column: Spark SQL type}}")
    columns = []
    for name, kind in schema.items():
        if not isinstance(name, str) or not _COLUMN.match(name):
            raise InvalidDeclarationError(
                f"{where}: create_if_missing: invalid column name {name!r}: use letters, digits and "
                "underscores, not starting with a digit"
            )
        if not isinstance(kind, str) or not _SPARK_TYPE.match(kind.strip()):
            raise InvalidDeclarationError(
                f"{where}: create_if_missing: column {name!r} has type {kind!r}; use a Spark SQL type name "
                "(STRING, BIGINT, INT, DOUBLE, BOOLEAN, DATE, TIMESTAMP, DECIMAL(p,s), ...)"
            )
        columns.append((name, kind.strip().upper()))
    missing = [c for c in partition_by if c not in schema]
    if missing:
        raise InvalidDeclarationError(
            f"{where}: create_if_missing: partition column(s) {missing} are not in the schema "
            f"({', '.join(schema)})"
        )
    return columns


def create_table_sql(
    table_format: str, table: str, schema: Mapping[str, str], partition_by: Sequence[str], where: str
) -> list[str]:
    """The statements that create ``table`` when it is missing: its namespace, then the table,
    built with sqlglot's expression builders (every identifier quoted, every type checked by
    ``table_columns`` and parsed by sqlglot)."""
    columns = table_columns(schema, partition_by, where)
    using = _USING.get(table_format)
    if using is None:
        raise InvalidDeclarationError(f"{where}: create_if_missing: cannot create a {table_format!r} table")
    parts = split_table(table)
    statements = []
    if len(parts) > 1:
        namespace = exp.Create(this=_table(parts[:-1]), kind="NAMESPACE", exists=True)
        statements.append(namespace.sql(dialect="spark"))
    properties: list[exp.Expression] = [exp.FileFormatProperty(this=exp.var(using))]
    if partition_by:
        properties.append(
            exp.PartitionedByProperty(this=exp.Schema(expressions=[_name(c) for c in partition_by]))
        )
    create = exp.Create(
        this=exp.Schema(
            this=_table(parts),
            expressions=[
                exp.ColumnDef(this=_name(n), kind=exp.DataType.build(k, dialect="spark")) for n, k in columns
            ],
        ),
        kind="TABLE",
        exists=True,
        properties=exp.Properties(expressions=properties),
    )
    statements.append(create.sql(dialect="spark"))
    return statements


def _name(part: str) -> exp.Identifier:
    return exp.to_identifier(part, quoted=True)


def _table(parts: Sequence[str]) -> exp.Table:
    """``catalog.db.table`` (any trailing part of it) as a quoted sqlglot table."""
    names = [_name(p) for p in parts]
    keys = ("catalog", "db", "this")[3 - len(names) :]
    return exp.Table(**dict(zip(keys, names, strict=True)))


__all__ = ["create_table_sql", "table_columns"]
