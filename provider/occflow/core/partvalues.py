"""Partition values as the engine compares them (issue 33, item 1).

A literal in a write's condition names a partition by the value the engine casts it to, not by
how it is spelled: ``p = '07'`` on an INT column rewrites ``p=7`` on Spark and on delta-rs, and
``hh = 7`` on a STRING column matches ``'07'``, ``'7'`` and ``' 7'`` on Spark. This module turns a
literal, the column's type and the engine family's cast rules into one of three answers:

- ``Named(keys)``: the partition values it may name, canonical for the type (``()``: none, the
  engine casts it to NULL and the comparison holds for no row);
- ``Anywhere(why)``: any partition may match (the engine compares in another type, or occflow
  does not know how it casts): the whole table, never a guess;
- ``Refused(why)``: every engine family in force refuses the statement (a cast error).

The casts are data (``_TEXT_CASTS``, ``_NUMBER_ON``, ...), one row per column type and cast rule,
each citing where it was measured; ``tests/core/test_partvalues_engines.py`` asks the real
engines (PySpark with ANSI on and off, delta-rs / DataFusion) about every row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from .errors import InvalidDeclarationError


class ColumnType(Enum):
    """A partition column's type, as far as casting a literal goes."""

    INTEGRAL = "integral"  # TINYINT, SMALLINT, INT, BIGINT
    DECIMAL = "decimal"  # DECIMAL(p, s), FLOAT, DOUBLE: compared as numbers
    STRING = "string"  # STRING, VARCHAR(n), CHAR(n)
    DATE = "date"
    TIMESTAMP = "timestamp"
    BOOLEAN = "boolean"


#: Type names as Spark, delta-rs (Delta's schema and Arrow), Iceberg and MaxCompute spell them;
#: parameters (``decimal(10,2)``, ``varchar(8)``, ``date32[day]``) are dropped before the lookup.
TYPE_NAMES: Mapping[str, ColumnType] = MappingProxyType({
    **dict.fromkeys(
        ("tinyint", "smallint", "int", "integer", "bigint", "byte", "short", "long",
         "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"), ColumnType.INTEGRAL),
    **dict.fromkeys(("decimal", "numeric", "dec", "float", "double", "real", "float32", "float64", "decimal128"),
                    ColumnType.DECIMAL),
    **dict.fromkeys(("string", "varchar", "char", "utf8", "large_string", "large_utf8", "string_view", "utf8_view"),
                    ColumnType.STRING),
    **dict.fromkeys(("date", "date32", "date64"), ColumnType.DATE),
    **dict.fromkeys(("timestamp", "timestamp_ntz", "timestamp_ltz", "timestamptz", "datetime"), ColumnType.TIMESTAMP),
    **dict.fromkeys(("boolean", "bool"), ColumnType.BOOLEAN),
})
_TYPE_PARAMS_RE = re.compile(r"[(\[<].*$", re.DOTALL)


def column_type(column: str, spelled: str | ColumnType) -> ColumnType:
    """The type ``spelled`` names (``"int"``, ``"DECIMAL(10,2)"``, ``"timestamp[us]"``)."""
    if isinstance(spelled, ColumnType):
        return spelled
    if not isinstance(spelled, str):
        raise InvalidDeclarationError(f"the type of partition column {column!r} must be a type name, got {spelled!r}")
    name = _TYPE_PARAMS_RE.sub("", spelled.strip().lower()).strip()
    if name.startswith("timestamp"):  # "timestamp with time zone", "timestamp(6)"
        name = "timestamp"
    try:
        return TYPE_NAMES[name]
    except KeyError:
        raise InvalidDeclarationError(
            f"unknown type {spelled!r} for partition column {column!r}; known: "
            f"{', '.join(sorted(TYPE_NAMES))} (with parameters, e.g. decimal(10,2))"
        ) from None


def readable_types(types: Mapping[str, str]) -> dict[str, str]:
    """The columns of ``types`` (lower-cased) whose type names ``column_type`` reads; an engine's
    facts reader keeps only these, so a partition column of a type occflow does not cast (BINARY,
    Iceberg's UUID) is left untyped: its type-dependent literals reach the whole table."""
    out: dict[str, str] = {}
    for column, spelled in types.items():
        try:
            column_type(str(column), str(spelled))
        except InvalidDeclarationError:
            continue
        out[str(column).lower()] = str(spelled).strip().lower()
    return out


class CastRules(Enum):
    """How an engine family casts a literal compared with (or assigned to) a column."""

    SPARK = "spark"  # spark.sql.ansi.enabled=false: an invalid cast is NULL
    SPARK_ANSI = "spark-ansi"  # spark.sql.ansi.enabled=true: an invalid cast fails the statement
    DATAFUSION = "datafusion"  # delta-rs: DataFusion's coercion and Arrow's casts
    # MaxCompute: STRING, BIGINT, DOUBLE, DECIMAL compared with each other as DOUBLE, STRING with
    # DATETIME as DATETIME, no other implicit conversion (help.aliyun.com, "relational operators"
    # and "type conversions": https://www.alibabacloud.com/help/en/maxcompute/type-conversions).
    # Not measured here (no MaxCompute on this machine): where unsure, a rule answers wider.
    MAXCOMPUTE = "maxcompute"
    # pyiceberg binds a value to the column's type (expressions/literals.py StringLiteral.to): a
    # text through Decimal for a number (an integer truncated), date.fromisoformat for a date,
    # TRUE / FALSE in any case for a boolean; what it cannot convert fails the bind (refused).
    # Measured in tests/engines/test_pyiceberg_partition_values.py.
    PYICEBERG = "pyiceberg"


#: The rules an engine (``core.tablefacts.ENGINES``) may run under. Spark's ANSI setting is the
#: session's, which the derivation does not see: both are in force, and a key of either counts.
ENGINE_RULES: Mapping[str, tuple[CastRules, ...]] = MappingProxyType({
    "delta-rs": (CastRules.DATAFUSION,),
    "delta-spark": (CastRules.SPARK, CastRules.SPARK_ANSI),
    "databricks": (CastRules.SPARK, CastRules.SPARK_ANSI),
    "spark-iceberg": (CastRules.SPARK, CastRules.SPARK_ANSI),
    "maxcompute": (CastRules.MAXCOMPUTE,),
    "pyiceberg": (CastRules.PYICEBERG,),
})


def engine_rules(engine: str | None) -> tuple[CastRules, ...]:
    """The cast rules of ``engine``; ``None`` (not named): every family's."""
    if engine is None:
        return tuple(CastRules)
    try:
        return ENGINE_RULES[engine]
    except KeyError:
        raise InvalidDeclarationError(f"unknown engine {engine!r}; engines: {', '.join(ENGINE_RULES)}") from None


class LiteralKind(Enum):
    STRING = "string"  # '07'
    NUMBER = "number"  # 7, -2.5
    BOOLEAN = "boolean"  # TRUE
    DATE = "date"  # DATE '2024-01-01', CAST('2024-01-01' AS DATE)


@dataclass(frozen=True)
class SqlLiteral:
    """A literal as written: its kind and its text (a number's digits, a string's content)."""

    kind: LiteralKind
    text: str


@dataclass(frozen=True)
class Named:
    """The partition values (canonical for the type) the literal may name; ``()``: none."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Anywhere:
    """Any partition may match: why."""

    why: str


@dataclass(frozen=True)
class Refused:
    """The engine refuses the statement: why."""

    why: str


Typed = Named | Anywhere | Refused
#: One rule's answer: a key, ``None`` (cast to NULL: matches nothing), or why not a key.
_Cast = str | None | Anywhere | Refused


# ----------------------------------------------------------------------------- text -> a type

_SPARK_BLANKS = "".join(chr(c) for c in range(0x21))  # UTF8String.trimAll: every char <= ' '
_INTEGER_RE = re.compile(r"[+-]?\d+")
_SPARK_INTEGRAL_RE = re.compile(r"[+-]?\d+(?:\.\d*)?")  # legacy toInt: the fraction is truncated
_DECIMAL_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SPARK_DATE_RE = re.compile(r"(\d{4})(?:-(\d{1,2})(?:-(\d{1,2})(?:[ T].*)?)?)?", re.DOTALL)
_DATAFUSION_DATE_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?: \d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?")
_MAXCOMPUTE_DATE_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_SPARK_TRUE, _SPARK_FALSE = {"t", "true", "y", "yes", "1"}, {"f", "false", "n", "no", "0"}
_ARROW_TRUE = {"t", "tr", "tru", "true", "y", "ye", "yes", "on", "1"}
_ARROW_FALSE = {"f", "fa", "fal", "fals", "false", "n", "no", "of", "off", "0"}


def _integral(text: str) -> str:
    return str(int(text))


def _number_key(number: decimal.Decimal) -> str:
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def _day(groups: Iterable[str | None]) -> str | None:
    try:
        y, m, d = (int(g) if g else 1 for g in groups)
        return dt.date(y, m, d).isoformat()
    except ValueError:
        return None


def _pyiceberg_number(text: str) -> decimal.Decimal | Refused:
    """pyiceberg's ``_parse_numeric_string``: ``Decimal(text)``, finite."""
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        number = decimal.Decimal("NaN")
    return number if number.is_finite() else Refused(f"pyiceberg cannot convert {text!r} to a number")


def _text_to_integral(text: str, rules: CastRules) -> _Cast:
    if rules is CastRules.PYICEBERG:
        parsed = _pyiceberg_number(text)
        return parsed if isinstance(parsed, Refused) else str(int(parsed))  # int() truncates, as pyiceberg's
    if rules is CastRules.MAXCOMPUTE:
        number = _text_to_decimal(text, rules)  # STRING vs BIGINT compares as DOUBLE
        if not isinstance(number, str) or not _INTEGER_RE.fullmatch(number):
            return None
        return number
    if rules is CastRules.DATAFUSION:
        trimmed = text.strip()
        if _INTEGER_RE.fullmatch(trimmed):
            return _integral(trimmed)
        return Refused(f"DataFusion cannot cast {text!r} to an integer (Arrow: 'Cannot cast string')")
    trimmed = text.strip(_SPARK_BLANKS)
    pattern = _SPARK_INTEGRAL_RE if rules is CastRules.SPARK else _INTEGER_RE
    if pattern.fullmatch(trimmed):
        return _integral(trimmed.split(".")[0] or "0")
    if rules is CastRules.SPARK_ANSI:
        return Refused(f"Spark with ANSI on cannot cast {text!r} to an integer (CAST_INVALID_INPUT)")
    return None


def _text_to_decimal(text: str, rules: CastRules) -> _Cast:
    if rules is CastRules.PYICEBERG:  # (a scale other than the column's is refused: wider here)
        parsed = _pyiceberg_number(text)
        return parsed if isinstance(parsed, Refused) else _number_key(parsed)
    trimmed = text.strip(_SPARK_BLANKS) if rules in (CastRules.SPARK, CastRules.SPARK_ANSI) else text.strip()
    if _DECIMAL_RE.fullmatch(trimmed):
        return _number_key(decimal.Decimal(trimmed))
    if rules is CastRules.SPARK_ANSI:
        return Refused(f"Spark with ANSI on cannot cast {text!r} to a number (CAST_INVALID_INPUT)")
    if rules is CastRules.DATAFUSION:
        return Refused(f"DataFusion cannot cast {text!r} to a number")
    return None


def _text_to_date(text: str, rules: CastRules) -> _Cast:
    if rules is CastRules.PYICEBERG:
        try:
            return dt.date.fromisoformat(text).isoformat()
        except ValueError:
            return Refused(f"pyiceberg cannot convert {text!r} to a date (date.fromisoformat)")
    if rules is CastRules.DATAFUSION:
        match = _DATAFUSION_DATE_RE.fullmatch(text)
        day = _day(match.groups()) if match else None
        return day if day is not None else Refused(f"DataFusion cannot cast {text!r} to a date")
    if rules is CastRules.MAXCOMPUTE:
        # MaxCompute wants yyyy-mm-dd with leading zeros; a day without them is still keyed as
        # that day (wider if MaxCompute refuses it, never narrower if it accepts it).
        match = _MAXCOMPUTE_DATE_RE.fullmatch(text)
        return _day(match.groups()) if match else None
    # Spark's stringToDate: yyyy, yyyy-[m]m, yyyy-[m]m-[d]d, then ' ' or 'T' and anything.
    match = _SPARK_DATE_RE.fullmatch(text.strip(_SPARK_BLANKS))
    day = _day(match.groups()) if match else None
    if day is None and rules is CastRules.SPARK_ANSI:
        return Refused(f"Spark with ANSI on cannot cast {text!r} to a date (CAST_INVALID_INPUT)")
    return day


def _text_to_boolean(text: str, rules: CastRules) -> _Cast:
    if rules is CastRules.MAXCOMPUTE:
        return None  # a MaxCompute partition column is never BOOLEAN (its partition key types)
    if rules is CastRules.PYICEBERG:
        upper = text.upper()
        return upper.lower() if upper in ("TRUE", "FALSE") else Refused(f"pyiceberg cannot convert {text!r} to a boolean")
    lowered = text.strip().lower() if rules is CastRules.DATAFUSION else text.strip(_SPARK_BLANKS).lower()
    true, false = (_ARROW_TRUE, _ARROW_FALSE) if rules is CastRules.DATAFUSION else (_SPARK_TRUE, _SPARK_FALSE)
    if lowered in true or lowered in false:
        return "true" if lowered in true else "false"
    if rules is CastRules.SPARK:
        return None
    return Refused(f"{'DataFusion' if rules is CastRules.DATAFUSION else 'Spark with ANSI on'} cannot cast {text!r} to a boolean")


def _text_to_string(text: str, rules: CastRules) -> _Cast:
    return text


def _text_to_timestamp(text: str, rules: CastRules) -> _Cast:
    return Anywhere("a TIMESTAMP partition is keyed by its instant, which the session's time zone decides")


#: A quoted string compared with a column of each type (Spark's ``PromoteStrings``: the string is
#: cast to the column's type, to DOUBLE for a DECIMAL; DataFusion casts the literal likewise;
#: MaxCompute compares STRING with a number as DOUBLE). Measured in tests/core/test_partvalues_engines.py.
_TEXT_CASTS: Mapping[ColumnType, Callable[[str, CastRules], _Cast]] = MappingProxyType({
    ColumnType.INTEGRAL: _text_to_integral,
    ColumnType.DECIMAL: _text_to_decimal,
    ColumnType.STRING: _text_to_string,
    ColumnType.DATE: _text_to_date,
    ColumnType.TIMESTAMP: _text_to_timestamp,
    ColumnType.BOOLEAN: _text_to_boolean,
})


# ----------------------------------------------------------------------------- other literals

def _number_on(column_type: ColumnType, text: str, rules: CastRules) -> _Cast:
    number = decimal.Decimal(text)
    integral = number == number.to_integral_value()
    if column_type is ColumnType.INTEGRAL:
        if integral:
            return _number_key(number)
        if rules in (CastRules.DATAFUSION, CastRules.PYICEBERG):  # pyiceberg rounds a Decimal, half even
            engine = "DataFusion" if rules is CastRules.DATAFUSION else "pyiceberg"
            return Anywhere(f"how {engine} compares {text} with an integer column is not measured")
        return None  # Spark widens the column to DECIMAL, MaxCompute to DOUBLE: 7 is never 7.5
    if column_type is ColumnType.DECIMAL:
        return _number_key(number)
    if column_type is ColumnType.STRING:
        if rules is CastRules.DATAFUSION and _INTEGER_RE.fullmatch(text):
            return _integral(text)  # DataFusion casts the number to text: '7' only
        return Anywhere(
            f"the number {text} compared with a STRING column matches every text the engine casts to it "
            f"('0{text}', ' {text}', ...)"
        )
    spark = rules in (CastRules.SPARK, CastRules.SPARK_ANSI)
    if spark and (column_type is ColumnType.DATE or (column_type is ColumnType.BOOLEAN and rules is CastRules.SPARK_ANSI)):
        return Refused(f"Spark cannot compare a {column_type.value.upper()} column with the number {text} "
                       "(DATATYPE_MISMATCH.BINARY_OP_DIFF_TYPES)")
    if column_type is ColumnType.BOOLEAN and rules in (CastRules.SPARK, CastRules.DATAFUSION):
        if number in (0, 1):
            return "true" if number == 1 else "false"  # Spark's BooleanEquality; DataFusion casts 1 / 0
        if rules is CastRules.SPARK:
            return None  # BooleanEquality: any other number equals neither
    return Anywhere(f"how the engine compares the number {text} with a {column_type.value.upper()} column is not known to occflow")


def _boolean_on(column_type: ColumnType, text: str, rules: CastRules) -> _Cast:
    if column_type is ColumnType.BOOLEAN:
        return text
    if column_type is ColumnType.STRING and rules is CastRules.DATAFUSION:
        return text  # DataFusion casts TRUE to 'true'
    return Anywhere(f"how the engine compares {text.upper()} with a {column_type.value.upper()} column is not known to occflow")


def _date_on(column_type: ColumnType, text: str, rules: CastRules) -> _Cast:
    if column_type is ColumnType.DATE:
        return text
    if column_type is ColumnType.STRING and rules is CastRules.DATAFUSION:
        return Refused("delta-rs cannot compare a STRING column with a DATE (kernel: 'Invalid comparison operation')")
    return Anywhere(f"a DATE compared with a {column_type.value.upper()} column: the engine compares in another type")


def _one_rule(literal: SqlLiteral, column_type: ColumnType, rules: CastRules) -> _Cast:
    if literal.kind is LiteralKind.STRING:
        return _TEXT_CASTS[column_type](literal.text, rules)
    if literal.kind is LiteralKind.NUMBER:
        return _number_on(column_type, literal.text, rules)
    if literal.kind is LiteralKind.BOOLEAN:
        return _boolean_on(column_type, literal.text, rules)
    return _date_on(column_type, literal.text, rules)


def partition_value(literal: SqlLiteral, column_type: ColumnType, rules: Iterable[CastRules]) -> Typed:
    """What ``literal`` names on a column of ``column_type`` under every rule in ``rules``: the
    union of their keys (a write commits under one of them), ``Anywhere`` when one may match any
    partition, ``Refused`` only when every one refuses."""
    keys: list[str] = []
    refusals: list[str] = []
    for rule in rules:
        cast = _one_rule(literal, column_type, rule)
        if isinstance(cast, Anywhere):
            return cast
        if isinstance(cast, Refused):
            refusals.append(cast.why)
        elif cast is not None and cast not in keys:
            keys.append(cast)
    if refusals and not keys and len(refusals) == len(set(rules)):
        return Refused("; ".join(refusals))
    return Named(tuple(keys))


#: The types a column of unknown type may have, for a quoted string whose key depends on it.
#: TIMESTAMP is left out: its keys are days, as a declaration's are (``canonical_day``).
UNKNOWN_TYPE_CANDIDATES = (ColumnType.STRING, ColumnType.INTEGRAL, ColumnType.DECIMAL, ColumnType.DATE,
                           ColumnType.BOOLEAN)


def untyped_text_value(text: str, rules: Iterable[CastRules]) -> Typed:
    """A quoted string on a column whose type is not known: every value it may name on any type
    (``'07'`` names ``07`` on a STRING column and ``7`` on an INT one); never one guessed type."""
    keys: list[str] = []
    rules = tuple(rules)
    for candidate in UNKNOWN_TYPE_CANDIDATES:
        typed = partition_value(SqlLiteral(LiteralKind.STRING, text), candidate, rules)
        if isinstance(typed, Anywhere):
            return typed
        if isinstance(typed, Named):
            keys.extend(k for k in typed.keys if k not in keys)
    return Named(tuple(keys))


@dataclass(frozen=True)
class ColumnTyping:
    """The types of a table's partition columns (lower-cased names) and the cast rules in force."""

    types: Mapping[str, ColumnType]
    rules: tuple[CastRules, ...]

    @classmethod
    def of(cls, column_types: Mapping[str, str | ColumnType] | None, engine: str | None) -> ColumnTyping:
        """From type names as the engine spells them (``{"p": "int"}``); ``None``: none known."""
        if column_types is not None and not isinstance(column_types, Mapping):
            raise InvalidDeclarationError(
                f"column_types maps a partition column to its type name, e.g. {{'ds': 'date'}}; got {column_types!r}"
            )
        types = {str(c).lower(): column_type(str(c), t) for c, t in (column_types or {}).items()}
        return cls(MappingProxyType(types), engine_rules(engine))

    def type_of(self, column: str) -> ColumnType | None:
        return self.types.get(column.lower())

    def ordered(self, column: str) -> bool:
        """Whether keys of ``column`` compare (``core.ranges.compare``) as the engine orders them."""
        return self.type_of(column) in (ColumnType.INTEGRAL, ColumnType.DECIMAL, ColumnType.DATE)


#: No column's type known, every engine family's rules.
UNTYPED = ColumnTyping(MappingProxyType({}), tuple(CastRules))


def declared_literal(value: object) -> SqlLiteral | None:
    """A declared partition value (``partitions={"p": "07"}``) as the literal it stands for; ``None``
    for a value that is not a scalar literal."""
    if isinstance(value, bool):
        return SqlLiteral(LiteralKind.BOOLEAN, "true" if value else "false")
    if isinstance(value, (int, decimal.Decimal)) or (isinstance(value, float) and value == value):
        return SqlLiteral(LiteralKind.NUMBER, str(value))
    if isinstance(value, dt.datetime):
        return SqlLiteral(LiteralKind.STRING, value.isoformat(sep=" "))
    if isinstance(value, dt.date):
        return SqlLiteral(LiteralKind.DATE, value.isoformat())
    if isinstance(value, str):
        return SqlLiteral(LiteralKind.STRING, value)
    return None


def string_typed_columns(column_types: Mapping[str, str | ColumnType] | None) -> frozenset[str]:
    """The STRING-typed columns of ``column_types`` (lower-cased): a text declared on one of them
    is keyed by its own spelling (``core.ranges.string_key``), not as the day or number it looks
    like. An unknown type name is an error naming it, as ``typed_partition_spec`` gives."""
    typing = ColumnTyping.of(column_types, None)
    return frozenset(c for c, kind in typing.types.items() if kind is ColumnType.STRING)


def typed_partition_spec(
    spec: Mapping[str, object], column_types: Mapping[str, str | ColumnType] | None, engine: str | None
) -> dict[str, object]:
    """A declared partition spec with each value of a typed column as the engine writes it
    (``{"p": "07"}`` on an INT column is ``{"p": "7"}``); columns of unknown type, and ranges,
    are kept as given. A value the engine refuses, or one that names no single partition, is an
    error naming the column, the value and the type. On a STRING column a value stays the plain
    text as declared: ``"2024-5-1"`` is the partition delta-rs writes as ``2024-5-1``, not the day
    ``2024-05-01`` another row's text may hold; that it keeps its spelling is the key maker's to
    know (``string_typed_columns``, ``core.declaration.WriteDeclaration.string_columns``), never the
    value's, which travels to reports, assets and XCom as it is."""
    typing = ColumnTyping.of(column_types, engine)
    out: dict[str, object] = {}
    for column, value in spec.items():
        kind = typing.type_of(str(column))
        literal = declared_literal(value)
        if kind is None or literal is None:
            out[column] = value
            continue
        typed = partition_value(literal, kind, typing.rules)
        if isinstance(typed, Named) and len(typed.keys) == 1:
            out[column] = typed.keys[0]
            continue
        why = (
            typed.why if isinstance(typed, (Anywhere, Refused))
            else "the engine casts it to NULL" if not typed.keys
            else f"the engines in force read it as {' or '.join(typed.keys)}"
        )
        raise InvalidDeclarationError(
            f"partition value {value!r} for {column!r} is no single value of its type {kind.value.upper()} ({why}); "
            f"declare the value as the column holds it"
        )
    return out
