"""Narrower where it is safe (issue 33, item 4) on real delta-rs: where it is not. delta-rs
rewrites only the NULL partition for ``IS NULL`` and only the partitions a prefix ``LIKE`` or a
``to_date`` in a MERGE's ``ON`` selects, but its conflict checker does not keep them apart from
writes of other values, so there they pin nothing (on Spark + Iceberg they do: the Iceberg cases
are in test_derivation_fuzz.py, which shares its Spark tables). And a STRING column's
``'2024-5-1'`` is its own partition, which delta-rs commits apart from ``'2024-05-01'``.

Oracles: the ``_delta_log``'s ``add`` / ``remove`` actions of each commit (``TypedDeltaRs``, the
fuzzer's table: p INT, d DATE, b BOOLEAN, hh STRING, with a NULL partition of each column), and
delta-rs's own conflict checker: two writes whose footprints are disjoint commit one over the
other, two that overlap conflict. The same shapes on Spark + Iceberg are in
test_derivation_fuzz.py (they share its Spark tables).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlgen import TYPED_ROWS, Atom, Delete, TypedDeltaRs, TypedMerge, When, outside

from occflow.core.footprint import footprints_overlap
from occflow.core.sqlderive import derive_write

pytest.importorskip("deltalake", reason="delta-rs tests need deltalake (pip install 'airflow-provider-occflow[delta]')")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> TypedDeltaRs:
    return TypedDeltaRs(tmp_path_factory.mktemp("null_like_cast"))


def _derived(engine: TypedDeltaRs, sql: str) -> Any:
    return derive_write(sql, list(engine.columns), engine.engine, column_types=engine.column_types)


def _merge(engine: TypedDeltaRs, on: str) -> TypedMerge:
    rows = tuple(row for row in TYPED_ROWS if row[0] in (1, 11, 13, 17, 19))  # one row of five partitions
    return TypedMerge(engine.tables[0], "t", rows, Atom("{t}id = s.id AND " + on),
                      (When("matched", "update", None, (("v", "{t}v + 1"),)),))


@pytest.mark.parametrize(("where", "touched", "keys"), [
    ("p IS NULL", {(None, "2024-01-01", "true", "7")}, None),
    ("d IS NULL", {("9", None, None, None)}, None),
    ("hh IS NULL AND p = 9", {("9", None, None, None)}, {"p=9"}),
    ("NOT (b IS NOT NULL) AND d = '2024-01-01'", set(), {"d=2024-01-01"}),
])
def test_is_null_on_delta_rs_pins_nothing_though_it_rewrites_only_the_null_partition(
    engine: TypedDeltaRs, where: str, touched: set, keys: set | None
) -> None:
    """delta-rs rewrites only the NULL partition's files (its log), but its conflict checker does
    not keep that partition apart (next test): on delta-rs ``IS NULL`` pins no partition, the
    other conjuncts still do."""
    statement = Delete(engine.tables[0], Atom(where))
    assert engine.touched(statement) == touched
    derived = _derived(engine, statement.sql())
    assert derived.partition_keys() == keys, derived.why
    assert not outside(derived, touched, engine.columns, engine.column_types)


@pytest.mark.parametrize(("on", "touched"), [
    ("{t}hh LIKE 'x%'", {("12", "2025-01-01", "true", "x7")}),
    ("CAST({t}hh AS STRING) LIKE 'x7%'", {("12", "2025-01-01", "true", "x7")}),
    ("to_date({t}d) = '2024-01-01'", {("7", "2024-01-01", "true", "07"), (None, "2024-01-01", "true", "7")}),
    ("{t}p IS NULL", {(None, "2024-01-01", "true", "7")}),
])
def test_a_delta_rs_merge_on_like_cast_or_is_null_conflicts_beyond_what_it_rewrites(
    engine: TypedDeltaRs, tmp_path: Path, on: str, touched: set
) -> None:
    """delta-rs merges only the partitions ``ON`` selects (its log), but its conflict checker reads
    ``LIKE``, ``to_date`` and ``IS NULL`` as matching a removed file of any value: a delete of
    ``hh = '10'`` (a partition the merge never touches) committed first fails the merge. A
    footprint of ``hh >= x AND hh < y`` would have been kept apart from ``hh=10`` and admitted
    both; on delta-rs these shapes pin nothing (the whole table), on Iceberg they do."""
    import shutil

    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    statement = _merge(engine, on)
    assert engine.touched(statement) == touched, statement.sql()  # delta-rs's log
    path = tmp_path / "race"
    shutil.copytree(engine.template, path)
    first, merging = DeltaTable(str(path)), DeltaTable(str(path))
    first.delete("hh = '10'")
    with pytest.raises(CommitFailedError, match="concurrent transaction deleted data"):
        engine._run(statement, merging, None, str(path))
    assert _derived(engine, statement.sql()).partitions is None
    assert derive_write(statement.sql(), list(engine.columns), "spark-iceberg",
                        column_types=engine.column_types).partitions is not None


@pytest.mark.parametrize(("first", "second", "conflict"), [
    ("p IS NULL", "p = 7", True),  # p = 7 reads the removed NULL files as matching
    ("p = 8", "p IS NULL", True),  # p IS NULL reads a removed file of any value as matching
    ("hh = 'x7'", "p IS NULL", True),
    ("p IS NULL", "p < 8", True),
    ("p = 8", "p IS NULL AND d = '2024-01-01'", False),  # another conjunct keeps them apart
    ("p IS NULL", "hh = 'x7'", False),
    ("p = 8", "p < 8", False),
])
def test_delta_rs_conflicts_over_a_null_partition_and_the_footprints_overlap_where_it_does(
    tmp_path: Path, first: str, second: str, conflict: bool
) -> None:
    """delta-rs's own conflict checker, two deletes from one snapshot: where it fails the second,
    the derived footprints overlap (admission keeps them apart); ``IS NULL`` naming the NULL
    partition would have let ``p IS NULL`` and ``p = 7`` run together and one lose."""
    import shutil

    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    fresh = TypedDeltaRs(tmp_path)
    path = tmp_path / "race"
    shutil.copytree(fresh.template, path)
    a, b = DeltaTable(str(path)), DeltaTable(str(path))
    a.delete(first)
    try:
        b.delete(second)
        lost = False
    except CommitFailedError as exc:
        assert "concurrent transaction deleted data" in str(exc), exc
        lost = True
    assert lost is conflict
    keys = [_derived(fresh, f"DELETE FROM db.fz_typed WHERE {w}").partition_keys() for w in (first, second)]
    if conflict:
        assert footprints_overlap(*keys), keys
    # Iceberg's reading (docs/derivation.md) keys p IS NULL apart from p = 7; on delta-rs that
    # would be narrower than the checker, which is what the conflicts above show.
    iceberg = [derive_write(f"DELETE FROM db.fz_typed WHERE {w}", list(fresh.columns), "spark-iceberg",
                            column_types=fresh.column_types).partition_keys() for w in (first, second)]
    if (first, second) == ("p IS NULL", "p = 7"):
        assert not footprints_overlap(*iceberg)


def test_two_spellings_of_a_day_on_a_string_column_are_two_partitions_delta_rs_commits_apart(
    engine: TypedDeltaRs, tmp_path: Path
) -> None:
    """The converse bug of issue 33: ``hh = '2024-5-1'`` rewrites the partition delta-rs spells
    ``2024-5-1`` and no other (its log); the footprint says so, apart from ``hh = '2024-05-01'``."""
    unpadded = Delete(engine.tables[0], Atom("hh = '2024-5-1'"))
    padded = Delete(engine.tables[0], Atom("hh = '2024-05-01'"))
    assert engine.touched(unpadded) == {("11", "2023-12-31", "true", "2024-5-1")}
    assert engine.touched(padded) == {("11", "2024-05-01", "false", "2024-05-01")}
    first, second = _derived(engine, unpadded.sql()), _derived(engine, padded.sql())
    assert first.partition_keys() == {"hh='2024-5-1'"} and second.partition_keys() == {"hh=2024-05-01"}
    assert not footprints_overlap(first.partition_keys(), second.partition_keys())
    # And delta-rs agrees they are apart: both commit from one snapshot.
    import shutil

    from deltalake import DeltaTable

    path = tmp_path / "spellings"
    shutil.copytree(engine.template, path)
    a, b = DeltaTable(str(path)), DeltaTable(str(path))
    a.delete("hh = '2024-5-1'")
    b.delete("hh = '2024-05-01'")
    assert DeltaTable(str(path)).version() == engine.base_version + 2
