"""Narrower where it is safe (issue 33, item 4), against brute force: on Spark + Iceberg ``IS
NULL`` is the NULL partition's key, a prefix ``LIKE`` a range of texts, a no-op ``CAST`` /
``to_date`` of a DATE column the column; elsewhere they pin nothing; and a STRING column's text is
its own spelling (``'2024-5-1'`` is not the partition ``2024-05-01``).

Oracles of their own: a LIKE matcher written here (``_like``) over many texts, and the overlap
of footprints (``footprints_overlap``, the rule admission decides by) between writes that reach
the same rows. The real engines' record of the
same shapes is in tests/engines/test_null_like_cast_real.py and test_derivation_fuzz.py.
"""

from __future__ import annotations

import itertools
import re

import pytest

from occflow.core.declaration import WriteDeclaration
from occflow.core.errors import InvalidDeclarationError
from occflow.core.footprint import footprints_overlap
from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.core.ranges import ValueRange
from occflow.core.sqlderive import check_derived_against, derive_write

TYPES = {"p": "int", "d": "date", "b": "boolean", "hh": "string"}
COLUMNS = list(TYPES)
ENGINES = ["spark-iceberg", "delta-spark", "maxcompute", None]


def _derive(where: str, engine: str | None = "spark-iceberg", types: dict[str, str] | None = TYPES):
    return derive_write(f"DELETE FROM db.t WHERE {where}", COLUMNS, engine, column_types=types)


# ------------------------------------------------------------------------------ IS NULL


def test_is_null_is_the_null_partition_on_iceberg_not_the_whole_table() -> None:
    keys = _derive("p IS NULL AND d = '2024-01-01'", "spark-iceberg").partition_keys()
    assert keys == {"d=2024-01-01/p=__HIVE_DEFAULT_PARTITION__"}


@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark", "maxcompute", None])
def test_is_null_pins_nothing_where_the_engine_does_not_keep_the_null_partition_apart(engine: str | None) -> None:
    """delta-rs's conflict checker does not (tests/engines/test_null_like_cast_real.py); the
    others are not measured."""
    keys = _derive("p IS NULL AND d = '2024-01-01'", engine).partition_keys()
    assert keys == {"d=2024-01-01"}


@pytest.mark.parametrize(("other", "overlaps"), [
    ("p IS NULL", True),
    ("NOT (p IS NOT NULL)", True),
    ("p < 3", True),  # Iceberg finds NULL files for a range open below
    ("NOT (p = 3)", True),
    ("p NOT BETWEEN 3 AND 4", True),
    ("p NOT IN (3, 4)", True),
    ("p <= 2 OR p = 9", True),
    ("p = 3", False),
    ("p IN (3, 4)", False),
    ("p > 2", False),
    ("p BETWEEN 1 AND 4", False),
    ("p IS NOT NULL", True),  # pins nothing: wider
])
def test_a_null_partition_key_meets_exactly_the_writes_that_may_reach_the_null_partition(other: str, overlaps: bool) -> None:
    null = _derive("p IS NULL").partition_keys()
    assert footprints_overlap(null, _derive(other).partition_keys()) is overlaps


def test_a_literal_spelled_as_the_null_key_is_the_whole_table() -> None:
    derived = _derive("hh = '__HIVE_DEFAULT_PARTITION__'")
    assert derived.partitions is None and any("NULL" in w for w in derived.why), derived.why


# ------------------------------------------------------------------------------ LIKE

_TEXTS = sorted({
    "", "x", "x7", "x70", "xa", "xz", "xy", "y", "w", "X", "X7", "xå", "x\U0010ffff", "x~", "x%", "x_",
    "ab", "abc", "ab\U0010ffff", "ac", "aa", "b", "07", "7", "10", "2024-05-01", "2024-5-1", "true", "t",
    *("".join(t) for t in itertools.product("axy7", repeat=2)),
})


def _like(text: str, pattern: str) -> bool:
    """SQL LIKE with Spark's default escape (backslash), written here as the oracle."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out, i = out + re.escape(pattern[i + 1]), i + 2
            continue
        out += ".*" if c == "%" else "." if c == "_" else re.escape(c)
        i += 1
    return re.fullmatch(out, text, re.DOTALL) is not None


@pytest.mark.parametrize("pattern", ["x%", "x7%", "x%7", "ab%", "ab%%", "x", "X%", "xy%z"])
def test_a_prefix_like_is_a_range_holding_every_text_it_matches(pattern: str) -> None:
    derived = _derive(f"hh LIKE '{pattern}'")
    assert derived.partitions is not None, derived.why
    (spec,) = derived.partitions
    held = spec["hh"]
    for text in _TEXTS:
        if not _like(text, pattern):
            continue
        if isinstance(held, str):
            assert held == text, (pattern, text, held)
            continue
        assert held.lower <= text and (held.upper is None or text < held.upper), (pattern, text, held)
        if text[:1].isalpha():  # the overlap admission computes, with the key of the text itself
            assert footprints_overlap(derived.partition_keys(), frozenset({f"hh={text}"})), (pattern, text)
    # Narrower than the whole table: a text of another prefix stays apart.
    assert not footprints_overlap(derived.partition_keys(), frozenset({"hh=zzz"}))


@pytest.mark.parametrize("where", [
    "hh LIKE '0%'",  # a digit prefix orders as a number in keys ('1%' holds '10', which 10 < 2 leaves out)
    "hh LIKE '%x'", "hh LIKE '_x%'", "hh NOT LIKE 'x%'", "NOT (hh LIKE 'x%')", "hh ILIKE 'x%'",
    "hh LIKE 'x%' ESCAPE '!'", "hh LIKE 'x/%'", "upper(hh) LIKE 'X%'",
    "b LIKE 't%'", "p LIKE 'a%'", "d LIKE 'a%'",  # Spark casts the column to text: not pushed
    "hh LIKE 'x_'", "hh LIKE 'ab_c%'", "hh LIKE 'x\\\\%%'",  # Spark does not push these to Iceberg
])
def test_a_like_no_prefix_range_holds_is_the_whole_table(where: str) -> None:
    assert _derive(where).partitions is None


@pytest.mark.parametrize("engine", ["delta-rs", "delta-spark", "maxcompute", None])
@pytest.mark.parametrize("on", ["t.hh LIKE 'x%'", "to_date(t.d) = '2024-01-01'", "CAST(t.hh AS STRING) = 'x7'"])
def test_like_and_casts_pin_nothing_where_the_engine_does_not_keep_them_apart(engine: str | None, on: str) -> None:
    """delta-rs's conflict checker reads them as matching a removed file of any value
    (tests/engines/test_null_like_cast_real.py); the others are not measured."""
    merge = derive_write(f"MERGE INTO db.t t USING s ON {on} AND t.id = s.id WHEN MATCHED THEN DELETE",
                         COLUMNS, engine, column_types=TYPES)
    assert merge.partitions is None
    assert derive_write(f"MERGE INTO db.t t USING s ON {on} AND t.id = s.id WHEN MATCHED THEN DELETE",
                        COLUMNS, "spark-iceberg", column_types=TYPES).partitions is not None


# ------------------------------------------------------------------------------ date functions

@pytest.mark.parametrize(("where", "keys"), [
    ("CAST(d AS DATE) = '2024-1-1'", {"d=2024-01-01"}),
    ("TRY_CAST(d AS DATE) >= '2024-05-01'", {"d>=2024-05-01"}),
    ("to_date(d) IN ('2024-01-01', DATE '2024-01-02')", {"d=2024-01-01", "d=2024-01-02"}),
    ("date(d) BETWEEN '2024-01-01' AND '2024-01-31'", {"d>=2024-01-01/d<=2024-01-31"}),
    ("CAST(hh AS STRING) = 'x7'", {"hh=x7"}),
])
def test_a_function_that_leaves_the_partition_value_as_it_is_reads_as_the_column(where: str, keys: set[str]) -> None:
    assert _derive(where).partition_keys() == keys


@pytest.mark.parametrize("where", [
    "to_date(d, 'yyyy-MM') = '2024-01-01'",  # a format: another value
    "year(d) = 2024",  # Spark cannot push year() to Iceberg: its conflict filter is the whole table
    "year(CAST(d AS DATE)) >= 2024",
    "CAST(p AS STRING) = '7'", "CAST(hh AS DATE) = '2024-01-01'", "month(d) = 1",
])
def test_other_functions_of_a_partition_column_pin_nothing(where: str) -> None:
    assert _derive(where).partitions is None




# ------------------------------------------------------------------------------ a STRING column's spelling


@pytest.mark.parametrize("engine", ["spark-iceberg", "delta-rs", "delta-spark", "maxcompute"])
def test_on_a_string_column_two_spellings_of_a_day_are_two_partitions(engine: str) -> None:
    unpadded = _derive("hh = '2024-5-1'", engine).partition_keys()
    padded = _derive("hh = '2024-05-01'", engine).partition_keys()
    assert unpadded == {"hh='2024-5-1'"} and padded == {"hh=2024-05-01"}
    assert not footprints_overlap(unpadded, padded)
    # On a DATE column they are one day.
    assert _derive("d = '2024-5-1'", engine).partition_keys() == _derive("d = '2024-05-01'", engine).partition_keys()


@pytest.mark.parametrize(("declared", "key"), [("2024-5-1", "hh='2024-5-1'"), ("2024-05-01", "hh=2024-05-01"),
                                               ("7.0", "hh='7.0'"), ("07", "hh=07"), ("'q'", "hh=''q''")])
def test_a_declared_string_value_keeps_its_spelling_and_the_engine_reads_the_plain_text(declared: str, key: str) -> None:
    declaration = WriteDeclaration("db.t", get_profile("delta-rs"), Operation.DELETE, ({"hh": declared},))
    typed = declaration.with_typed_partitions({"hh": "string"}, "delta-rs")
    assert typed.partition_keys() == {key}
    (spec,) = typed.partitions or ()
    assert spec["hh"] == declared and str(spec["hh"]) == declared  # what the engine's predicate reads
    assert typed.to_dict()["partitions"] == [{"hh": declared}]  # what the report says
    # The SQL that names the same text is held by the typed declaration, another spelling is not.
    literal = declared.replace("'", "\\'")  # Spark SQL escapes a quote with a backslash
    same = derive_write(f"DELETE FROM db.t WHERE hh = '{literal}'", ["hh"], "delta-rs", column_types={"hh": "string"})
    check_derived_against(same, typed)
    other = derive_write("DELETE FROM db.t WHERE hh = 'other'", ["hh"], "delta-rs", column_types={"hh": "string"})
    with pytest.raises(InvalidDeclarationError, match="may touch hh=other"):
        check_derived_against(other, typed)


def test_without_the_type_a_day_shaped_text_names_both_spellings() -> None:
    keys = _derive("hh = '2024-5-1'", types=None).partition_keys()
    assert keys == {"hh='2024-5-1'", "hh=2024-05-01"}
    assert footprints_overlap(keys, _derive("hh = '2024-5-1'").partition_keys())
    assert footprints_overlap(keys, _derive("d = '2024-05-01'").partition_keys().__class__({"hh=2024-05-01"}))


@pytest.mark.parametrize(("value", "inside"), [("'2024-5-1'", True), ("'2024-05-01'", True), ("'2024-04-30'", False)])
def test_a_string_columns_text_orders_as_text_in_a_range(value: str, inside: bool) -> None:
    """On a STRING column ``'2024-5-1' >= '2024-05-01'`` (text order): the quoted key lies inside
    the range the engine selects with, as Spark and DataFusion compare text."""
    ranged = _derive("hh >= '2024-05-01'").partition_keys()
    assert footprints_overlap(ranged, _derive(f"hh = {value}").partition_keys()) is inside
    assert ValueRange("2024-05-01", True).contains("'2024-5-1'")


def test_a_declared_string_value_spelled_as_the_null_key_is_not_the_null_partition() -> None:
    """A STRING column may hold the text ``__HIVE_DEFAULT_PARTITION__``; declared, it is keyed as
    that text (quoted), ordered as text: inside ``hh >= 'A'``, which the NULL partition is not."""
    declaration = WriteDeclaration("db.t", get_profile("delta-rs"), Operation.DELETE,
                                   ({"hh": "__HIVE_DEFAULT_PARTITION__"},))
    keys = declaration.with_typed_partitions({"hh": "string"}, "delta-rs").partition_keys()
    assert keys == {"hh='__HIVE_DEFAULT_PARTITION__'"}
    assert footprints_overlap(keys, _derive("hh >= 'A'").partition_keys())
    assert not footprints_overlap(frozenset({"hh=__HIVE_DEFAULT_PARTITION__"}), _derive("hh >= 'A'").partition_keys())


def test_a_like_on_a_column_of_unknown_type_pins_nothing() -> None:
    """The column may be an INT or a DATE, which Spark casts to text before LIKE (not pushed)."""
    assert _derive("hh LIKE 'x%'", types=None).partitions is None
    assert _derive("hh LIKE 'x%'").partition_keys() == {"hh>=x/hh<y"}


@pytest.mark.parametrize("where", ["b = 0", "b = false", "b IN ('f')", "NOT (b <> false)"])
def test_false_on_a_boolean_column_reaches_its_null_partition_on_iceberg(where: str) -> None:
    """Spark rewrites ``b = false`` into ``NOT b``, and Iceberg finds the NULL partition's files
    for a ``NOT`` (the typed fuzzer, seed 33; tests/engines/test_derivation_fuzz.py)."""
    keys = _derive(where).partition_keys()
    assert keys == {"b=false", "b=__HIVE_DEFAULT_PARTITION__"}
    assert footprints_overlap(keys, _derive("b IS NULL").partition_keys())
    assert not footprints_overlap(_derive("b = true").partition_keys(), _derive("b IS NULL").partition_keys())
    assert _derive(where, "delta-rs").partition_keys() == {"b=false"}  # kernel prunes NULL exactly
