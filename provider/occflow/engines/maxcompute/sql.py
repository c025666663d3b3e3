"""A MaxCompute SQL write read as core reads a Spark SQL one, plus the statements only MaxCompute has.

``core.sqlderive`` reads INSERT OVERWRITE / INTO, UPDATE, DELETE, MERGE and TRUNCATE (MaxCompute's
spellings of them are Hive's, which the Spark dialect reads). What it cannot read is MaxCompute's
own DDL-like writes, so they are read here, token by token, and nothing else is accepted:

- ``ALTER TABLE t [PARTITION (col = 'v', ...)] COMPACT MINOR | MAJOR`` (Delta tables);
- ``ALTER TABLE t [PARTITION (col = 'v', ...)] MERGE SMALLFILES`` (small file MERGE).

MaxCompute's matrices (specs 000-002) have no row for MERGE INTO; a MERGE reads its target and
updates or inserts rows, so it is held to UPDATE's row, the stricter of the two in both matrices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlglot import TokenType, exp

from ...core.declaration import WriteDeclaration
from ...core.errors import InvalidDeclarationError
from ...core.identifiers import canonical_table, table_parts
from ...core.operations import Operation
from ...core.sqlderive import DerivedWrite, check_derived_against, derive_write
from ...core.sqlpredicates import read_literal
from ...core.sqlread import dotted_name, job_text, shorten, split_statements, sql_tokens

_ENDINGS = {
    ("COMPACT", "MINOR"): Operation.MINOR_COMPACT,
    ("COMPACT", "MAJOR"): Operation.MAJOR_COMPACT,
    ("MERGE", "SMALLFILES"): Operation.SMALL_FILE_MERGE,
}
MERGE_AS_UPDATE = (
    "MERGE INTO is held to UPDATE's row of the MaxCompute matrix (the specs have no MERGE row; "
    "UPDATE's is the stricter of UPDATE and INSERT INTO)"
)


def read_maxcompute_write(sql: str | Sequence[str], partition_columns: Sequence[str] | None) -> DerivedWrite:
    """What a MaxCompute SQL job writes: operation, partitions (``None``: the whole table)."""
    text, _ = job_text(sql)
    statements = split_statements(text)
    if len(statements) == 1 and _is_alter(statements[0]):
        return _alter_write(statements[0], partition_columns)
    derived = derive_write(sql, partition_columns)
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


def _is_alter(statement: str) -> bool:
    tokens = sql_tokens(statement, "statement")
    return bool(tokens) and tokens[0].text.upper() == "ALTER"


def _alter_write(statement: str, partition_columns: Sequence[str] | None) -> DerivedWrite:
    where = f"statement {shorten(statement)!r}"
    tokens = sql_tokens(statement, where)
    if tokens and tokens[0].token_type is TokenType.COMMAND:  # sqlglot keeps ALTER ... as one command
        tokens = sql_tokens(statement[tokens[0].end + 1 :], where)
    else:
        tokens = tokens[1:]
    if not tokens or tokens[0].token_type is not TokenType.TABLE:
        raise InvalidDeclarationError(f"{where} is not ALTER TABLE: {_EXPECTED}")
    name, rest = dotted_name(tokens[1:])
    if not name:
        raise InvalidDeclarationError(f"{where} names no table: {_EXPECTED}")
    table_parts(name)
    spec, rest = _partition_spec(rest, where)
    ending = tuple(t.text.upper() for t in rest)
    operation = _ENDINGS.get(ending[:2]) if len(ending) == 2 else None
    if operation is None:
        raise InvalidDeclarationError(f"{where}: {_EXPECTED}")
    columns = None if partition_columns is None else {c.lower() for c in partition_columns}
    if spec and columns is not None and set(spec) - columns:
        raise InvalidDeclarationError(
            f"{where}: PARTITION names {sorted(set(spec) - columns)}, not partition columns of the table "
            f"({', '.join(sorted(columns)) or 'none'})"
        )
    kind = operation.value.replace("_", " ")
    if spec:
        why = f"the PARTITION clause confines the {kind} to {', '.join(f'{k}={v}' for k, v in spec.items())}"
        return DerivedWrite(name, operation, (spec,), True, (why,))
    return DerivedWrite(name, operation, None, True, (f"{kind} without a PARTITION clause: the whole table",))


_EXPECTED = (
    "MaxCompute writes by ALTER TABLE are ALTER TABLE t [PARTITION (col = 'v', ...)] COMPACT MINOR | MAJOR "
    "or ... MERGE SMALLFILES"
)


def _partition_spec(tokens: list[Any], where: str) -> tuple[dict[str, Any], list[Any]]:
    """``PARTITION (ds = '2024-01-01', region = 'eu')``: its literal values, and what follows."""
    if not tokens or tokens[0].token_type is not TokenType.PARTITION:
        return {}, tokens
    if len(tokens) < 2 or tokens[1].token_type is not TokenType.L_PAREN:
        raise InvalidDeclarationError(f"{where}: PARTITION needs (column = 'value', ...)")
    spec: dict[str, Any] = {}
    i = 2
    while i + 2 < len(tokens):
        column, eq, value = tokens[i], tokens[i + 1], tokens[i + 2]
        if eq.token_type is not TokenType.EQ or column.token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            break
        literal = _literal(column.text, value)
        if literal is None:
            raise InvalidDeclarationError(f"{where}: the value of partition column {column.text!r} is not a literal")
        spec[column.text.lower()] = literal
        i += 3
        if i < len(tokens) and tokens[i].token_type is TokenType.COMMA:
            i += 1
            continue
        if i < len(tokens) and tokens[i].token_type is TokenType.R_PAREN:
            return spec, tokens[i + 1 :]
        break
    raise InvalidDeclarationError(f"{where}: PARTITION needs (column = 'value', ...) with literal values")


def _literal(column: str, token: Any) -> Any:
    if token.token_type is TokenType.STRING:
        node: exp.Expr = exp.Literal.string(token.text)
    elif token.token_type is TokenType.NUMBER:
        node = exp.Literal.number(token.text)
    else:
        return None
    found = read_literal(column, node)
    return None if found is None or found.value is None else found.value
