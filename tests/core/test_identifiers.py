"""Table names and partition values have one meaning (issue 11, item 6): hostile spellings are
refused with a message naming the problem, and equal things compare equal."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from occflow.core.declaration import WriteDeclaration, partition_key, validate_table_identifier
from occflow.core.errors import InvalidDeclarationError, InvalidFootprintError
from occflow.core.identifiers import canonical_table, canonical_value


@pytest.mark.parametrize(
    ("spellings", "catalog"),
    [
        (["db.t", "DB.T", "`db`.`t`", "`DB`.t", "lake.db.t", "LAKE.`db`.T"], "lake"),
        (["db.events", "`db`.`events`", "Db.Events"], None),
    ],
)
def test_spellings_of_one_table_are_one_table(spellings: list[str], catalog: str | None) -> None:
    assert len({canonical_table(s, catalog) for s in spellings}) == 1


def test_back_quoted_names_may_hold_spaces_as_spark_and_hive_allow() -> None:
    # One grammar for core and the Spark engine (engines/spark/identifiers.py reads the same).
    assert canonical_table("`a b`.t", "lake") == canonical_table("LAKE.`A B`.`t`") == "lake.`a b`.t"


def test_tables_in_other_catalogs_or_databases_stay_apart() -> None:
    assert canonical_table("other.db.t", "lake") != canonical_table("db.t", "lake")
    assert canonical_table("db1.t") != canonical_table("db2.t")


@pytest.mark.parametrize(
    ("hostile", "why"),
    [
        ("`/some/path`", "a path is not a table name"),
        ("/warehouse/db/t", "a path is not a table name"),
        ("s3://bucket/db/t", "a path is not a table name"),
        ("file:/tmp/t", "a path is not a table name"),
        ("../t", "a path is not a table name"),
        ("db.t\n", "invalid table identifier"),
        ("db.t\x00", "invalid table identifier"),
        ("db.t; DROP TABLE x", "invalid table identifier"),
        ("db.`t`; --", "invalid table identifier"),
        ("db.t'--", "invalid table identifier"),
        ("`a\tb`.t", "invalid table identifier"),
        ("`..`.t", "invalid table identifier"),
        ("` `.t", "invalid table identifier"),
        ("a.b.c.d.e", "invalid table identifier"),
        ("", "non-empty string"),
    ],
)
def test_hostile_table_names_are_refused_with_the_reason(hostile: str, why: str) -> None:
    with pytest.raises(InvalidDeclarationError, match=why):
        validate_table_identifier(hostile)
    with pytest.raises(InvalidDeclarationError):
        WriteDeclaration.create(hostile, "merge", "delta-rs", partitions={"ds": "1"})


@pytest.mark.parametrize("value", [1, 1.0, "1", "1.0", decimal.Decimal("1.00"), "+1"])
def test_numeric_spellings_of_one_value_are_one_partition(value: object) -> None:
    assert partition_key({"ds": value}) == "ds=1"


def test_text_that_only_looks_numeric_stays_text() -> None:
    assert partition_key({"h": "01"}) == "h=01"
    assert partition_key({"ds": "2024-01-01"}) == "ds=2024-01-01"
    assert partition_key({"ds": dt.date(2024, 1, 1)}) == "ds=2024-01-01"
    assert partition_key({"b": True}) == "b=true"


def test_columns_ignore_case_and_order() -> None:
    assert partition_key({"DS": "1", "country": "NL"}) == partition_key({"country": "NL", "ds": 1})
    with pytest.raises(InvalidFootprintError, match="names one column twice"):
        partition_key({"ds": 1, "DS": 2})


@pytest.mark.parametrize("value", ["a/b", "a\x00b", "line\nbreak", "", "x" * 600, float("nan"), float("inf")])
def test_values_that_would_change_the_key_are_refused_at_declaration(value: object) -> None:
    with pytest.raises(InvalidFootprintError, match="partition value"):
        WriteDeclaration.create("db.t", "merge", "delta-rs", partitions={"ds": value})


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_an_integer_and_its_float_and_text_forms_agree(n: int) -> None:
    assert canonical_value("c", n) == canonical_value("c", float(n)) == canonical_value("c", str(n))


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}(\.[A-Za-z_][A-Za-z0-9_]{0,8}){0,2}", fullmatch=True))
def test_canonical_table_is_idempotent(name: str) -> None:
    once = canonical_table(name, "lake")
    assert canonical_table(once, "lake") == once


_DAYS = st.dates(min_value=dt.date(1000, 1, 1), max_value=dt.date(9999, 12, 31))


@given(_DAYS)
def test_every_spelling_of_a_day_is_one_partition(day: dt.date) -> None:
    y, m, d = day.year, day.month, day.day
    spellings: list[object] = [
        day, dt.datetime(y, m, d), dt.datetime(y, m, d, tzinfo=dt.timezone.utc), f"{y}-{m}-{d}",
        f"{y}-{m:02d}-{d}", f"{y}-{m}-{d:02d}", day.isoformat(), f"{day.isoformat()}T00:00:00+00:00",
        f"{day.isoformat()} 00:00:00", f"{y}-{m}-{d}T00:00Z", f" {day.isoformat()} ",
    ]
    assert {partition_key({"ds": s}) for s in spellings} == {f"ds={day.isoformat()}"}


@given(_DAYS, _DAYS)
def test_different_days_stay_different_partitions(a: dt.date, b: dt.date) -> None:
    assert (partition_key({"ds": f"{a.year}-{a.month}-{a.day}"}) == partition_key({"ds": b})) == (a == b)


@pytest.mark.parametrize("text", ["1", "2024", "01", "20240101", "2024-01", "24-1-1", "2024-001-01", "v2024-01-01"])
def test_text_that_is_not_day_shaped_stays_as_written(text: str) -> None:
    assert canonical_value("ds", text) == (text if text not in ("1", "2024", "20240101") else str(int(text)))


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (dt.datetime(2024, 1, 1, 5), "has a time of day"),
        ("2024-01-01T05:00:00", "has a time of day"),
        ("2024-1-1 00:00:01", "has a time of day"),
        ("2024-02-30", "no day of the calendar"),
        ("2024-13-01", "no day of the calendar"),
        pytest.param(10**5000, "digits", id="int-5000-digits"),
        pytest.param("9" * 5000, "at most 512", id="text-5000-digits"),
        pytest.param(decimal.Decimal("1e100000"), "digits", id="decimal-1e100000"),
    ],
)
def test_times_of_day_impossible_days_and_huge_numbers_are_refused_by_column(value: object, why: str) -> None:
    with pytest.raises(InvalidFootprintError, match=why) as caught:
        partition_key({"ds": value})
    assert "'ds'" in str(caught.value) and len(str(caught.value)) < 1000
