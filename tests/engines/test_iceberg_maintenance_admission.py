"""remove_orphan_files, rewrite_manifests and rewrite_position_deletes in the Iceberg profiles:
what admission does with their measured cells, and the port of Iceberg's checks reproducing them.

The cells are what Spark 3.5 + Iceberg 1.10 did, pair by pair (docs/conformance/spark-iceberg.md,
tests/engines/test_spark_conformance.py); here the reference engine (``core.reference``, driven by
the profile's port of Iceberg's commit validations) must fail exactly the later jobs Iceberg
failed, and the lease store must keep apart the pairs the cells say must not run together. No
Spark: these run in the default pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from occflow.core.admission_rule import Pairing, operation_pairing
from occflow.core.errors import CommitConflict
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import Effect, get_profile
from occflow.core.reference import ReferenceTable
from occflow.leases import LeaseRequest, LeaseStore

PROFILES = ("iceberg-serializable", "iceberg-snapshot", "iceberg-serializable-validated", "iceberg-snapshot-validated")
ORPHANS, MANIFESTS, DELETES = Op.REMOVE_ORPHAN_FILES, Op.REWRITE_MANIFESTS, Op.REWRITE_POSITION_DELETES

#: What Iceberg did to the later job (measured, both isolation levels): the earlier commits that
#: replaced a manifest fail rewrite_manifests ('Deleted manifest ... could not be found in the
#: latest snapshot'; a rewrite of delete files replaced the one delete manifest, which
#: rewrite_manifests leaves alone, so it commits); those that dropped the partition's delete files, or rewrote them, fail
#: rewrite_position_delete_files ('Missing required files to delete').
FAILS_MANIFESTS = {
    Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.UPDATE, Op.DELETE, Op.MERGE, Op.OPTIMIZE, MANIFESTS,
}
FAILS_DELETES = {Op.INSERT_OVERWRITE, Op.TRUNCATE, DELETES}


def _race(profile: str, earlier: Op, later: Op) -> ConflictKind | None:
    """Both begun on one snapshot of a table whose two partitions hold files, earlier committed first."""
    table = ReferenceTable(profile, partitions=("p", "q"), rows_per_insert=2)
    for _ in range(2):
        table.run(Op.INSERT_INTO, None)
    first = table.begin(earlier, None if earlier.is_maintenance else ["p"])
    second = table.begin(later, None if later.is_maintenance else ["p"])
    first.commit()
    try:
        second.commit()
    except CommitConflict as exc:
        return exc.kind
    return None


@pytest.mark.parametrize("profile", PROFILES)
def test_the_ported_checks_fail_the_later_maintenance_exactly_where_iceberg_did(profile: str) -> None:
    matrix = get_profile(profile)
    for earlier in matrix.operations:
        manifests = _race(profile, earlier, MANIFESTS)
        deletes = _race(profile, earlier, DELETES)
        expected_manifests = ConflictKind.VALIDATION_CONFLICT if earlier in FAILS_MANIFESTS else None
        expected_deletes = ConflictKind.VALIDATION_CONFLICT if earlier in FAILS_DELETES else None
        assert manifests is expected_manifests, (earlier, manifests)
        assert deletes is expected_deletes, (earlier, deletes)
        assert matrix.later_fails(earlier, MANIFESTS) is (earlier in FAILS_MANIFESTS)
        assert matrix.later_fails(earlier, DELETES) is (earlier in FAILS_DELETES)
        # Beside an earlier maintenance job, nothing fails but the same rewrite again.
        for maintenance in (ORPHANS, MANIFESTS, DELETES):
            if earlier not in (MANIFESTS, DELETES):
                assert _race(profile, maintenance, earlier) is None, (maintenance, earlier)


@pytest.mark.parametrize("profile", PROFILES)
def test_remove_orphan_files_runs_beside_no_job_that_commits(profile: str) -> None:
    """Every pair commits on Iceberg, yet under a short older_than it deletes the files a running
    job has not committed yet: kept apart from everything but itself."""
    matrix = get_profile(profile)
    for op in matrix.operations:
        if op is ORPHANS:
            assert operation_pairing(matrix, ORPHANS, ORPHANS) is Pairing.TOGETHER
            continue
        for cell in (matrix.cell(ORPHANS, op), matrix.cell(op, ORPHANS)):
            assert not cell.later_fails and cell.effect is Effect.DELETES_FILES_IN_USE, cell
        assert operation_pairing(matrix, ORPHANS, op) is Pairing.APART, op
        assert operation_pairing(matrix, op, ORPHANS) is Pairing.APART, op


@pytest.mark.parametrize("profile", ["iceberg-serializable", "iceberg-snapshot"])
def test_a_rewrite_of_manifests_or_delete_files_goes_first_or_not_at_all(profile: str) -> None:
    """Beside an UPDATE the rewrite may run only if it commits first (the UPDATE's commit waits at
    its gate); beside an append both orders commit; beside expire_snapshots a delete-file rewrite
    is kept apart (it validates from the snapshot it planned on), a manifest rewrite is not."""
    matrix = get_profile(profile)
    for rewrite in (MANIFESTS, DELETES):
        assert operation_pairing(matrix, rewrite, Op.INSERT_INTO) is Pairing.TOGETHER
    assert operation_pairing(matrix, MANIFESTS, Op.UPDATE) is Pairing.BEFORE
    assert operation_pairing(matrix, Op.UPDATE, MANIFESTS) is Pairing.AFTER
    assert operation_pairing(matrix, DELETES, Op.TRUNCATE) is Pairing.BEFORE
    assert operation_pairing(matrix, DELETES, Op.UPDATE) is Pairing.TOGETHER
    assert operation_pairing(matrix, MANIFESTS, MANIFESTS) is Pairing.APART
    assert operation_pairing(matrix, DELETES, Op.EXPIRE_SNAPSHOTS) is Pairing.APART
    assert operation_pairing(matrix, MANIFESTS, Op.EXPIRE_SNAPSHOTS) is Pairing.TOGETHER


def test_the_lease_store_keeps_an_orphan_removal_off_a_table_with_a_running_write(tmp_path: Path) -> None:
    """Declared on partition q, the orphan removal still holds the whole table: an append running
    on p keeps it out until its lease ends, and while it runs no write gets in."""
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    table, profile = "lake.db.events", "iceberg-serializable"
    append = store.decide(LeaseRequest.create(table, "insert_into", profile, [{"ds": "p"}]))
    assert append.lease is not None
    orphans = LeaseRequest.create(table, "remove_orphan_files", profile, [{"ds": "q"}])
    assert store.decide(orphans).lease is None
    store.release(append.lease)
    granted = store.decide(orphans)
    assert granted.lease is not None
    assert store.decide(LeaseRequest.create(table, "insert_into", profile, [{"ds": "q"}])).lease is None
    store.release(granted.lease)
