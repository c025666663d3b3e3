"""What a SQL literal names as partition values: the values the engine casts it to for the
column's type, and whether their order is the engine's (``core.sqlpredicates`` reads the
conditions around it; ``core.sqlderive``, ``core.sqlmerge`` and ``core.sqlreading`` the values
a write assigns).

A literal names the partition value the engine casts it to (``core.partvalues``): on a column
whose type is known, ``p = '07'`` on an INT column is ``p=7``, ``hh = 7`` on a STRING column is
any partition (Spark casts the column), and a literal every engine in force refuses is an error.
On a column of unknown type a quoted string names every value it may on any type (``'07'``:
``07`` or ``7``), and a number, a boolean or a date names itself as a declaration does
(``core.identifiers.canonical_value``: ``1``, ``1.0`` and ``'1'`` are one value). A bound of
``<``, ``>`` or ``BETWEEN`` is read only when its order does not depend on the column's type: a
known INT, DECIMAL or DATE column, or else a number, a date (``DATE '2024-01-01'``,
``'2024-01-01'``) or a text that starts with a letter; ``ds > '2024-1-5'`` or ``n < '10'``
compare differently on a date, a number and a text column, so they constrain nothing.

On a STRING column a literal is its own spelling (``core.ranges.string_key``: ``'2024-5-1'`` is
not the partition ``2024-05-01``); on a column of unknown type a quoted string names that
spelling too, beside what it means on every other type.
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass

from sqlglot import exp

from .errors import InvalidDeclarationError, InvalidFootprintError
from .identifiers import canonical_value
from .partvalues import (
    UNTYPED,
    Anywhere,
    CastRules,
    ColumnType,
    ColumnTyping,
    LiteralKind,
    Named,
    Refused,
    SqlLiteral,
    partition_value,
    untyped_text_value,
)
from .ranges import NULL_PARTITION, string_key

_ISO_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_NOT_ORDERED = {"infinity", "inf", "nan"}  # texts a numeric column would read as numbers


@dataclass(frozen=True)
class Literal:
    """A literal as the partition values it may name (``values``; ``()``: none, the engine casts
    it to NULL), whether their order is the engine's (see the module docstring), and why it may
    name any partition (``anywhere``; then ``values`` is empty)."""

    values: tuple[str, ...]
    ordered: bool
    anywhere: str | None = None
    #: Spark with ANSI off compares ``IN`` a list of strings as text (``CAST(p AS STRING)``): the
    #: literal is that value's text too, so ``NOT IN`` excludes just the value.
    in_list_exact: bool = True

    @property
    def value(self) -> str | None:
        """The one value it names, else ``None`` (none, several, or any)."""
        return self.values[0] if len(self.values) == 1 and self.anywhere is None else None

    @property
    def nothing(self) -> bool:
        """It names no partition: a comparison with it holds for no row, negated or not."""
        return not self.values and self.anywhere is None


def read_literal(column: str, node: exp.Expr, typing: ColumnTyping = UNTYPED, *, assigned: bool = False) -> Literal | None:
    """A literal's partition values: a string, a number (``-2.5``), ``TRUE``, ``DATE 'x'`` or
    ``CAST('x' AS DATE)``, cast as the engines in ``typing`` cast it to ``column``'s type;
    ``None`` for anything else (``NULL``, an expression, a timestamp). A literal every engine
    in force refuses for the column's type is an error (``InvalidDeclarationError``), except a
    value ``assigned`` (``SET p = 'x'``, a MERGE's INSERT value): delta-rs casts it only for a row
    that reaches it and commits the rest of the statement when none does (the typed fuzzer,
    ``tests/engines/sqlgen.py``), so refusing it would refuse a write the engine runs; it is read
    as naming any partition instead (the whole table: wider, never narrower)."""
    written = sql_literal(node)
    if written is None:
        return None
    kind = typing.type_of(column)
    if kind is None and written.kind is not LiteralKind.STRING:
        return _untyped(column, written)
    if kind is None:
        typed = untyped_text_value(written.text, typing.rules)
        ordered = _text_ordered(written.text)
    else:
        typed = partition_value(written, kind, typing.rules)
        ordered = typing.ordered(column) or (kind is ColumnType.STRING and _text_ordered(written.text))
    if isinstance(typed, Refused) and assigned:
        return Literal((), False, f"{typed.why}, for a row that reaches the assignment; the engine decides")
    if isinstance(typed, Refused):
        raise InvalidDeclarationError(
            f"{column} compared with {node.sql(dialect='spark')}: {typed.why}; the engine refuses the statement. "
            f"Write a literal of the column's type{f' ({kind.value.upper()})' if kind else ''}"
        )
    if isinstance(typed, Anywhere):
        return Literal((), False, typed.why)
    assert isinstance(typed, Named)
    if written.kind is LiteralKind.STRING and written.text.strip() == NULL_PARTITION:
        return Literal((), False, f"{NULL_PARTITION!r} is how partition keys spell NULL, not a value occflow can key")
    try:
        values = _keys(column, kind, written, typed.keys)
    except InvalidFootprintError:
        return Literal((), False, "no partition value is spelled so ('/' or a control character, or a time of day)")
    if written.kind is LiteralKind.STRING and kind in (None, ColumnType.STRING):
        ordered = ordered and values == (written.text,)
    as_text = kind in (ColumnType.INTEGRAL, ColumnType.DATE) and values == (written.text,)
    exact = written.kind is not LiteralKind.STRING or kind in (None, ColumnType.STRING) or as_text \
        or CastRules.SPARK not in typing.rules
    return Literal(values, ordered and len(values) == 1, in_list_exact=exact)


def _keys(column: str, kind: ColumnType | None, written: SqlLiteral, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The partition key values of ``keys``: a STRING column's text as written
    (``core.ranges.string_key``); on a column of unknown type a quoted string's own spelling
    besides what it means on the other types; canonical values otherwise."""
    if kind is ColumnType.STRING:
        return tuple(dict.fromkeys(string_key(key) for key in keys))
    if kind is None and written.kind is LiteralKind.STRING:
        others = (canonical_value(column, key) for key in keys if key != written.text)
        return tuple(dict.fromkeys((string_key(written.text), *others)))
    return tuple(dict.fromkeys(canonical_value(column, key) for key in keys))


def sql_literal(node: exp.Expr) -> SqlLiteral | None:
    """The literal ``node`` writes, or ``None`` for anything else."""
    if isinstance(node, exp.Paren):
        return sql_literal(node.this)
    if isinstance(node, exp.Boolean):
        return SqlLiteral(LiteralKind.BOOLEAN, "true" if node.this else "false")
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return _number_literal("-" + node.this.name)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        text = node.this.name
        is_date = node.to.this is exp.DataType.Type.DATE and _ISO_DATE_RE.fullmatch(text)
        return SqlLiteral(LiteralKind.DATE, text) if is_date else None
    if not isinstance(node, exp.Literal):
        return None
    if not node.is_string:
        return _number_literal(node.name)
    return SqlLiteral(LiteralKind.STRING, node.name)


def _number_literal(text: str) -> SqlLiteral | None:
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return None
    return SqlLiteral(LiteralKind.NUMBER, text) if number.is_finite() else None


def _text_ordered(text: str) -> bool:
    return bool(_ISO_DATE_RE.fullmatch(text)) or (text[:1].isalpha() and text.lower() not in _NOT_ORDERED)


def _untyped(column: str, written: SqlLiteral) -> Literal:
    """A number, boolean or date on a column of unknown type: the value as a declaration spells
    it (``core.identifiers.canonical_value``)."""
    if written.kind is LiteralKind.BOOLEAN:
        return Literal((written.text,), False)
    if written.kind is LiteralKind.DATE:
        return Literal((written.text,), True)
    # On a STRING column the engine may compare the number's own text (DataFusion deletes the
    # partition '7.0' for ``p = 7.0``): that spelling is named too when it is not the canonical one.
    values = tuple(dict.fromkeys((canonical_value(column, decimal.Decimal(written.text)), string_key(written.text))))
    return Literal(values, len(values) == 1)
