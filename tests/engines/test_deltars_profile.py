"""The delta-rs profile: its literal matrix and its validator (a port of delta-rs's checker) agree."""

from __future__ import annotations

import pytest

from occflow.core.footprint import FileRef, Footprint
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.core.profiles.delta import canonical_footprint
from occflow.core.profiles.deltars import DELTA_RS_MATRIX

PROFILE = get_profile("delta-rs")
LIVE = [FileRef("part=a/f1.parquet", "part=a"), FileRef("part=a/f2.parquet", "part=a")]


def footprint(op: Operation, role: str) -> Footprint:
    return canonical_footprint(op, "part=a", LIVE, new_file=f"part=a/{role}-{op.value}.parquet")


@pytest.mark.parametrize("cell", list(PROFILE), ids=lambda c: f"{c.earlier.value}->{c.later.value}")
def test_validator_on_canonical_footprints_gives_each_cell(cell) -> None:  # type: ignore[no-untyped-def]
    assert PROFILE.validator is not None
    found = PROFILE.validator(footprint(cell.later, "later"), footprint(cell.earlier, "earlier"))
    assert (None if found is None else found[0]) is cell.exception


def test_the_matrix_is_square_over_the_delta_operations_and_cites_delta_rs() -> None:
    assert len(DELTA_RS_MATRIX) == 64
    # delta-rs has no REORG ... APPLY (UPGRADE ...)
    assert set(PROFILE.operations) == set(get_profile("delta-write-serializable").operations) - {Operation.UPGRADE_PROTOCOL}
    for cell in PROFILE:
        assert "conflict_checker.rs" in cell.source


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
        doc = documented.cell(cell.earlier, cell.later)
        if (doc.later_fails, doc.exception) != (cell.later_fails, cell.exception):
            assert "differs from" in cell.note, f"{cell.earlier.value}->{cell.later.value} needs a note"
