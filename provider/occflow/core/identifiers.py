"""One meaning for a table name and a partition value, whoever wrote them and how.

Admission, lint and pools compare footprints by these canonical forms: ``db.T``, ```db`.`t```
and (on an engine whose default catalog is ``lake``) ``lake.db.t`` are one table; partition
values ``1``, ``1.0`` and ``"1"`` are one partition. A path is never a table name: a table
whose location is a path is declared with an explicit ``location``, and that location is
checked by the engine against its warehouse root.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from typing import Any

from .errors import InvalidDeclarationError, InvalidFootprintError

# One grammar for every engine: a plain identifier, or a back-quoted one that may hold spaces
# (Spark and Hive allow ```my db```) but no other whitespace, quotes, semicolons, path
# separators or control characters (`` doubled is a literal back-quote). A part that is only
# spaces or dots names nothing a catalog or a warehouse directory could hold.
_PLAIN = r"[A-Za-z_][A-Za-z0-9_]*"
_QUOTED = r"`(?![ .]*`(?!`))(?:[^`\s;'\"/\\\x00-\x1f\x7f]| |``)+`"
_PART_RE = re.compile(rf"{_PLAIN}|{_QUOTED}")
_TABLE_RE = re.compile(rf"(?:{_PLAIN}|{_QUOTED})(?:\.(?:{_PLAIN}|{_QUOTED})){{0,3}}")
_PLAIN_RE = re.compile(_PLAIN)
_PATHLIKE_RE = re.compile(r"^[`'\"]?(?:[A-Za-z][A-Za-z0-9+.-]*:|/|\\|\.{1,2}/|~)")
#: Characters a partition value may not hold: ``/`` separates the columns of a key (and the
#: directories of a Hive-style path); control characters (NUL above all) are lost or refused
#: by databases. ``=`` is fine: a key splits on the first ``=`` of each part.
_VALUE_FORBIDDEN_RE = re.compile(r"[/\x00-\x1f\x7f]")
MAX_VALUE_CHARS = 512


def table_parts(table: object) -> tuple[str, ...]:
    """The parts of ``catalog.db.table`` as written (back-quotes kept); an error says what is wrong."""
    if not isinstance(table, str) or not table:
        raise InvalidDeclarationError(f"table identifier must be a non-empty string, got {table!r}")
    if _PATHLIKE_RE.match(table) or "/" in table or "\\" in table:
        raise InvalidDeclarationError(
            f"invalid table identifier {table!r}: a path is not a table name; name the table "
            "(db.table) and pass its location explicitly (location=...)"
        )
    if not _TABLE_RE.fullmatch(table):
        raise InvalidDeclarationError(
            f"invalid table identifier {table!r}: use catalog.db.table with letters, digits and "
            "underscores (or `back-quoted` parts without tabs, newlines, quotes, semicolons, slashes or control characters)"
        )
    return tuple(m.group(0) for m in _PART_RE.finditer(table))


def unquoted_parts(table: str) -> tuple[str, ...]:
    """The parts of ``catalog.db.table`` as names (back-quotes removed, case kept)."""
    return tuple(_unquote(p) for p in table_parts(table))


def _unquote(part: str) -> str:
    if part.startswith("`"):
        return part[1:-1].replace("``", "`")
    return part


def canonical_table(table: str, catalog: str | None = None) -> str:
    """The table's identity: parts unquoted and lower-cased (Spark, Delta, Iceberg and
    MaxCompute resolve identifiers case-insensitively), prefixed with ``catalog`` when the name
    has no catalog of its own; parts that are not plain identifiers are back-quoted again."""
    parts = [_unquote(p).lower() for p in table_parts(table)]
    if catalog and len(parts) == 2:
        parts.insert(0, _unquote(table_parts(catalog)[0]).lower())
    return ".".join(p if _PLAIN_RE.fullmatch(p) else "`" + p.replace("`", "``") + "`" for p in parts)


def canonical_value(column: str, value: Any) -> str:
    """A partition value as text with one spelling per value: ``1``, ``1.0``, ``Decimal("1")``
    and ``"1"`` are ``"1"``; booleans are ``true`` / ``false``; dates and times ISO-8601."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, decimal.Decimal)):
        text = _number(column, value)
    elif isinstance(value, (dt.datetime, dt.date)):
        text = value.isoformat()
    elif isinstance(value, str):
        text = _number_text(value)
    else:
        raise InvalidFootprintError(
            f"partition value for {column!r} must be a string, number, boolean or date, got {value!r}"
        )
    if not text or len(text) > MAX_VALUE_CHARS or _VALUE_FORBIDDEN_RE.search(text):
        raise InvalidFootprintError(
            f"invalid partition value {value!r} for {column!r}: it must be 1..{MAX_VALUE_CHARS} "
            "characters without '/' or control characters"
        )
    return text


def _number(column: str, value: int | float | decimal.Decimal) -> str:
    number = decimal.Decimal(str(value)) if isinstance(value, float) else decimal.Decimal(value)
    if not number.is_finite():
        raise InvalidFootprintError(f"partition value for {column!r} must be finite, got {value!r}")
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.\d*|\d*\.\d+|\d+)")


def _number_text(text: str) -> str:
    # Only a number written the way a template renders one (``{{ params.n }}`` -> "1.0") is
    # read as a number; zero-padded text such as "01" or "2024-01-01" stays text.
    if _NUMBER_RE.fullmatch(text) and not re.fullmatch(r"[+-]?0\d.*", text):
        return _number("", decimal.Decimal(text))
    return text
