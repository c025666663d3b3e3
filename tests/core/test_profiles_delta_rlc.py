"""Delta with row-level concurrency: every cell against spec 004's prose, the matrix without
row-level concurrency, the validator on canonical footprints and the reference engine."""

from __future__ import annotations

import pytest

from occflow.core.errors import CommitConflict
from occflow.core.footprint import FileRef
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import Cell, Condition, Effect, get_profile
from occflow.core.profiles.delta import DELTA_OPERATIONS, canonical_footprint
from occflow.core.profiles.delta_rlc import RLC_CHANGES
from occflow.core.reference import ReferenceTable

RLC = {"serializable": get_profile("delta-serializable-rlc"), "write-serializable": get_profile("delta-write-serializable-rlc")}
PLAIN = {"serializable": get_profile("delta-serializable"), "write-serializable": get_profile("delta-write-serializable")}
ROW_LEVEL = (Op.UPDATE, Op.DELETE, Op.MERGE)
DATA_WRITES = (Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.TRUNCATE, *ROW_LEVEL)
# Row-level concurrency needs a table without partitions: one partition "".
LIVE = frozenset({FileRef("part-0.parquet"), FileRef("part-1.parquet")})

CELLS = [pytest.param(level, cell, id=f"{level}:{cell.earlier.value}->{cell.later.value}") for level in RLC for cell in RLC[level]]


def _spec_004_says(level: str, earlier: Op, later: Op) -> tuple[bool, bool]:
    """(later fails, only on the same rows), restated from spec 004's prose, not from the module."""
    pair = {earlier, later}
    if Op.UPGRADE_PROTOCOL in pair:  # "conflicts with all ongoing operations"
        return True, False
    if earlier is Op.ALTER_METADATA:  # "Metadata changes cause all concurrent write operations to fail"
        return True, False
    if pair == {Op.OPTIMIZE}:  # ConcurrentDeleteDelete: "two concurrent compaction operations"
        return True, False
    if Op.OPTIMIZE in pair:  # "avoid conflicts between OPTIMIZE and all other write operations"
        return False, False
    if later in ROW_LEVEL and earlier in ROW_LEVEL:  # "different rows in the same data file" resolve
        return True, True
    if later in ROW_LEVEL and earlier is Op.INSERT_INTO:  # blind INSERT: Serializable only, same rows
        return level == "serializable", True
    # INSERT OVERWRITE, TRUNCATE, blind INSERT and ALTER later: as without row-level concurrency
    return PLAIN[level].later_fails(earlier, later), False


@pytest.mark.parametrize(("level", "cell"), CELLS)
def test_cell_is_what_spec_004_says(level, cell) -> None:
    fails, same_rows = _spec_004_says(level, cell.earlier, cell.later)
    assert cell.later_fails is fails
    assert cell.condition is (Condition.SAME_ROWS if same_rows and fails else Condition.ALWAYS)
    assert "spec 00" in cell.source
    if cell.condition is Condition.SAME_ROWS:
        assert "same rows" in cell.note and "cannot see rows" in cell.note


@pytest.mark.parametrize(("level", "cell"), CELLS)
def test_validator_on_canonical_footprints_gives_each_cell(level, cell) -> None:
    profile = RLC[level]
    assert profile.validator is not None
    winner = canonical_footprint(cell.earlier, "", LIVE, new_file="earlier.parquet")
    current = canonical_footprint(cell.later, "", LIVE, new_file="later.parquet")
    found = profile.validator(current, winner)
    assert (None if found is None else found[0]) is cell.exception


@pytest.mark.parametrize(("level", "cell"), CELLS)
def test_cells_outside_the_changes_are_the_cells_without_row_level_concurrency(level, cell) -> None:
    changed = {(row[0], row[1]) for row in RLC_CHANGES}
    plain = PLAIN[level].cell(cell.earlier, cell.later)
    if (cell.earlier, cell.later) in changed:
        assert "spec 004" in cell.source
    else:
        assert (cell.exception, cell.effect, cell.source) == (plain.exception, plain.effect, plain.source)


@pytest.mark.parametrize("level", RLC)
def test_optimize_runs_beside_every_data_write_but_not_another_optimize(level) -> None:
    profile = RLC[level]
    for other in DATA_WRITES:
        assert not profile.conflicts(Op.OPTIMIZE, other), other
        assert PLAIN[level].conflicts(Op.OPTIMIZE, other) is (other is not Op.INSERT_INTO)
    assert profile.cell(Op.OPTIMIZE, Op.OPTIMIZE).exception is ConflictKind.CONCURRENT_DELETE_DELETE
    # VACUUM is measured on delta-spark (the plain profiles), not on Databricks' row-level concurrency.
    assert set(profile.operations) == set(DELTA_OPERATIONS)
    assert set(PLAIN[level].operations) == {*DELTA_OPERATIONS, Op.VACUUM}


@pytest.mark.parametrize("level", RLC)
def test_same_row_pairs_are_still_serialised_by_admission(level) -> None:
    # occflow cannot see rows: a possible row-level conflict keeps the pair apart.
    profile = RLC[level]
    for a in ROW_LEVEL:
        for b in ROW_LEVEL:
            assert profile.conflicts(a, b)
            assert profile.cell(a, b).to_dict()["condition"] == "same_rows"


def test_a_blind_insert_fails_a_later_update_only_under_serializable_and_only_on_the_same_rows() -> None:
    s = RLC["serializable"].cell(Op.INSERT_INTO, Op.UPDATE)
    ws = RLC["write-serializable"].cell(Op.INSERT_INTO, Op.UPDATE)
    assert s.exception is ConflictKind.CONCURRENT_APPEND and s.condition is Condition.SAME_ROWS
    assert not ws.later_fails and ws.effect is Effect.APPLIED and ws.condition is Condition.ALWAYS


@pytest.mark.parametrize("earlier", [Op.UPDATE, Op.MERGE, Op.INSERT_INTO])
def test_reference_engine_commits_optimize_beside_a_rewrite_and_keeps_every_row(earlier) -> None:
    for name, profile in RLC.items():
        table = ReferenceTable(profile, rows_per_insert=3)
        table.run(Op.INSERT_INTO)
        first, optimize = table.begin(earlier), table.begin(Op.OPTIMIZE)
        first.commit()
        rows = dict(table.snapshot().rows[""])
        optimize.commit()  # the plain profile fails it (ConcurrentDeleteRead / ConcurrentAppend)
        assert table.snapshot().rows[""] == rows, name
        plain = ReferenceTable(PLAIN[name], rows_per_insert=3)
        plain.run(Op.INSERT_INTO)
        first, optimize = plain.begin(earlier), plain.begin(Op.OPTIMIZE)
        first.commit()
        if earlier is not Op.INSERT_INTO:
            with pytest.raises(CommitConflict, match="lost to"):
                optimize.commit()


def test_a_cell_cannot_be_conditional_without_failing() -> None:
    with pytest.raises(ValueError, match="same rows only"):
        Cell(Op.UPDATE, Op.UPDATE, False, None, Effect.APPLIED, "x", condition=Condition.SAME_ROWS)
