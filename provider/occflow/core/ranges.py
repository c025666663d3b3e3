"""Ranges of partition values: ``ds >= '2024-01-01' AND ds < '2024-02-01'`` as one value.

A partition spec maps a column to a canonical scalar (``"2024-01-01"``) or a ``ValueRange``. A
range travels inside a partition key as comparison parts of its own, ``ds>=2024-01-01/ds<2024-02-01``:
the operator stands right after the column name, where no value can be (a column name holds
only letters, digits and ``_``), so no ordinary value, however it is spelled, reads as a range;
``ds=>x`` is the value ``>x``. Leases keep keys as text and compare them with
``core.footprint.footprints_overlap``, which reads both forms.

Values compare as numbers when both sides are numbers (``9 < 10``), as days when both are days
(``2024-1-9 < 2024-01-10``: every value is canonical first, ``core.identifiers.canonical_value``,
so a bound and a value spelled differently meet), otherwise as text. A number and a text do not
compare: whatever needs an answer for them takes the careful one (they may overlap; one does
not hold the other).

Two spellings stand for what a canonical value cannot (issue 33):

- ``NULL_PARTITION`` (``__HIVE_DEFAULT_PARTITION__``, the directory name Spark, Hive and delta-rs
  give a NULL partition value) is the NULL partition. No literal names it (the SQL reader reads
  a literal spelled so as any partition). A range open below holds it: Iceberg orders NULL below
  every value when it finds the files of ``p < 8``, ``NOT (p = 3)`` or ``p NOT BETWEEN 3 AND 4``
  (measured, ``tests/engines/test_derivation_fuzz.py``). A range with a lower bound never holds
  it. The derivation makes the key only for engines that keep the NULL partition apart
  (``core.sqlderive.NARROW_SHAPES``; not delta-rs, whose conflict checker does not).
- A value quoted in single quotes (``ds='2024-5-1'``) is a STRING column's text as written
  (``string_key``): on a STRING column ``2024-5-1`` and ``2024-05-01`` are two partitions, while
  ``canonical_value`` would spell both ``2024-05-01``. It compares with other values as text, the
  order of a STRING column.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import InvalidFootprintError
from .identifiers import canonical_value, parse_day, shown

_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
#: ``column`` then the comparison, then the value; the longest operators are tried first.
_PART_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(>=|<=|=|>|<)(.*)", re.DOTALL)
_LOWER_OPS = {">=": True, ">": False}
_UPPER_OPS = {"<=": True, "<": False}
#: The key value of a NULL partition (see the module docstring).
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def string_key(text: str) -> str:
    """The key value of a STRING column's ``text``: ``text`` itself when ``canonical_value``
    keeps it, else ``text`` in single quotes (``'2024-5-1'``, ``'1.0'``, ``' 7'``, ``'2024-02-30'``);
    a text that starts with a quote is quoted too, so no quoted key is ambiguous, and so is the
    text ``NULL_PARTITION``, which as a key would be the NULL partition."""
    try:
        kept = canonical_value("value", text) == text
    except InvalidFootprintError:
        kept = False
    if kept and not text.startswith("'") and text != NULL_PARTITION:
        return text
    return canonical_value("value", f"'{text}'")  # '/' and control characters are still refused


def quoted_text(key: str) -> str | None:
    """The text a quoted key value (``string_key``) stands for, else ``None``."""
    return key[1:-1] if len(key) >= 2 and key[0] == "'" and key[-1] == "'" else None


def compare(a: str, b: str) -> int | None:
    """-1, 0 or 1 as ``a`` is below, equal to or above ``b``; ``None`` for a number and a text."""
    a_text, b_text = quoted_text(a), quoted_text(b)
    if a_text is not None or b_text is not None:
        # A STRING column's text as written orders as text; beside a number-shaped value it
        # may be a number column's (the type unknown): no order.
        if (a_text is None and _NUMBER_RE.fullmatch(a)) or (b_text is None and _NUMBER_RE.fullmatch(b)):
            return None
        left, right = a if a_text is None else a_text, b if b_text is None else b_text
        return (left > right) - (left < right)
    a_number, b_number = _NUMBER_RE.fullmatch(a), _NUMBER_RE.fullmatch(b)
    if a_number and b_number:
        x, y = decimal.Decimal(a), decimal.Decimal(b)
        return (x > y) - (x < y)
    if a_number or b_number:
        return None
    a_day, b_day = parse_day(a), parse_day(b)
    if a_day is not None and b_day is not None:
        return (a_day > b_day) - (a_day < b_day)
    return (a > b) - (a < b)


@dataclass(frozen=True)
class ValueRange:
    """The values between ``lower`` and ``upper`` (either may be ``None``: unbounded there).

    Bounds are canonical partition values (``core.identifiers.canonical_value``): ``1.0`` is
    ``"1"``. A range whose bounds meet and are both inclusive is that one value: use
    ``canonical_spec_value`` to get the scalar.
    """

    lower: Any = None
    lower_inclusive: bool = True
    upper: Any = None
    upper_inclusive: bool = True

    def __post_init__(self) -> None:
        if self.lower is None and self.upper is None:
            raise InvalidFootprintError("a value range needs a lower or an upper bound")
        for name in ("lower", "upper"):
            bound = getattr(self, name)
            if bound is None:
                object.__setattr__(self, f"{name}_inclusive", True)  # one spelling of "unbounded"
                continue
            text = canonical_value(f"range {name} bound", bound)
            if text.startswith("="):
                # ``ds>==x`` would read as ``ds>=`` ``=x``: a bound may not start with '='.
                raise InvalidFootprintError(f"a range bound may not start with '=', got {shown(bound)}")
            object.__setattr__(self, name, text)

    def is_empty(self) -> bool:
        """True only when no value can lie in the range (bounds that do not compare: False)."""
        return not _bounds_meet([(self.lower, self.lower_inclusive)], [(self.upper, self.upper_inclusive)])

    def contains(self, value: Any) -> bool:
        """Whether ``value`` may lie in the range (a value that does not compare with a bound may)."""
        text = canonical_value("value", value)
        if text == NULL_PARTITION:
            return self.lower is None  # NULL orders below every value (module docstring)
        if self.lower is not None:
            low = compare(text, self.lower)
            if low is not None and (low < 0 or (low == 0 and not self.lower_inclusive)):
                return False
        if self.upper is not None:
            high = compare(text, self.upper)
            if high is not None and (high > 0 or (high == 0 and not self.upper_inclusive)):
                return False
        return True

    def overlaps(self, other: ValueRange) -> bool:
        """Whether the two ranges may share a value."""
        lowers = [(self.lower, self.lower_inclusive), (other.lower, other.lower_inclusive)]
        uppers = [(self.upper, self.upper_inclusive), (other.upper, other.upper_inclusive)]
        return _bounds_meet(lowers, uppers)

    def intersection(self, other: ValueRange) -> ValueRange | None:
        """The values in both, or ``None`` when they share none. Where two bounds do not
        compare, this range's bound is kept: the result may be wider than the intersection,
        never narrower."""
        if not self.overlaps(other):
            return None
        lower, lower_inc = _tighter((self.lower, self.lower_inclusive), (other.lower, other.lower_inclusive), 1)
        upper, upper_inc = _tighter((self.upper, self.upper_inclusive), (other.upper, other.upper_inclusive), -1)
        return ValueRange(lower, lower_inc, upper, upper_inc)

    def within(self, other: ValueRange) -> bool:
        """Whether every value of this range is surely in ``other``."""
        for mine, theirs, sign in (
            ((self.lower, self.lower_inclusive), (other.lower, other.lower_inclusive), 1),
            ((self.upper, self.upper_inclusive), (other.upper, other.upper_inclusive), -1),
        ):
            if theirs[0] is None:
                continue
            if mine[0] is None:
                return False
            order = compare(mine[0], theirs[0])
            if order is None or order * sign < 0 or (order == 0 and mine[1] and not theirs[1]):
                return False
        return True

    def key_parts(self, column: str) -> list[str]:
        """The range's parts of a partition key: ``["ds>=2024-01-01", "ds<2024-02-01"]``."""
        parts = []
        if self.lower is not None:
            parts.append(f"{column}{'>=' if self.lower_inclusive else '>'}{self.lower}")
        if self.upper is not None:
            parts.append(f"{column}{'<=' if self.upper_inclusive else '<'}{self.upper}")
        return parts

    def to_json(self) -> dict[str, str]:
        """``{"ge": "2024-01-01", "lt": "2024-02-01"}``."""
        out = {}
        if self.lower is not None:
            out["ge" if self.lower_inclusive else "gt"] = self.lower
        if self.upper is not None:
            out["le" if self.upper_inclusive else "lt"] = self.upper
        return out


def _bounds_meet(lowers: Iterable[tuple[str | None, bool]], uppers: Iterable[tuple[str | None, bool]]) -> bool:
    uppers = list(uppers)
    for low, low_inc in lowers:
        for high, high_inc in uppers:
            if low is None or high is None:
                continue
            order = compare(low, high)
            if order is not None and (order > 0 or (order == 0 and not (low_inc and high_inc))):
                return False
    return True


def _tighter(a: tuple[str | None, bool], b: tuple[str | None, bool], sign: int) -> tuple[str | None, bool]:
    """The tighter of two lower (``sign`` 1) or upper (``sign`` -1) bounds."""
    if a[0] is None:
        return b
    if b[0] is None:
        return a
    order = compare(a[0], b[0])
    if order is None or order * sign > 0:
        return a
    if order == 0:
        return a[0], a[1] and b[1]
    return b


def canonical_spec_value(column: str, value: Any, *, as_text: bool = False) -> str | ValueRange:
    """A spec value in its one form: a range whose bounds meet is that value; a scalar is
    canonical text. ``as_text``: the column is known to be STRING, so a text value is its own
    spelling (``string_key``: ``"2024-5-1"`` is not the day ``2024-05-01``). The caller that
    makes the key says so; the value itself stays a plain ``str`` wherever it travels."""
    if isinstance(value, ValueRange):
        if value.lower is not None and value.lower == value.upper and value.lower_inclusive and value.upper_inclusive:
            return str(value.lower)
        return value
    if as_text and isinstance(value, str):
        return string_key(value)
    return canonical_value(column, value)


def values_overlap(a: object, b: object) -> bool:
    """Whether two spec values (canonical scalars or ranges) may name one partition."""
    if isinstance(a, ValueRange) and isinstance(b, ValueRange):
        return a.overlaps(b)
    if isinstance(a, ValueRange):
        return a.contains(b)
    if isinstance(b, ValueRange):
        return b.contains(a)
    return a == b


def value_within(a: object, b: object) -> bool:
    """Whether every partition spec value ``a`` names is surely named by ``b``."""
    if isinstance(b, ValueRange):
        if isinstance(a, ValueRange):
            return a.within(b)
        text = canonical_value("value", a)
        if text == NULL_PARTITION:
            return b.lower is None
        return ValueRange(text, True, text, True).within(b)
    return not isinstance(a, ValueRange) and a == b


def key_value_parts(column: str, value: str | ValueRange) -> list[str]:
    """The parts of a partition key one column contributes: ``ds=x`` or its range parts."""
    if isinstance(value, ValueRange):
        return value.key_parts(column)
    return [f"{column}={value}"]


def parse_key_parts(key: str, parts: Iterable[str]) -> dict[str, str | ValueRange]:
    """A partition key's ``column<op>value`` parts as a spec; a column is ``=`` one value, or
    has at most one lower and one upper bound."""
    found: dict[str, list[tuple[str, str]]] = {}
    for part in parts:
        match = _PART_RE.fullmatch(part)
        if not match or match.group(3) == "":
            raise InvalidFootprintError(
                f"malformed partition key {shown(key)}: expected column=value pairs joined by '/', "
                "like 'ds=2024-01-01/country=NL' (a range: 'ds>=2024-01-01/ds<2024-02-01')"
            )
        found.setdefault(match.group(1), []).append((match.group(2), match.group(3)))
    return {column: _spec_value(key, column, ops) for column, ops in found.items()}


def _spec_value(key: str, column: str, ops: list[tuple[str, str]]) -> str | ValueRange:
    if len(ops) == 1 and ops[0][0] == "=":
        return canonical_value(column, ops[0][1])  # a stored key is canonical; a typed one becomes so
    lowers: list[tuple[str | None, bool]] = [(v, _LOWER_OPS[op]) for op, v in ops if op in _LOWER_OPS]
    uppers: list[tuple[str | None, bool]] = [(v, _UPPER_OPS[op]) for op, v in ops if op in _UPPER_OPS]
    if len(lowers) > 1 or len(uppers) > 1 or len(lowers) + len(uppers) != len(ops):
        raise InvalidFootprintError(
            f"malformed partition key {shown(key)}: column {column!r} twice (one value, or at most one "
            "lower and one upper bound)"
        )
    (low, low_inc), (high, high_inc) = (lowers or [(None, True)])[0], (uppers or [(None, True)])[0]
    value = ValueRange(low, low_inc, high, high_inc)
    if value.is_empty():
        raise InvalidFootprintError(f"partition key {shown(key)}: the range of {column!r} holds no value")
    return value


def spec_json(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A spec as JSON: scalars as text, ranges as ``{"ge": ..., "lt": ...}``."""
    return {c: v.to_json() if isinstance(v, ValueRange) else v for c, v in spec.items()}

