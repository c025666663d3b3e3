"""The differential oracle of issue 23: random SQL writes run on real engines, and every partition
a commit really added a file to or removed one from lies inside the footprint ``derive_write``
derived from its text (``tests/engines/sqlgen.py``; the oracle reads the engines' own metadata
with code of its own). Seeds: ``$OCCFLOW_FUZZ_SEED`` (``random`` for a fresh one), printed; counts:
``$OCCFLOW_FUZZ_COUNT`` (Iceberg) and ``$OCCFLOW_FUZZ_DELTA_COUNT``. A failure prints the
statement the fuzzer shrank it to. More statements: ``bench/fuzz_derivation.py``."""

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
    ReplaceWhere,
    Tally,
    Update,
    When,
    fuzz,
    outside,
)

from occflow.core.sqlderive import derive_write


def _seed(default: int) -> int:
    """``$OCCFLOW_FUZZ_SEED`` (``random``: a fresh one), else a seed that passes: CI stays
    deterministic; the bench explores."""
    chosen = os.environ.get("OCCFLOW_FUZZ_SEED", str(default))
    return random.SystemRandom().randrange(1, 10**6) if chosen == "random" else int(chosen)


def _report(tally: Tally) -> str:
    found = "\n\n".join(f.describe() for f in tally.narrower)
    return f"seed {tally.seed}: {tally.summary()}\n{found}"


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
