"""Which partitions a SQL condition can hold true in: a condition read as a disjunction of
partition specs (``core.ranges``), never narrower than the rows the condition selects.

Comparisons of a partition column with a literal (``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``,
``IN``, ``BETWEEN``, with ``AND``, ``OR``, ``NOT`` and parentheses) are read. Anything else (a
function of the column, a subquery, a comparison with another column, a condition on other
columns) may hold for any partition, so it constrains nothing, whatever ``NOT`` stands before
it: the reading is a superset of the truth, and each part it could not read is named in
``notes``.

A literal names a partition value as a declaration does (``core.identifiers.canonical_value``:
``1``, ``1.0`` and ``'1'`` are one value). A bound of ``<``, ``>`` or ``BETWEEN`` is read only
when its order does not depend on the column's type: a number, a date (``DATE '2024-01-01'``,
``'2024-01-01'``) or a text that starts with a letter; ``ds > '2024-1-5'`` or ``n < '10'``
compare differently on a date, a number and a text column, so they constrain nothing.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlglot import exp

from .errors import InvalidFootprintError
from .identifiers import canonical_value
from .ranges import ValueRange, canonical_spec_value

#: A conjunction: a column -> one value or a range; ``{}`` holds for every partition.
Spec = dict[str, "str | ValueRange"]
#: Above this many specs a condition is read as the whole table.
MAX_SPECS = 256

_ISO_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_NOT_ORDERED = {"infinity", "inf", "nan"}  # texts a numeric column would read as numbers
_FLIP: dict[type[exp.Expr], type[exp.Expr]] = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE, exp.EQ: exp.EQ, exp.NEQ: exp.NEQ}
_NEGATE: dict[type[exp.Expr], type[exp.Expr]] = {exp.GT: exp.LTE, exp.GTE: exp.LT, exp.LT: exp.GTE, exp.LTE: exp.GT, exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}


class TooManySpecs(Exception):
    """The condition reads as more than ``MAX_SPECS`` partition specs."""


@dataclass(frozen=True)
class Literal:
    """A literal as a partition value (``None`` when no partition value is spelled so) and
    whether its order is the same for every column type (see the module docstring)."""

    value: str | None
    ordered: bool


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
    return scope.unread(node, "not a comparison of a partition column with a literal")


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
    column, other = scope.column(node.this), node.expression
    if column is None:
        column, other, kind = scope.column(node.expression), node.this, _FLIP[kind]
    if column is None:
        return scope.unread(node, "compares no partition column of the target with a literal")
    literal = read_literal(column, other)
    if literal is None or literal.value is None:
        return scope.unread(node, "the other side is not a literal a partition value can be")
    if negated:
        kind = _NEGATE[kind]
    value = literal.value
    if kind is exp.EQ:
        return [{column: value}]
    if not literal.ordered:
        return scope.unread(node, f"{value!r} orders differently on a date, a number and a text column")
    if kind is exp.NEQ:
        return [{column: ValueRange(upper=value, upper_inclusive=False)}, {column: ValueRange(value, False)}]
    make: dict[type[exp.Expr], Callable[[], ValueRange]] = {
        exp.GT: lambda: ValueRange(value, False),
        exp.GTE: lambda: ValueRange(value, True),
        exp.LT: lambda: ValueRange(upper=value, upper_inclusive=False),
        exp.LTE: lambda: ValueRange(upper=value, upper_inclusive=True),
    }
    return [{column: make[kind]()}]


def _in(node: exp.In, scope: ColumnScope, negated: bool) -> list[Spec]:
    column = scope.column(node.this)
    if column is None or node.args.get("query") is not None or node.args.get("unnest") is not None:
        return scope.unread(node, "not a partition column IN a list of literals")
    literals = [read_literal(column, e) for e in node.expressions]
    values = [lit for lit in literals if lit is not None and lit.value is not None]
    if len(values) != len(literals) or not values:
        return scope.unread(node, "a value in the list is not a literal a partition value can be")
    if not negated:
        return [{column: str(lit.value)} for lit in values]
    out: list[Spec] = [{}]
    for value in values:  # NOT IN (a, b) = (< a OR > a) AND (< b OR > b)
        if not value.ordered:
            return scope.unread(node, f"{value.value!r} orders differently on a date, a number and a text column")
        out = both(out, [{column: ValueRange(upper=value.value, upper_inclusive=False)},
                         {column: ValueRange(value.value, False)}])
    return out


def _between(node: exp.Between, scope: ColumnScope, negated: bool) -> list[Spec]:
    column = scope.column(node.this)
    if column is None:
        return scope.unread(node, "not a partition column BETWEEN two literals")
    low, high = read_literal(column, node.args["low"]), read_literal(column, node.args["high"])
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


def read_literal(column: str, node: exp.Expr) -> Literal | None:
    """A literal's partition value: a string, a number (``-2.5``), ``TRUE``, ``DATE 'x'`` or
    ``CAST('x' AS DATE)``; ``None`` for anything else (``NULL``, an expression, a timestamp)."""
    if isinstance(node, exp.Paren):
        return read_literal(column, node.this)
    if isinstance(node, exp.Boolean):
        return Literal("true" if node.this else "false", False)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return _number(column, "-" + node.this.name)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        text = node.this.name
        is_date = node.to.this is exp.DataType.Type.DATE and _ISO_DATE_RE.fullmatch(text)
        return Literal(text, True) if is_date else None
    if not isinstance(node, exp.Literal):
        return None
    if not node.is_string:
        return _number(column, node.name)
    text = node.name
    try:
        value = canonical_value(column, text)
    except InvalidFootprintError:
        return Literal(None, False)  # '/' or a control character: no partition value is spelled so
    ordered = bool(_ISO_DATE_RE.fullmatch(text)) or (text[:1].isalpha() and text.lower() not in _NOT_ORDERED)
    return Literal(value, ordered and value == text)


def _number(column: str, text: str) -> Literal | None:
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return None
    if not number.is_finite():
        return None
    return Literal(canonical_value(column, number), True)


def _short(node: exp.Expr) -> str:
    text = node.sql(dialect="spark")
    return text if len(text) <= 80 else text[:77] + "..."
