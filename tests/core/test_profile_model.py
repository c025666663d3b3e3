"""Rules of the profile model that every profile relies on."""

from __future__ import annotations

import pytest

from occflow.core.errors import UnknownProfileError
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import PROFILES, Cell, Effect, get_profile


def test_admission_refuses_a_pair_that_corrupts_data_even_though_neither_fails():
    # delta-rs commits two concurrent compactions of the same files and duplicates the rows
    # (tests/engines/test_deltars.py shows it on a real table)
    delta_rs = get_profile("delta-rs")
    cell = delta_rs.cell("optimize", "optimize")
    assert not cell.later_fails and cell.effect is Effect.DUPLICATES_ROWS
    assert delta_rs.conflicts("optimize", "optimize")
    # ... while the documented Delta profile makes the later compaction fail instead
    assert get_profile("delta-write-serializable").later_fails("optimize", "optimize")


@pytest.mark.parametrize("name", list(PROFILES))
def test_conflicts_is_symmetric_and_follows_the_cells(name):
    profile = PROFILES[name]
    for a in profile.operations:
        for b in profile.operations:
            expected = any(
                c.later_fails or c.effect.keeps_apart
                for c in (profile.cell(a, b), profile.cell(b, a))
            )
            assert profile.conflicts(a, b) is expected is profile.conflicts(b, a)


def test_a_cell_must_be_consistent():
    with pytest.raises(ValueError, match="needs an exception"):
        Cell(Op.UPDATE, Op.UPDATE, True, None, Effect.LATER_FAILS, "test")
    with pytest.raises(ValueError, match="effect disagrees"):
        Cell(Op.UPDATE, Op.UPDATE, True, ConflictKind.CONCURRENT_APPEND, Effect.APPLIED, "test")


def test_unknown_profile_names_the_known_ones():
    with pytest.raises(UnknownProfileError, match="known profiles: maxcompute-standard"):
        get_profile("delta-snapshot")
