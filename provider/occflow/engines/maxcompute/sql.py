"""A MaxCompute SQL write read as core reads a Spark SQL one, plus the statements only MaxCompute has.

``core.sqlderive`` reads INSERT OVERWRITE / INTO, UPDATE, DELETE, MERGE and TRUNCATE (MaxCompute's
spellings of them are Hive's, which the Spark dialect reads). What it cannot read is MaxCompute's
own DDL-like writes, so they are read token by token, and nothing else is accepted:

- ``ALTER TABLE t [PARTITION (col = 'v', ...)] COMPACT MINOR | MAJOR`` (Delta tables);
- ``ALTER TABLE t [PARTITION (col = 'v', ...)] MERGE SMALLFILES`` (small file MERGE).

The statements themselves are read by ``core.sqlread.read_alter_write`` (``occflow explain`` reads
them there too); the table's partition columns are checked here.

MaxCompute's matrices (specs 000-002) have no row for MERGE INTO; a MERGE reads its target and
updates or inserts rows, so it is held to UPDATE's row, the stricter of the two in both matrices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ...core.declaration import WriteDeclaration
from ...core.errors import InvalidDeclarationError
from ...core.identifiers import canonical_table
from ...core.operations import Operation
from ...core.sqlderive import DerivedWrite, check_derived_against, derive_write
from ...core.sqlread import (
    MAXCOMPUTE_ALTER_FORMS,
    is_alter,
    job_text,
    read_alter_write,
    shorten,
    split_statements,
)

MERGE_AS_UPDATE = (
    "MERGE INTO is held to UPDATE's row of the MaxCompute matrix (the specs have no MERGE row; "
    "UPDATE's is the stricter of UPDATE and INSERT INTO)"
)


def read_maxcompute_write(
    sql: str | Sequence[str],
    partition_columns: Sequence[str] | None,
    column_types: Mapping[str, str] | None = None,
) -> DerivedWrite:
    """What a MaxCompute SQL job writes: operation, partitions (``None``: the whole table);
    partition literals keyed as MaxCompute casts them to ``column_types`` where known."""
    text, _ = job_text(sql)
    statements = split_statements(text)
    alters = [s for s in statements if is_alter(s)]
    if alters and len(statements) != 1:
        raise InvalidDeclarationError(
            f"SQL job holds {len(statements)} statements ({'; '.join(shorten(s) for s in statements)}): "
            f"a MaxCompute ALTER TABLE write is not a write alongside other statements; a write task runs "
            f"exactly one ({MAXCOMPUTE_ALTER_FORMS})"
        )
    if alters:
        return alter_derived_write(statements[0], partition_columns)
    derived = derive_write(sql, partition_columns, "maxcompute", column_types=column_types)
    if derived.operation is Operation.MERGE:
        return replace(derived, operation=Operation.UPDATE, why=(*derived.why, MERGE_AS_UPDATE))
    return derived


def check_maxcompute_sql(sql: str | Sequence[str], declaration: WriteDeclaration, where: str) -> DerivedWrite:
    """The job is the declared write, on the declared table, inside the declared partitions."""
    columns = None
    if declaration.partitions:
        columns = list(dict.fromkeys(c.lower() for spec in declaration.partitions for c in spec))
    try:
        derived = read_maxcompute_write(sql, columns)
        written, declared = canonical_table(derived.table, None), canonical_table(declaration.table, None)
        if written != declared:
            raise InvalidDeclarationError(
                f"the SQL job writes {written} but the task declares {declared}; a task writes the table it declares"
            )
        check_derived_against(derived, declaration)
    except InvalidDeclarationError as exc:
        raise InvalidDeclarationError(f"{where}: {exc}") from None
    return derived


def alter_derived_write(statement: str, partition_columns: Sequence[str] | None) -> DerivedWrite:
    """``ALTER TABLE t [PARTITION (...)] COMPACT ... | MERGE SMALLFILES`` (``core.sqlread``) on a
    table partitioned by ``partition_columns`` (``None``: unknown)."""
    found = read_alter_write(statement)
    spec = dict(found.partition)
    columns = None if partition_columns is None else {c.lower() for c in partition_columns}
    if spec and columns is not None and set(spec) - columns:
        raise InvalidDeclarationError(
            f"statement {shorten(statement)!r}: PARTITION names {sorted(set(spec) - columns)}, not partition "
            f"columns of the table ({', '.join(sorted(columns)) or 'none'})"
        )
    kind = found.operation.value.replace("_", " ")
    if spec:
        why = f"the PARTITION clause confines the {kind} to {', '.join(f'{k}={v}' for k, v in spec.items())}"
        return DerivedWrite(found.table, found.operation, (spec,), True, (why,))
    return DerivedWrite(found.table, found.operation, None, True, (f"{kind} without a PARTITION clause: the whole table",))
