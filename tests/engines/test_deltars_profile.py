"""The delta-rs profile: its literal matrix and its validator (a port of delta-rs's checker) agree, and
every other kind a cell allows is one real delta-rs raises for that pair."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable, TableFeatures

from occflow.core.footprint import FileRef, Footprint
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.core.profiles.delta import canonical_footprint
from occflow.core.profiles.deltars import ALSO_RAISES, DELTA_RS_MATRIX
from occflow.engines.conformance import Observation, compare
from occflow.engines.deltars import DeltaRsPairRunner
from occflow.engines.deltars.conformance import PairJobs

PROFILE = get_profile("delta-rs")
LIVE = [FileRef("part=a/f1.parquet", "part=a"), FileRef("part=a/f2.parquet", "part=a")]


def footprint(op: Operation, role: str) -> Footprint:
    return canonical_footprint(op, "part=a", LIVE, new_file=f"part=a/{role}-{op.value}.parquet")


#: The validator ports delta-rs's conflict checker over the file actions of the matrix's canonical
#: footprints; VACUUM commits commitInfo only and its harm is deleting files outside any commit, so
#: its cells are measured on real delta-rs instead (test_maintenance_deltars.py, the conformance run).
CHECKED = [c for c in PROFILE if not (c.earlier.is_maintenance or c.later.is_maintenance)]


@pytest.mark.parametrize("cell", CHECKED, ids=lambda c: f"{c.earlier.value}->{c.later.value}")
def test_validator_on_canonical_footprints_gives_each_cell(cell) -> None:  # type: ignore[no-untyped-def]
    assert PROFILE.validator is not None
    found = PROFILE.validator(footprint(cell.later, "later"), footprint(cell.earlier, "earlier"))
    assert (None if found is None else found[0]) is cell.exception


def test_the_matrix_is_square_over_the_delta_operations_and_cites_delta_rs() -> None:
    assert len(DELTA_RS_MATRIX) == 64 and len(list(PROFILE)) == 81  # 64 + VACUUM's 17
    # delta-rs has no REORG ... APPLY (UPGRADE ...); it has VACUUM
    documented = set(get_profile("delta-write-serializable").operations)
    assert set(PROFILE.operations) == (documented - {Operation.UPGRADE_PROTOCOL}) | {Operation.VACUUM}
    for cell in PROFILE:
        assert "conflict_checker.rs" in cell.source or "vacuum.rs" in cell.source


def test_an_append_fails_on_a_data_removal_in_another_partition() -> None:
    """No read predicate: the append counts every file of its snapshot as read."""
    other = FileRef("part=b/g1.parquet", "part=b")
    winner = canonical_footprint(Operation.DELETE, "part=b", [other], new_file="part=b/g2.parquet")
    append = canonical_footprint(Operation.INSERT_INTO, "part=a", [], new_file="part=a/new.parquet")
    assert PROFILE.validator is not None
    found = PROFILE.validator(append, winner)
    assert found is not None and found[0] is ConflictKind.CONCURRENT_DELETE_READ


def test_compaction_removes_do_not_fail_an_append_or_another_compaction() -> None:
    assert PROFILE.validator is not None
    winner = footprint(Operation.OPTIMIZE, "earlier")
    assert PROFILE.validator(footprint(Operation.INSERT_INTO, "later"), winner) is None
    assert PROFILE.validator(footprint(Operation.OPTIMIZE, "later"), winner) is None


def test_divergences_from_the_documented_profile_are_named_in_the_cell_notes() -> None:
    documented = get_profile("delta-write-serializable")
    for cell in PROFILE:
        if cell.earlier not in documented.operations or cell.later not in documented.operations:
            continue  # VACUUM: the documented profile has no cell to differ from
        doc = documented.cell(cell.earlier, cell.later)
        if (doc.later_fails, doc.exception) != (cell.later_fails, cell.exception):
            assert "differs from" in cell.note, f"{cell.earlier.value}->{cell.later.value} needs a note"


# ---- cells that allow more than one kind ------------------------------------------------------


def test_a_cell_with_more_kinds_names_them_with_their_source() -> None:
    many = [cell for cell in PROFILE if cell.also_raises]
    assert {(c.earlier, c.later) for c in many} == set(ALSO_RAISES)
    for cell in many:
        assert cell.exception is not None and cell.exception not in cell.also_raises
        assert cell.kinds == (cell.exception, *cell.also_raises)
        assert ALSO_RAISES[(cell.earlier, cell.later)][1] in cell.source
        assert cell.to_dict()["also_raises"] == [k.value for k in cell.also_raises]
    # a cell that commits, or names one kind, allows exactly that
    assert PROFILE.cell(Operation.INSERT_INTO, Operation.INSERT_INTO).kinds == ()
    assert PROFILE.cell(Operation.TRUNCATE, Operation.UPDATE).kinds == (ConflictKind.CONCURRENT_DELETE_READ,)


def test_the_validator_gives_the_other_kind_for_a_delete_that_removes_whole_files() -> None:
    """delta-rs's own order: no file added, so the read-files check is the one that fails."""
    assert PROFILE.validator is not None
    whole_files = Footprint(Operation.DELETE, read_partitions=frozenset({"part=a"}),
                            write_partitions=frozenset({"part=a"}), files_read=frozenset(LIVE),
                            files_removed=frozenset(LIVE))
    for later in (Operation.INSERT_OVERWRITE, Operation.TRUNCATE, Operation.UPDATE, Operation.DELETE, Operation.MERGE):
        found = PROFILE.validator(footprint(later, "later"), whole_files)
        assert found is not None and found[0] is ConflictKind.CONCURRENT_DELETE_READ, later
        assert found[0] in PROFILE.cell(Operation.DELETE, later).kinds


def test_the_validator_gives_protocol_changed_after_a_feature_upgrade() -> None:
    assert PROFILE.validator is not None
    upgrade = Footprint(Operation.ALTER_METADATA, metadata_change=True, protocol_change=True, data_change=False)
    for later in (op for op in PROFILE.operations if not op.is_maintenance):
        found = PROFILE.validator(footprint(later, "later"), upgrade)
        assert found is not None and found[0] is ConflictKind.PROTOCOL_CHANGED, later
        assert found[0] in PROFILE.cell(Operation.ALTER_METADATA, later).kinds


def _whole_file_delete(snapshot: DeltaTable) -> None:
    snapshot.delete("part = 'a' AND id <= 2")  # the file holding ids 1-2, removed and not rewritten


def _feature_upgrade(snapshot: DeltaTable) -> None:
    snapshot.alter.add_feature(TableFeatures.ChangeDataFeed, allow_protocol_versions_increase=True)


_EARLIER_FORMS = {Operation.DELETE: _whole_file_delete, Operation.ALTER_METADATA: _feature_upgrade}


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> DeltaRsPairRunner:
    return DeltaRsPairRunner(tmp_path_factory.mktemp("also-raises"))


@pytest.mark.parametrize("pair", sorted(ALSO_RAISES), ids=lambda p: f"{p[0].value}->{p[1].value}")
def test_every_other_kind_a_cell_allows_is_what_real_delta_rs_raises(
    pair: tuple[Operation, Operation], runner: DeltaRsPairRunner
) -> None:
    """The earlier job in its other form (a whole-file DELETE, a feature upgrade), the later job as the
    conformance run runs it, both from one snapshot: deltalake raises the cell's other kind."""
    earlier, later = pair
    table = runner.prepare(f"also-{earlier.value}-{later.value}")
    version = table.version()
    first, second = table.load(version), table.load(version)
    _EARLIER_FORMS[earlier](first)
    outcome = PairJobs(table).run(later, second, "later")
    assert not outcome.committed
    assert outcome.classification is not None
    assert outcome.classification.kind in PROFILE.cell(earlier, later).also_raises
    row = compare("delta-rs", PROFILE, earlier, later,
                  Observation(later_committed=False, later_kind=outcome.classification.kind))
    assert row.agrees, "the conformance comparison accepts any kind the cell allows"
