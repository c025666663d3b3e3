"""The differential oracle of issue 23: random SQL writes run on real engines, and every partition
a commit really added a file to or removed one from lies inside the footprint ``derive_write``
derived from its text (``tests/engines/sqlgen.py``; the oracle reads the engines' own metadata
with code of its own). Seeds: ``$OCCFLOW_FUZZ_SEED`` (``random`` for a fresh one), printed; counts:
``$OCCFLOW_FUZZ_COUNT`` (Iceberg) and ``$OCCFLOW_FUZZ_DELTA_COUNT``. A failure prints the
statement the fuzzer shrank it to. More statements: ``bench/fuzz_derivation.py``.

Every derivation is given the table's partition column types (``column_types=``, what
``TableFacts.partition_column_types`` holds); the typed tables (p INT, d DATE, b BOOLEAN, hh STRING
holding digits, issue 33) spell each value every way the engines cast (``'07'``, ``' 7'``,
``'2024-1-1'``, ``'yes'``, ``7`` on the STRING column, ...), hold a NULL in every partition
column and two spellings of one day in the STRING column, and use ``IS NULL``, ``LIKE`` and casts
of partition columns (issue 33, items 4 and 5). Counts: ``$OCCFLOW_FUZZ_TYPED_COUNT`` (Iceberg)
and ``$OCCFLOW_FUZZ_TYPED_DELTA_COUNT``.

The evolved Iceberg tables (``tests/engines/sqlgen_evolved.py``) hold live files under older
partition specs; their footprints go through ``TableFacts.reach`` with the facts occflow's Spark
reader reads from the table, as ``SparkWriteOperator`` applies it (issue 33, items 2 and 5).
Count: ``$OCCFLOW_FUZZ_EVOLVED_COUNT``."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from sqlgen import (
    PARTITION_COLUMNS,
    Atom,
    Delete,
    DeltaRs,
    IcebergOnSpark,
    Merge,
    OldSpecFile,
    ReplaceWhere,
    Tally,
    TypedDeltaRs,
    TypedIcebergOnSpark,
    Update,
    When,
    fuzz,
    outside,
)
from sqlgen_evolved import EVOLUTIONS, EvolvedIcebergOnSpark, fuzz_evolved

from occflow.core.sqlderive import derive_write


def _seed(default: int) -> int:
    """``$OCCFLOW_FUZZ_SEED`` (``random``: a fresh one), else a seed that passes: CI stays
    deterministic; the bench explores."""
    chosen = os.environ.get("OCCFLOW_FUZZ_SEED", str(default))
    return random.SystemRandom().randrange(1, 10**6) if chosen == "random" else int(chosen)


def _report(tally: Tally) -> str:
    found = "\n\n".join(f.describe() for f in tally.narrower)
    refused = "\n".join(f"REFUSED, BUT THE ENGINE COMMITTED IT: {sql}\n  {why}" for sql, why in tally.refused_ran)
    return f"seed {tally.seed}: {tally.summary()}\n{found}\n{refused}"


@pytest.fixture(scope="module")
def iceberg_fuzz(iceberg_engine: object) -> IcebergOnSpark:
    return IcebergOnSpark(iceberg_engine.session(), prefix="fz_test")  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.spark
def test_no_derived_footprint_is_narrower_than_what_an_iceberg_commit_touched(iceberg_fuzz: IcebergOnSpark) -> None:
    seed, count = _seed(373761), int(os.environ.get("OCCFLOW_FUZZ_COUNT", "200"))
    print(f"iceberg fuzz seed {seed}, {count} statements")
    tally = fuzz(iceberg_fuzz, seed, count, "spark")
    print(_report(tally))
    assert not tally.narrower, _report(tally)
    assert tally.contained > count // 5, _report(tally)  # most statements really ran and were checked
    assert tally.rejected < tally.run // 3, (_report(tally), tally.rejections)


@pytest.mark.slow
def test_no_derived_footprint_is_narrower_than_what_a_deltars_commit_touched(tmp_path: Path) -> None:
    pytest.importorskip("deltalake", reason="delta-rs tests need deltalake (pip install 'airflow-provider-occflow[delta]')")
    seed, count = _seed(975947), int(os.environ.get("OCCFLOW_FUZZ_DELTA_COUNT", "400"))
    print(f"delta-rs fuzz seed {seed}, {count} statements")
    tally = fuzz(DeltaRs(tmp_path), seed, count, "deltars")
    print(_report(tally))
    assert not tally.narrower, _report(tally)
    assert tally.contained > count // 5, _report(tally)
    assert tally.rejected < tally.run // 3, (_report(tally), tally.rejections)


@pytest.fixture(scope="module")
def iceberg_typed_fuzz(iceberg_engine: object) -> TypedIcebergOnSpark:
    return TypedIcebergOnSpark(iceberg_engine.session(), prefix="fz_typed_test")  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.spark
def test_no_typed_footprint_is_narrower_than_what_an_iceberg_commit_touched(
    iceberg_typed_fuzz: TypedIcebergOnSpark,
) -> None:
    """Issue 33's shapes on real Spark + Iceberg: ``p = '07'`` on INT, ``PARTITION (p = ' 7')``,
    ``b = 'yes'``, ``hh = 7`` on a STRING holding ``'07'``; and no statement the derivation refuses
    is one Spark commits."""
    seed, count = _seed(33), int(os.environ.get("OCCFLOW_FUZZ_TYPED_COUNT", "80"))
    print(f"typed iceberg fuzz seed {seed}, {count} statements")
    tally = fuzz(iceberg_typed_fuzz, seed, count, "spark", run_refused=True)
    print(_report(tally))
    assert not tally.narrower and not tally.refused_ran, _report(tally)
    assert tally.contained > count // 5, _report(tally)


@pytest.mark.spark
@pytest.mark.parametrize(("where", "reaches_null"), [("p < '08'", True), ("p <= 7", True), ("p > 8", False)])
def test_an_iceberg_range_open_below_rewrites_the_null_partition_and_the_footprint_holds_it(
    iceberg_typed_fuzz: TypedIcebergOnSpark, where: str, reaches_null: bool
) -> None:
    """The typed fuzzer's finding (seed 4242): Iceberg orders NULL below every value when it
    finds files, so a copy-on-write DELETE of ``p < 8`` rewrites the files of ``p = NULL`` (its
    ``files`` table says so) and one of ``p > 8`` does not. A range open below holds the NULL
    partition (``tests/core/test_typed_null_partitions.py``: why that is sound for admission)."""
    engine = iceberg_typed_fuzz
    statement = Delete(engine.tables[0], Atom(where))
    touched = engine.touched(statement)
    assert any(p[0] is None for p in touched) is reaches_null, touched
    derived = derive_write(statement.sql(), list(engine.columns), engine.engine, column_types=engine.column_types)
    assert not outside(derived, touched, engine.columns, engine.column_types, nulls_below=True)
    if reaches_null:  # without the NULL reading the check fails: it can
        assert outside(derived, touched, engine.columns, engine.column_types, nulls_below=False)


# Issue 33, item 4 on Spark + Iceberg: the statement, the partitions its commit touched (the
# ``files`` table before and after), and the footprint derived: narrower than the whole table.
_ICEBERG_NARROW = [
    ("p IS NULL", {(None, "2024-01-01", "true", "7")}, {"p=__HIVE_DEFAULT_PARTITION__"}),
    ("NOT (d IS NOT NULL) AND p = 9", {("9", None, None, None)}, {"d=__HIVE_DEFAULT_PARTITION__/p=9"}),
    # The typed fuzzer's finding (seed 33): Spark rewrites b = false into NOT b, and Iceberg finds
    # the NULL partition's files for it.
    ("b = 0 AND p = 9", {("9", None, None, None)}, {"b=false/p=9", "b=__HIVE_DEFAULT_PARTITION__/p=9"}),
    ("to_date(d) = '2024-5-1'", {("8", "2024-05-01", "true", " 7"), ("10", "2024-05-01", "false", "10"),
                                 ("11", "2024-05-01", "false", "2024-05-01")}, {"d=2024-05-01"}),
    ("CAST(d AS DATE) >= '2025-01-01'", {("12", "2025-01-01", "true", "x7")}, {"d>=2025-01-01"}),
    ("date(d) < '2024-01-01'", {("11", "2023-12-31", "true", "2024-5-1")}, {"d<2024-01-01"}),
    ("hh = '2024-5-1'", {("11", "2023-12-31", "true", "2024-5-1")}, {"hh='2024-5-1'"}),
]


@pytest.mark.spark
@pytest.mark.parametrize(("where", "touched", "keys"), _ICEBERG_NARROW)
def test_is_null_like_and_date_functions_derive_the_iceberg_partitions_not_the_whole_table(
    iceberg_typed_fuzz: TypedIcebergOnSpark, where: str, touched: set, keys: set
) -> None:
    """``IS NULL``, a prefix ``LIKE``, a no-op ``CAST`` / ``to_date`` / ``date`` of a DATE column,
    and a STRING column's own spelling of a day: a copy-on-write DELETE rewrites those
    partitions' files (the ``files`` table), and the derivation names them, as ``keys``."""
    engine = iceberg_typed_fuzz
    statement = Delete(engine.tables[0], Atom(where))
    found = engine.touched(statement)
    # Exactly those, and for a range open below maybe the NULL partition (Iceberg's file finding).
    assert touched <= found and all(None in p for p in found - touched), found
    derived = derive_write(statement.sql(), list(engine.columns), engine.engine, column_types=engine.column_types)
    assert derived.partition_keys() == keys, derived.why
    assert not outside(derived, found, engine.columns, engine.column_types, nulls_below=True)


@pytest.mark.spark
@pytest.mark.parametrize(("where", "regions", "keys"), [
    ("region LIKE 'e%'", {"eu"}, {"region>=e/region<f"}),
    ("CAST(region AS STRING) LIKE 'u%' AND ds = '2024-01-01'", {"us"}, {"ds=2024-01-01/region>=u/region<v"}),
])
def test_a_prefix_like_derives_the_iceberg_partitions_it_rewrites(
    iceberg_fuzz: IcebergOnSpark, where: str, regions: set, keys: set
) -> None:
    """A prefix ``LIKE`` (Spark's ``StartsWith``, pushed to Iceberg) rewrites the files of the
    partitions it selects. (On a table with a NULL partition of the column, Iceberg 1.x fails the
    statement: ``ResidualEvaluator.startsWith`` throws a NullPointerException on the NULL value,
    seen by the typed fuzzer; no commit, nothing to hold.)"""
    statement = Delete(iceberg_fuzz.tables[0], Atom(where))
    found = iceberg_fuzz.touched(statement)
    assert found and {region for _, region in found} == regions, found
    derived = derive_write(statement.sql(), list(PARTITION_COLUMNS), "spark-iceberg",
                           column_types=iceberg_fuzz.column_types)
    assert derived.partition_keys() == keys, derived.why
    assert not outside(derived, found, nulls_below=True)


@pytest.mark.slow
def test_no_typed_footprint_is_narrower_than_what_a_deltars_commit_touched(tmp_path: Path) -> None:
    """The same shapes on real delta-rs; the INT-as-text race of issue 33 (``p = '07'`` vs
    ``p = 7``) is among them."""
    pytest.importorskip("deltalake", reason="delta-rs tests need deltalake (pip install 'airflow-provider-occflow[delta]')")
    seed, count = _seed(3333), int(os.environ.get("OCCFLOW_FUZZ_TYPED_DELTA_COUNT", "300"))
    print(f"typed delta-rs fuzz seed {seed}, {count} statements")
    tally = fuzz(TypedDeltaRs(tmp_path), seed, count, "deltars", run_refused=True)
    print(_report(tally))
    assert not tally.narrower and not tally.refused_ran, _report(tally)
    assert tally.contained > count // 5, _report(tally)
    assert tally.rejected < tally.run // 3, (_report(tally), tally.rejections)


def test_the_typed_oracle_sees_a_footprint_that_leaves_out_the_partition_the_engine_rewrote(tmp_path: Path) -> None:
    """The typed check can fail: ``p = '07'`` rewrites ``p=7`` on delta-rs (its own log); the
    footprint of ``p = '08'`` does not hold it, the typed derivation of ``p = '07'`` does."""
    pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")
    engine = TypedDeltaRs(tmp_path)
    statement = Delete("db.fz_typed", Atom("p = '07' AND hh = '07'"))
    touched = engine.touched(statement)
    assert touched == {("7", "2024-01-01", "true", "07")}  # the engine's own log
    typed = derive_write(statement.sql(), list(engine.columns), "delta-rs", column_types=engine.column_types)
    assert not outside(typed, touched, engine.columns, engine.column_types)
    other = derive_write("DELETE FROM db.fz_typed WHERE p = '08' AND hh = '07'", list(engine.columns), "delta-rs",
                         column_types=engine.column_types)
    assert outside(other, touched, engine.columns, engine.column_types) == touched
    # A STRING column's range orders as text: '07' < '1', though 7 > 1 as a number.
    ranged = derive_write("DELETE FROM db.fz_typed WHERE hh < '1'", list(engine.columns), "delta-rs",
                          column_types=engine.column_types)
    assert not outside(ranged, touched, engine.columns, engine.column_types)


def test_the_oracle_sees_a_footprint_that_leaves_out_where_rows_moved(tmp_path: Path) -> None:
    """The check can fail: rows moved to ds=2024-01-04 are outside a footprint of ds=2024-01-01."""
    pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")
    statement = Update("db.fz", None, (("ds", "'2024-01-04'"),), Atom("ds = '2024-01-01' AND region = 'eu'"))
    touched = DeltaRs(tmp_path).touched(statement)
    assert touched == {("2024-01-01", "eu"), ("2024-01-04", "eu")}
    derived = derive_write(statement.sql(), list(PARTITION_COLUMNS))
    assert not outside(derived, touched)
    too_narrow = derive_write("DELETE FROM db.fz WHERE ds = '2024-01-01' AND region = 'eu'", list(PARTITION_COLUMNS))
    assert outside(too_narrow, touched) == {("2024-01-04", "eu")}


@pytest.mark.spark
def test_a_copy_on_write_merge_with_not_matched_by_source_rewrites_every_partition(
    iceberg_fuzz: IcebergOnSpark,
) -> None:
    """The fuzzer's finding (seed 1): ON pins region=us and the clause region=ap, but Spark joins
    the whole target and rewrites the files of every partition; the derivation says the whole
    table (``tests/core/test_sqlderive_fuzz_findings.py``)."""
    table = iceberg_fuzz.tables[0]
    assert table.endswith("_cow")
    statement = Merge(
        table, "t", ((3, "2024-01-01", "eu", 7),), Atom("{t}region = 'us'"),
        (When("by_source", "update", Atom("{t}region IN ('ap')"), (("v", "{t}v + 1"),)),),
    )
    touched = iceberg_fuzz.touched(statement)
    assert {region for _, region in touched} == {"eu", "us", "ap"}
    assert derive_write(statement.sql(), list(PARTITION_COLUMNS)).partitions is None


# delta-rs finds the files an UPDATE / DELETE / REPLACE WHERE rewrites with only the conjuncts
# delta-kernel translates; DataFusion may split a partition-only piece off any other conjunct and
# the scan drops it (``core.sqlfilefinding``). Each: the statement, the days it cannot select
# whose files delta-rs rewrote all the same.
_REWRITES_BEYOND_THE_PREDICATE = [
    # The bench's finding (seed 4242): NOT IN expanded, ds <> C factored out of the OR, dropped.
    pytest.param(Update, "(ds <> '2024-01-03' AND upper(region) = 'AP') OR ds NOT IN ('2024-01-03', '2024-01-01')",
                 {"2024-01-03"}, id="update-not-in-factored"),
    pytest.param(ReplaceWhere, "(ds <> '2024-01-03' AND upper(region) = 'AP') OR ds NOT IN ('2024-01-03', '2024-01-01')",
                 {"2024-01-03"}, id="replace-where-not-in-factored"),
    # Absorbed: (A AND f) OR A is A, which the scan claims and drops: every file.
    pytest.param(Update, "(ds <> '2024-01-03' AND upper(region) = 'AP') OR ds NOT IN ('2024-01-03')",
                 {"2024-01-03"}, id="update-absorbed"),
    # A function of a data column does it too.
    pytest.param(Delete, "(ds <> '2024-01-01' AND abs(v) = 3) OR ds NOT IN ('2024-01-01', '2024-01-03')",
                 {"2024-01-01"}, id="delete-data-function"),
    # CASE simplified to its comparison, claimed and dropped: every file of the table.
    pytest.param(Delete, "CASE WHEN ds = '2024-01-01' THEN true ELSE false END",
                 {"2024-01-02", "2024-01-03"}, id="delete-case"),
]


def _run_on_deltars(kind: type, where: str, tmp_path: Path) -> tuple[str, set[tuple[str | None, str | None]]]:
    if kind is Update:
        statement: Update | Delete | ReplaceWhere = Update("db.fz", None, (("v", "v + 1"),), Atom(where))
    elif kind is Delete:
        statement = Delete("db.fz", Atom(where))
    else:
        statement = ReplaceWhere("db.fz", Atom(where), ())
    return statement.sql(), DeltaRs(tmp_path).touched(statement)


@pytest.mark.parametrize(("kind", "where", "unselectable"), _REWRITES_BEYOND_THE_PREDICATE)
def test_a_deltars_write_rewrites_files_its_predicate_cannot_select_and_the_footprint_holds_them(
    kind: type, where: str, unselectable: set[str], tmp_path: Path
) -> None:
    pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")
    sql, touched = _run_on_deltars(kind, where, tmp_path)
    assert unselectable <= {ds for ds, _ in touched}, touched  # what delta-rs 1.6 does (find_files.rs)
    derived = derive_write(sql, list(PARTITION_COLUMNS), "delta-rs")
    assert not outside(derived, touched), (derived.to_json(), touched)
    assert any("delta-kernel" in why for why in derived.why), derived.why
    assert derive_write(sql, list(PARTITION_COLUMNS)).partitions is None  # engine not named: read as delta-rs


@pytest.mark.parametrize(("where", "derived_days"), [
    # Every conjunct translates: kernel prunes by partition value and the footprint stays narrow.
    ("(ds <> '2024-01-03' AND region = 'ap') OR ds NOT IN ('2024-01-03', '2024-01-01')", {"2024-01-01", "2024-01-02"}),
    # The translatable conjunct confines; the function of region does not.
    ("ds = '2024-01-01' AND upper(region) = 'AP'", {"2024-01-01"}),
])
def test_a_deltars_write_whose_conjuncts_kernel_translates_keeps_a_narrow_footprint(
    where: str, derived_days: set[str], tmp_path: Path
) -> None:
    pytest.importorskip("deltalake", reason="delta-rs tests need deltalake")
    sql, touched = _run_on_deltars(Update, where, tmp_path)
    derived = derive_write(sql, list(PARTITION_COLUMNS), "delta-rs")
    assert derived.partitions is not None, derived.to_json()
    assert not outside(derived, touched), (derived.to_json(), touched)
    assert {ds for ds, _ in touched} <= derived_days, touched


# ---------------------------------------------------------------- evolved partition specs (issue 33)


@pytest.fixture(scope="module")
def iceberg_evolved(iceberg_engine: object) -> list[EvolvedIcebergOnSpark]:
    """Every evolution of ``EVOLUTIONS``, one table each: copy-on-write and merge-on-read in turn
    (the bench runs both modes of each)."""
    spark = iceberg_engine.session()  # type: ignore[attr-defined]
    modes = ("copy-on-write", "merge-on-read")
    return [EvolvedIcebergOnSpark(spark, e, modes[i % 2], prefix="fz_evo_test") for i, e in enumerate(EVOLUTIONS)]


@pytest.mark.slow
@pytest.mark.spark
def test_no_footprint_through_the_reach_is_narrower_than_what_an_evolved_iceberg_commit_touched(
    iceberg_evolved: list[EvolvedIcebergOnSpark],
) -> None:
    """Tables with live files under older specs (a column added, dropped, replaced, a first spec
    unpartitioned, a bucket transform between): each footprint, widened by the reach of the facts
    read from the real table, holds every file the commit added or removed, an old-spec file
    only by a key that constrains nothing its spec does not pin."""
    seed, count = _seed(3305), int(os.environ.get("OCCFLOW_FUZZ_EVOLVED_COUNT", "200"))
    print(f"evolved iceberg fuzz seed {seed}, {count} statements")
    tally = fuzz_evolved(iceberg_evolved, seed, count)
    print(_report(tally))
    assert not tally.narrower, _report(tally)
    # Narrow footprints really ran and were checked (about one in nine: the reach widens most).
    assert tally.contained > count // 20, _report(tally)
    assert tally.whole_table > count // 8, _report(tally)


@pytest.mark.spark
def test_the_evolved_oracle_sees_the_old_spec_rewrite_that_only_the_reach_holds(
    iceberg_evolved: list[EvolvedIcebergOnSpark],
) -> None:
    """The check can fail: on the table partitioned by ds, then by (ds, region), a copy-on-write
    DELETE of ds=2024-01-01/region=eu rewrites the old-spec file of ds=2024-01-01 (the ``files``
    table), which holds rows of every region, and writes its us and ap rows into the current
    spec. The SQL alone keys it ds=2024-01-01/region=eu, which leaves all that out; through the
    reach it is the whole table. A day no old-spec file holds
    stays narrow and contained."""
    engine = next(e for e in iceberg_evolved if e.evolution.name == "add")
    assert engine.mode == "copy-on-write"
    table = engine.tables[0]
    facts = engine.table_facts(table)
    assert facts is not None and facts.partition_columns == ("ds", "region")
    statement = Delete(table, Atom("ds = '2024-01-01' AND region = 'eu'"))
    touched = engine.touched(statement)
    old = {p for p in touched if isinstance(p, OldSpecFile)}
    first_spec = next(i for i, fields in engine.spec_identity.items() if fields == ("ds",))
    assert {(p.spec_id, p.values) for p in old} == {(first_spec, (("ds", "2024-01-01"),))}, touched
    assert {region for _, region in next(iter(old)).rows} == {"eu", "us", "ap"}  # the file's own rows
    derived = derive_write(statement.sql(), list(engine.columns), engine.engine, column_types=engine.column_types)
    assert derived.partition_keys() == {"ds=2024-01-01/region=eu"}
    missing = outside(derived, touched, engine.columns, engine.column_types, nulls_below=True)
    # The old file, and its other rows, which the rewrite wrote into the current spec's partitions.
    assert missing == old | {("2024-01-01", "us"), ("2024-01-01", "ap")}, missing
    reach = facts.reach(derived.operation, derived.partitions)
    assert reach.partitions is None and "partition spec" in reach.why[0], reach
    narrow = Delete(table, Atom("ds = '2024-01-03' AND region = 'eu'"))
    touched = engine.touched(narrow)
    assert touched == {("2024-01-03", "eu")}, touched
    derived = derive_write(narrow.sql(), list(engine.columns), engine.engine, column_types=engine.column_types)
    assert facts.reach(derived.operation, derived.partitions).partitions == derived.partitions
    assert not outside(derived, touched, engine.columns, engine.column_types, nulls_below=True)


def test_an_old_spec_file_is_held_only_by_a_key_that_holds_every_row_it_holds() -> None:
    """The oracle's reading of an old-spec file, on keys derived from SQL: the file of ds=2024-01-01
    under a (ds) spec holds rows of regions eu and us, so a write keyed by one region leaves the
    other's writers free to rewrite the same file."""
    old = OldSpecFile(0, (("ds", "2024-01-01"),), frozenset({("2024-01-01", "eu"), ("2024-01-01", "us")}))
    types = {"ds": "string", "region": "string"}

    def missed(where: str) -> bool:
        derived = derive_write(f"DELETE FROM db.t WHERE {where}", ["ds", "region"], "spark-iceberg", column_types=types)
        return bool(outside(derived, {old}, ("ds", "region"), types))

    assert not missed("ds = '2024-01-01'")
    assert not missed("ds >= '2024-01-01'")
    assert not missed("ds IN ('2024-01-01', '2024-01-02') OR region = 'eu'")
    assert not missed("ds = '2024-01-01' AND region IN ('eu', 'us')")
    assert missed("ds = '2024-01-01' AND region = 'eu'")  # a write of region=us shares the file
    assert missed("ds = '2024-01-02'")
    assert missed("region = 'eu'")
