"""Which partitions a SQL condition can hold true in: a condition read as a disjunction of
partition specs (``core.ranges``), never narrower than the rows the condition selects.

Comparisons of a partition column with a literal (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``,
``IN``, ``BETWEEN``, with ``AND``, ``OR``, ``NOT`` and parentheses) are read. Anything else (a
function of the column, a subquery, a comparison with another column, a condition on other
columns) may hold for any partition, so it constrains nothing, whatever ``NOT`` stands before
it: the reading is a superset of the truth, and each part it could not read is named in
``notes``.

A literal names the partition values ``core.sqlliterals`` reads from it (the value the engine
casts it to for the column's type), and a bound of ``<``, ``>`` or ``BETWEEN`` is read only when
that order does not depend on the column's type.

Narrower where it is safe (issue 33, item 4):

- ``p IS NULL`` is the NULL partition (``core.ranges.NULL_PARTITION``); a range open below holds
  it too, as Iceberg finds files (``core.ranges``). ``IS NOT NULL`` pins nothing.
- ``c LIKE 'eu%'`` on a STRING column is the range ``eu <= c < ev`` when the pattern is literal text and ``%``
  (Spark rewrites it into ``StartsWith``, pushed to the table) and its prefix (up to the first
  ``%``) starts with a letter: every text that starts with it lies in the range, in the text
  order a STRING column has, and ``core.ranges.compare`` orders a bound that starts with a letter
  as text against any value (a digit prefix would order as a number: ``'1%'`` holds ``'10'``,
  which ``10 < 2`` leaves out). ``NOT LIKE``, ``ILIKE``, ``ESCAPE``, ``_`` pin nothing.
- On a DATE column, ``CAST(d AS DATE)``, ``TRY_CAST(d AS DATE)``, ``date(d)`` and ``to_date(d)``
  (no format) are ``d`` (Spark removes the cast and pushes the comparison); ``CAST(c AS STRING)``
  on a STRING column is ``c``. Any other function of a partition column (``year(d)``: Spark
  cannot push it, so Iceberg's conflict filter is the whole table) pins nothing.

These three shapes confine a column only where ``ColumnScope.narrow_shapes`` says the engine
keeps them apart (``core.sqlderive.NARROW_SHAPES``); elsewhere they pin nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from .errors import InvalidFootprintError
from .partvalues import UNTYPED, ColumnType, ColumnTyping
from .ranges import NULL_PARTITION, ValueRange, canonical_spec_value

# read_literal is re-exported by name: sqlderive, sqlmerge, sqlread and sqlreading import it here.
from .sqlliterals import Literal
from .sqlliterals import read_literal as read_literal

#: A conjunction: a column -> one value or a range; ``{}`` holds for every partition.
Spec = dict[str, "str | ValueRange"]
#: Above this many specs a condition is read as the whole table.
MAX_SPECS = 256

_STRING_TYPES = {exp.DataType.Type.TEXT, exp.DataType.Type.VARCHAR}
_FLIP: dict[type[exp.Expr], type[exp.Expr]] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
_NEGATE: dict[type[exp.Expr], type[exp.Expr]] = {exp.GT: exp.LTE, exp.GTE: exp.LT, exp.LT: exp.GTE, exp.LTE: exp.GT, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}


class TooManySpecs(Exception):
    """The condition reads as more than ``MAX_SPECS`` partition specs."""


@dataclass
class ColumnScope:
    """Which column references name a partition column of the target.

    ``columns``: lower-cased name -> name as declared. ``qualifiers``: the lower-cased names a
    reference may be qualified with (the target's alias or name); ``bare``: whether an
    unqualified name is the target's (not in a MERGE, where it may be the source's).
    """

    columns: Mapping[str, str]
    qualifiers: frozenset[str]
    bare: bool
    notes: list[str] = field(default_factory=list)
    typing: ColumnTyping = UNTYPED
    #: Whether ``IS NULL``, a prefix ``LIKE`` and a cast that leaves a partition column as it is
    #: confine the column: only where the engine keeps such writes apart from writes of other
    #: values, in the files it finds and in its conflict check (``core.sqlderive.NARROW_SHAPES``).
    narrow_shapes: bool = False

    def column(self, node: exp.Expr) -> str | None:
        if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier):
            return None
        name = self.columns.get(node.name.lower())
        if name is None or node.args.get("db") is not None:
            return None
        qualifier = node.table.lower()
        return name if (qualifier in self.qualifiers if qualifier else self.bare) else None

    def mentions(self, node: exp.Expr) -> bool:
        return any(self.column(c) is not None for c in node.find_all(exp.Column))

    def unread(self, node: exp.Expr, why: str) -> list[Spec]:
        """Every partition: ``node`` cannot be read (noted when it names a partition column)."""
        if self.mentions(node):
            self.notes.append(f"{_short(node)}: {why}; it pins no partition")
        return [{}]


def read_condition(node: exp.Expr, scope: ColumnScope, negated: bool = False) -> list[Spec]:
    """The specs in which ``node`` (or, ``negated``, ``NOT node``) may be true; ``[]``: none."""
    if isinstance(node, exp.Paren):
        return read_condition(node.this, scope, negated)
    if isinstance(node, exp.Not):
        return read_condition(node.this, scope, not negated)
    if isinstance(node, (exp.And, exp.Or)):
        left = read_condition(node.this, scope, negated)
        right = read_condition(node.expression, scope, negated)
        conjunction = isinstance(node, exp.And) != negated  # NOT (a OR b) = NOT a AND NOT b
        return both(left, right) if conjunction else either(left, right)
    if isinstance(node, exp.Boolean):
        return [{}] if bool(node.this) != negated else []
    if type(node) in _FLIP:
        return _comparison(node, scope, negated)
    if isinstance(node, exp.In):
        return _in(node, scope, negated)
    if isinstance(node, exp.Between):
        return _between(node, scope, negated)
    if isinstance(node, exp.Is):
        return _is_null(node, scope, negated)
    if isinstance(node, exp.Like):
        return _like(node, scope, negated)
    return scope.unread(node, "not a comparison of a partition column with a literal")


def _is_null(node: exp.Is, scope: ColumnScope, negated: bool) -> list[Spec]:
    column = scope.column(node.this)
    if column is None or not isinstance(node.expression, exp.Null):
        return scope.unread(node, "not a partition column IS NULL")
    if not scope.narrow_shapes:
        return scope.unread(node, "the engine's conflict check does not keep the NULL partition apart from other values")
    if negated:
        return [{}]  # IS NOT NULL: every partition but the NULL one, which no key excludes
    return [{column: NULL_PARTITION}]


def _like(node: exp.Like, scope: ColumnScope, negated: bool) -> list[Spec]:
    column = scope.column(node.this) or _text_of_column(node.this, scope)
    pattern = node.expression
    if column is None or not isinstance(pattern, exp.Literal) or not pattern.is_string:
        return scope.unread(node, "not a partition column LIKE a quoted pattern")
    if not scope.narrow_shapes:
        return scope.unread(node, "the engine's conflict check reads LIKE as matching a file of any value")
    if scope.typing.type_of(column) is not ColumnType.STRING:
        # On another type (or an unknown one) Spark casts the column to text first, and a
        # function of the column is pushed to no table's conflict filter.
        return scope.unread(node, "LIKE of a column not known to be a STRING")
    if negated or node.args.get("negate"):
        return scope.unread(node, "NOT LIKE holds for texts of any prefix")
    if re.search(r"[_\\]", pattern.name):
        # Spark rewrites only a pattern of literal text and '%' into StartsWith, which it pushes
        # to Iceberg's scan and conflict filter; with '_' the filter is the whole table.
        return scope.unread(node, f"the pattern {pattern.name!r} holds '_' or an escape: Spark does not push it to the table")
    prefix = pattern.name.split("%", 1)[0]
    if not prefix[:1].isalpha():
        return scope.unread(node, f"the pattern {pattern.name!r} does not start with a letter, so its range "
                                  "would not order as text against every value")
    try:
        return [{column: _prefix_range(prefix)}]
    except InvalidFootprintError:
        return scope.unread(node, f"no partition key spells the prefix {prefix!r}")


def _prefix_range(prefix: str) -> ValueRange:
    """Every text that starts with ``prefix``: from ``prefix`` to the next text of its length."""
    last = ord(prefix[-1])
    if last >= 0x10FFFF:
        return ValueRange(prefix, True)
    return ValueRange(prefix, True, prefix[:-1] + chr(last + 1), False)


def _text_of_column(node: exp.Expr, scope: ColumnScope) -> str | None:
    """``CAST(c AS STRING)`` of a STRING partition column: the column itself."""
    if scope.narrow_shapes and isinstance(node, (exp.Cast, exp.TryCast)) and node.to.this in _STRING_TYPES:
        column = scope.column(node.this)
        if column is not None and scope.typing.type_of(column) is ColumnType.STRING:
            return column
    return None


def _day_of_column(node: exp.Expr, scope: ColumnScope) -> str | None:
    """A DATE partition column behind ``CAST(d AS DATE)``, ``date(d)``, ``to_date(d)``, nested
    or not (``to_date(CAST(d AS DATE))``): ``d``."""
    inner, peeled = node, False
    while scope.narrow_shapes:
        to_date = isinstance(inner, (exp.Cast, exp.TryCast)) and inner.to.this is exp.DataType.Type.DATE
        if not to_date and not (isinstance(inner, exp.TsOrDsToDate) and inner.args.get("format") is None):
            break
        inner, peeled = inner.this, True
    if not peeled:
        return None
    column = scope.column(inner)
    return column if column is not None and scope.typing.type_of(column) is ColumnType.DATE else None


def both(a: Sequence[Spec], b: Sequence[Spec]) -> list[Spec]:
    """``a AND b``: each pair of specs intersected, the empty ones dropped."""
    out: list[Spec] = []
    for x in a:
        for y in b:
            merged = _intersect(x, y)
            if merged is not None and merged not in out:
                out.append(merged)
                _cap(out)
    return out


def either(a: Sequence[Spec], b: Sequence[Spec]) -> list[Spec]:
    """``a OR b``; a spec that holds everywhere absorbs the rest."""
    if {} in a or {} in b:
        return [{}]
    out = list(a)
    out.extend(s for s in b if s not in out)
    return _cap(out)


def _cap(specs: list[Spec]) -> list[Spec]:
    if len(specs) > MAX_SPECS:
        raise TooManySpecs(f"the condition reads as more than {MAX_SPECS} partition specs")
    return specs


def _intersect(a: Spec, b: Spec) -> Spec | None:
    out = dict(a)
    for column, value in b.items():
        if column not in out:
            out[column] = value
            continue
        met = _meet(out[column], value)
        if met is None:
            return None
        out[column] = canonical_spec_value(column, met)
    return out


def _meet(a: str | ValueRange, b: str | ValueRange) -> str | ValueRange | None:
    if isinstance(a, ValueRange) and isinstance(b, ValueRange):
        return a.intersection(b)
    if isinstance(a, ValueRange):
        return b if a.contains(b) else None
    if isinstance(b, ValueRange):
        return a if b.contains(a) else None
    return a if a == b else None


def _comparison(node: exp.Expr, scope: ColumnScope, negated: bool) -> list[Spec]:
    kind: type[exp.Expr] = type(node)
    column, other = _column_or_same(node.this, scope), node.expression
    if column is None:
        column, other, kind = _column_or_same(node.expression, scope), node.this, _FLIP[kind]
    if column is None:
        return scope.unread(node, "compares no partition column of the target with a literal")
    literal = read_literal(column, other, scope.typing)
    if literal is None or literal.anywhere is not None:
        return scope.unread(node, _not_a_value(literal))
    if literal.nothing:
        return []  # the engine casts the literal to NULL: true for no row, negated or not
    if negated:
        kind = _NEGATE[kind]
    if kind is exp.EQ:
        return _with_false_nulls([{column: value} for value in literal.values], column, scope)
    value = literal.value
    if value is None or not literal.ordered:
        return scope.unread(node, f"{other.sql(dialect='spark')} orders differently on a date, a number and a text column")
    if kind is exp.NEQ:
        return [{column: ValueRange(upper=value, upper_inclusive=False)}, {column: ValueRange(value, False)}]
    make: dict[type[exp.Expr], Callable[[], ValueRange]] = {
        exp.GT: lambda: ValueRange(value, False),
        exp.GTE: lambda: ValueRange(value, True),
        exp.LT: lambda: ValueRange(upper=value, upper_inclusive=False),
        exp.LTE: lambda: ValueRange(upper=value, upper_inclusive=True),
    }
    return [{column: make[kind]()}]


def _with_false_nulls(specs: list[Spec], column: str, scope: ColumnScope) -> list[Spec]:
    """``b = false`` on a BOOLEAN column also reaches its NULL partition where NULL partitions
    are keyed (Spark + Iceberg): Spark rewrites it into ``NOT b``, and Iceberg finds the NULL
    partition's files for a ``NOT`` (the typed fuzzer, seed 33: ``DELETE ... WHERE b = 0``
    rewrote the files of ``b = NULL``), as it does for ``<>``."""
    if scope.narrow_shapes and scope.typing.type_of(column) is ColumnType.BOOLEAN and {column: "false"} in specs:
        return [*specs, {column: NULL_PARTITION}]
    return specs


def _column_or_same(node: exp.Expr, scope: ColumnScope) -> str | None:
    """The partition column ``node`` is, or stands for unchanged (``CAST(d AS DATE)`` of a DATE
    column, ``CAST(c AS STRING)`` of a STRING one)."""
    return scope.column(node) or _day_of_column(node, scope) or _text_of_column(node, scope)


def _not_a_value(literal: Literal | None) -> str:
    if literal is not None and literal.anywhere:
        return literal.anywhere
    return "the other side is not a literal a partition value can be"


def _in(node: exp.In, scope: ColumnScope, negated: bool) -> list[Spec]:
    column = _column_or_same(node.this, scope)
    if column is None or node.args.get("query") is not None or node.args.get("unnest") is not None:
        return scope.unread(node, "not a partition column IN a list of literals")
    literals = [read_literal(column, e, scope.typing) for e in node.expressions]
    if not literals or any(lit is None or lit.anywhere is not None for lit in literals):
        unreadable = next((lit for lit in literals if lit is not None and lit.anywhere), None)
        why = unreadable.anywhere if unreadable is not None else "a value in the list is not a literal a partition value can be"
        return scope.unread(node, str(why))
    named = [lit for lit in literals if lit is not None and not lit.nothing]
    if not negated:
        out: list[Spec] = []
        for lit in named:
            out.extend({column: v} for v in lit.values if {column: v} not in out)
        return _with_false_nulls(out, column, scope)
    if len(named) != len(literals):
        return []  # NOT IN a list holding NULL is never true
    out = [{}]
    for value in named:  # NOT IN (a, b) = (< a OR > a) AND (< b OR > b)
        single = value.value
        if single is not None and not value.in_list_exact:
            return scope.unread(node, f"{single!r} is compared as text by Spark with ANSI off (IN casts {column} to STRING), "
                                      "and the text differs from its value's")
        if single is None or not value.ordered:
            return scope.unread(node, f"{', '.join(value.values)} orders differently on a date, a number and a text column")
        out = both(out, [{column: ValueRange(upper=single, upper_inclusive=False)},
                         {column: ValueRange(single, False)}])
    return out


def _between(node: exp.Between, scope: ColumnScope, negated: bool) -> list[Spec]:
    column = _column_or_same(node.this, scope)
    if column is None:
        return scope.unread(node, "not a partition column BETWEEN two literals")
    low = read_literal(column, node.args["low"], scope.typing)
    high = read_literal(column, node.args["high"], scope.typing)
    if (low is not None and low.nothing) or (high is not None and high.nothing):
        return []  # a bound the engine casts to NULL: true for no row, negated or not
    lower = low.value if low is not None and low.ordered else None
    upper = high.value if high is not None and high.ordered else None
    if negated:
        if lower is None or upper is None:
            return scope.unread(node, "a bound is not a literal whose order is the same on every column type")
        return [{column: ValueRange(upper=lower, upper_inclusive=False)}, {column: ValueRange(upper, False)}]
    if lower is None and upper is None:
        return scope.unread(node, "no bound is a literal whose order is the same on every column type")
    if lower is None or upper is None:
        scope.notes.append(f"{_short(node)}: one bound is not read; the range is open on that side")
    value = ValueRange(lower, True, upper, True)
    return [] if value.is_empty() else [{column: canonical_spec_value(column, value)}]



def _short(node: exp.Expr) -> str:
    text = node.sql(dialect="spark")
    return text if len(text) <= 80 else text[:77] + "..."
