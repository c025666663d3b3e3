"""Iceberg conformance on real Spark: pairs of operations with a fixed commit order, compared
with the ``iceberg-serializable`` (and ``iceberg-snapshot``) profile cell by cell."""

from __future__ import annotations

import pytest

from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.engines.conformance import ConformanceRow
from occflow.engines.spark import SparkEngine
from occflow.engines.spark.iceberg_conformance import run_iceberg_conformance

pytestmark = pytest.mark.spark

SUBSET = [
    ("update", "delete"),  # both rewrite partition p: the later one must fail validation
    ("insert_into", "insert_into"),  # blind appends never conflict
    ("update", "optimize"),  # compaction loses to a data change of the files it rewrites
    ("alter_metadata", "insert_into"),  # a schema change does not fail a concurrent append
]


def _by_pair(rows: list[ConformanceRow]) -> dict[tuple[str, str], ConformanceRow]:
    return {(r.earlier.value, r.later.value): r for r in rows}


def test_subset_of_pairs_behaves_as_the_serializable_profile_predicts(iceberg_engine: SparkEngine) -> None:
    rows = run_iceberg_conformance(SUBSET, spark_engine=iceberg_engine)
    by_pair = _by_pair(rows)
    assert set(by_pair) == set(SUBSET)
    profile = get_profile("iceberg-serializable")
    for (earlier, later), row in by_pair.items():
        cell = profile.cell(earlier, later)
        assert row.predicted_fails == cell.later_fails and row.predicted_kind == cell.exception
        assert row.agrees, f"{earlier} -> {later}: predicted {cell}, observed {row}"

    lost = by_pair[("update", "delete")]
    assert lost.observed_fails and lost.observed_kind is ConflictKind.VALIDATION_CONFLICT
    assert lost.observed_error is not None and "ValidationException" in lost.observed_error
    assert not by_pair[("insert_into", "insert_into")].observed_fails
    compaction = by_pair[("update", "optimize")]
    assert compaction.observed_fails and compaction.observed_kind is ConflictKind.VALIDATION_CONFLICT
    assert not by_pair[("alter_metadata", "insert_into")].observed_fails


def test_unknown_operation_in_a_pair_is_named(iceberg_engine: SparkEngine) -> None:
    from occflow.core.errors import UnknownOperationError

    with pytest.raises(UnknownOperationError, match="minor_compact"):
        run_iceberg_conformance([("minor_compact", "update")], spark_engine=iceberg_engine)


@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["serializable", "snapshot"])
def test_every_pair_of_the_profile_runs_for_real_and_divergences_are_listed(
    iceberg_engine: SparkEngine, isolation: str
) -> None:
    rows = run_iceberg_conformance(isolation=isolation, spark_engine=iceberg_engine)
    profile = get_profile(f"iceberg-{isolation}")
    # Eight write operations and Iceberg's expire_snapshots (issue 36), every ordered pair.
    assert Operation.EXPIRE_SNAPSHOTS in profile.operations
    assert len(rows) == len(profile.operations) ** 2 == 81
    assert {(r.earlier, r.later) for r in rows} == {(a, b) for a in profile.operations for b in profile.operations}
    for row in rows:
        # A later job that failed for a reason that is not a conflict means the experiment broke.
        assert "experiment invalid" not in row.note, row
        if row.observed_fails:
            assert row.observed_kind is not None and row.observed_kind.is_conflict, row
    diverging = [r for r in rows if not r.agrees]
    print(f"\niceberg-{isolation}: {len(rows)} cells covered, {len(diverging)} diverge")
    for r in diverging:
        print(f"  {r.earlier.value} -> {r.later.value}: predicted {r.predicted_kind}, observed {r.observed_kind}")
    # The blind append is the one cell every Iceberg isolation level agrees on.
    assert not _by_pair(rows)[(Operation.INSERT_INTO.value, Operation.INSERT_INTO.value)].observed_fails
