"""One meaning for a table name and a partition value, whoever wrote them and how.

Admission, lint and pools compare footprints by these canonical forms: ``db.T``, ```db`.`t```
and (on an engine whose default catalog is ``lake``) ``lake.db.t`` are one table; partition
values ``1``, ``1.0`` and ``"1"`` are one partition, and so are the spellings of one day that
an engine casts to one value of a DATE column (``"2024-1-1"``, ``date(2024, 1, 1)``,
``datetime(2024, 1, 1)``, ``"2024-01-01T00:00:00+00:00"``: all ``2024-01-01``). A path is never a table name: a table
whose location is a path is declared with an explicit ``location``, and that location is
checked by the engine against its warehouse root.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import posixpath
import re
import reprlib
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
#: A day as engines read it when they cast text to DATE: a 4-digit year, 1-2 digit month and day.
_DATE_RE = re.compile(r"([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})")
#: A day with a time of day (what ``{{ ts }}`` or ``str(datetime)`` renders), optionally zoned.
_DATETIME_RE = re.compile(
    r"([0-9]{4}-[0-9]{1,2}-[0-9]{1,2})[T ]([0-9]{1,2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?"
    r"(Z|[+-][0-9]{2}:?[0-9]{2})?",
    re.IGNORECASE,
)

_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlevel = 3


def shown(value: object) -> str:
    """``repr(value)`` for an error message, bounded: a hostile value (a string of a million
    characters, a list nested ten thousand deep) must not make the message itself fail."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # noqa: BLE001 - a value whose __repr__ raises is still named
        return f"<{type(value).__name__}>"


def table_parts(table: object) -> tuple[str, ...]:
    """The parts of ``catalog.db.table`` as written (back-quotes kept); an error says what is wrong."""
    if not isinstance(table, str) or not table:
        raise InvalidDeclarationError(f"table identifier must be a non-empty string, got {shown(table)}")
    if _PATHLIKE_RE.match(table) or "/" in table or "\\" in table:
        raise InvalidDeclarationError(
            f"invalid table identifier {shown(table)}: a path is not a table name; name the table "
            "(db.table) and pass its location explicitly (location=...)"
        )
    if not _TABLE_RE.fullmatch(table):
        raise InvalidDeclarationError(
            f"invalid table identifier {shown(table)}: use catalog.db.table with letters, digits and "
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


_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "file": "file"}


def canonical_location(location: str) -> str:
    """A table's identity when the engine knows where it is (delta-rs writes a path): one
    spelling per place. Local paths become absolute ``file://`` URIs with ``.`` / ``..`` and
    repeated or trailing slashes gone; object-store URIs keep their bucket and key, the scheme
    and host lower-cased (``s3a://`` is ``s3://``). Symlinks are the caller's to resolve."""
    text = str(location).strip()
    if not text or "\x00" in text:
        raise InvalidDeclarationError(f"invalid table location {shown(location)}: an empty or binary path")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() == "file":
        path = rest if sep else text
        return "file://" + posixpath.normpath(posixpath.join("/", os.path.abspath(path)))
    scheme = _SCHEME_ALIASES.get(scheme.lower(), scheme.lower())
    host, _, key = rest.partition("/")
    key = posixpath.normpath("/" + key) if key else "/"
    return f"{scheme}://{host.lower()}{key.rstrip('/') or ''}"


def table_identities(
    table: str, catalog: str | None = None, location: str | None = None, name_location: str | None = None
) -> frozenset[str]:
    """Every key one table is known by, so that two declarations of it meet whoever wrote them
    (an operator, a hand-made ``WriteDeclaration``): they are one table when their keys share one.

    A table whose location is known (``location``: delta-rs writes a path) is that place only:
    two tables of one name in two places are two tables. A table known only by its name is its
    canonical name and, when its engine derives a location from the name (``name_location``:
    where delta-rs writes a table given no path), that location too: the operator that writes
    the name without a path is keyed by exactly that place."""
    if location is not None:
        return frozenset({canonical_location(location)})
    keys = {canonical_table(table, catalog)}
    if name_location is not None:
        keys.add(canonical_location(name_location))
    return frozenset(keys)


def is_canonical_location(text: str) -> bool:
    """Whether ``text`` is a table location as ``canonical_location`` spells it (a lease's table
    may be one); a table name never is (a name with ``:`` or ``/`` is refused)."""
    if not isinstance(text, str) or "://" not in text:
        return False
    try:
        return canonical_location(text) == text
    except InvalidDeclarationError:
        return False


def canonical_value(column: str, value: Any) -> str:
    """A partition value as text with one spelling per value: ``1``, ``1.0``, ``Decimal("1")``
    and ``"1"`` are ``"1"``; booleans are ``true`` / ``false``; a day is ISO ``YYYY-MM-DD``
    (``canonical_day``). Other text is kept as written (``"01"``, ``"2024"``, ``"NL"``)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, decimal.Decimal)):
        text = _number(column, value)
    elif isinstance(value, (dt.datetime, dt.date)):
        text = _iso_day(column, value)
    elif isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:  # before parsing: a 10**6-digit "number" is refused here
            raise InvalidFootprintError(
                f"invalid partition value {shown(value)} for {column!r}: it has {len(value)} characters, "
                f"at most {MAX_VALUE_CHARS} are allowed"
            )
        day = canonical_day(column, value)
        text = day if day is not None else _number_text(column, value)
    else:
        raise InvalidFootprintError(
            f"partition value for {column!r} must be a string, number, boolean or date, got {shown(value)}"
        )
    if not text or len(text) > MAX_VALUE_CHARS or _VALUE_FORBIDDEN_RE.search(text):
        raise InvalidFootprintError(
            f"invalid partition value {shown(value)} for {column!r}: it must be 1..{MAX_VALUE_CHARS} "
            "characters without '/' or control characters"
        )
    return text


def canonical_day(column: str, value: object) -> str | None:
    """The one spelling of a day, ``YYYY-MM-DD``, for every way of writing it that an engine
    casts to one value of a DATE column; ``None`` for text that is not date-shaped.

    - a ``date``, or text ``YYYY-M-D`` (month and day of one or two digits, surrounding blanks
      ignored, as Spark's and Hive's casts do): the ISO day; a date-shaped text that is no day
      (``2024-02-30``) is refused;
    - a ``datetime``, or text ``YYYY-M-D[T ]HH:MM[:SS[.f]][Z|+HH:MM]``, at midnight (in its own
      offset): the day, so ``{{ ts }}`` of a daily run meets ``{{ ds }}``;
    - a ``datetime`` (or such text) with a time of day is refused: admission does not know the
      column's type, and on a DATE column the engine would cast it to its day, so keeping it
      apart from that day could admit two writes of one partition together. Write the day, or,
      for a column that holds times of day, text in the form the column holds (``05`` for an
      ``hour`` column).
    """
    if isinstance(value, dt.date):
        return _iso_day(column, value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    stamp = _DATETIME_RE.fullmatch(text)
    if stamp is not None:
        hour, minute, second, fraction = (int(g or 0) for g in stamp.group(2, 3, 4, 5))
        if (hour, minute, second, fraction) != (0, 0, 0, 0):
            raise InvalidFootprintError(_time_of_day(column, value))
        text = stamp.group(1)
    day = _DATE_RE.fullmatch(text)
    if day is None:
        return None
    try:
        return dt.date(*(int(g) for g in day.groups())).isoformat()
    except ValueError:
        raise InvalidFootprintError(
            f"partition value {shown(value)} for {column!r} is shaped like a date (YYYY-MM-DD) but is no "
            "day of the calendar; write a real day such as '2024-01-31'"
        ) from None


def _iso_day(column: str, value: dt.date) -> str:
    if isinstance(value, dt.datetime):
        if value.time() != dt.time(0):
            raise InvalidFootprintError(_time_of_day(column, value))
        return value.date().isoformat()
    return value.isoformat()


def parse_day(text: str) -> dt.date | None:
    """The day a canonical date-shaped text names (``2024-01-15``), else ``None``; never raises."""
    match = _DATE_RE.fullmatch(text)
    if match is None:
        return None
    try:
        return dt.date(*(int(g) for g in match.groups()))
    except ValueError:
        return None


def _time_of_day(column: str, value: object) -> str:
    return (
        f"partition value {shown(value)} for {column!r} has a time of day; a partition value is a day "
        "(a DATE column casts a time to its day, so admission could not keep this apart from the day's "
        "other writes): pass the day, e.g. datetime.date or '2024-01-01' ({{ ds }} rather than "
        "{{ ts }}), or, for a column that holds times of day, the text the column holds"
    )


def _number(column: str, value: int | float | decimal.Decimal) -> str:
    if isinstance(value, int) and value.bit_length() > 4 * MAX_VALUE_CHARS:
        # str() of an int over 4,300 digits is refused by Python itself: refuse it first, by name.
        raise InvalidFootprintError(
            f"partition value for {column!r} is an integer of about {int(value.bit_length() * 0.30103)} "
            f"digits; at most {MAX_VALUE_CHARS} characters are allowed"
        )
    number = decimal.Decimal(str(value)) if isinstance(value, float) else decimal.Decimal(value)
    if not number.is_finite():
        raise InvalidFootprintError(f"partition value for {column!r} must be finite, got {shown(value)}")
    if abs(number.adjusted()) > MAX_VALUE_CHARS:
        raise InvalidFootprintError(
            f"partition value {shown(value)} for {column!r} would be written with over {MAX_VALUE_CHARS} digits"
        )
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.\d*|\d*\.\d+|\d+)")


def _number_text(column: str, text: str) -> str:
    # Only a number written the way a template renders one (``{{ params.n }}`` -> "1.0") is
    # read as a number; zero-padded text such as "01" or "2024-01-01" stays text.
    if _NUMBER_RE.fullmatch(text) and not re.fullmatch(r"[+-]?0\d.*", text):
        return _number(column, decimal.Decimal(text))
    return text
