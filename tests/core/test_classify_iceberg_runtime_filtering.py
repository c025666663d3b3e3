"""Iceberg's runtime file filtering failure: classified (markers.py) and modelled (profiles/iceberg.py)
as one thing: the same text, the same kind, and the pairs of operations that raise it."""

from __future__ import annotations

import pytest

from occflow.core.classify import classify
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import get_profile
from occflow.core.profiles.iceberg import RUNTIME_FILTERING

ICEBERG_PROFILES = ["iceberg-serializable", "iceberg-snapshot", "iceberg-serializable-validated", "iceberg-snapshot-validated"]


def test_the_modelled_text_is_classified_as_the_modelled_kind() -> None:
    text = (
        "java.lang.IllegalStateException: " + RUNTIME_FILTERING.message + " Row-level operation scan snapshot ID: "
        "4311470209185339018, current table snapshot ID: 7064263052355839370. If multiple threads modify the "
        "table, use independent Spark sessions in each thread."
    )
    found = classify(text)
    assert found.kind is RUNTIME_FILTERING.kind is ConflictKind.VALIDATION_CONFLICT
    assert found.engine == "iceberg"
    assert "SparkCopyOnWriteScan" in RUNTIME_FILTERING.source


def test_a_copy_on_write_row_level_job_fails_after_any_commit_that_writes_a_snapshot() -> None:
    assert RUNTIME_FILTERING.later == {Op.UPDATE, Op.DELETE, Op.MERGE}
    # an ALTER writes table metadata, no snapshot: the scan's snapshot is still current
    assert Op.ALTER_METADATA not in RUNTIME_FILTERING.earlier
    assert RUNTIME_FILTERING.fails(Op.INSERT_INTO, Op.MERGE)
    assert not RUNTIME_FILTERING.fails(Op.INSERT_INTO, Op.INSERT_OVERWRITE)  # no runtime filter there
    assert not RUNTIME_FILTERING.fails(Op.ALTER_METADATA, Op.UPDATE)


@pytest.mark.parametrize("name", ICEBERG_PROFILES)
def test_every_cell_of_a_failing_pair_says_so_in_its_note(name: str) -> None:
    profile = get_profile(name)
    for cell in profile:
        said = RUNTIME_FILTERING.message in cell.note
        assert said is RUNTIME_FILTERING.fails(cell.earlier, cell.later), (cell.earlier.value, cell.later.value)


def test_in_one_session_it_fails_pairs_the_cells_let_commit() -> None:
    """Snapshot isolation lets a copy-on-write UPDATE commit beside an INSERT INTO; in one session the
    runtime filter fails it first. The cell commits, so only RUNTIME_FILTERING says it."""
    cell = get_profile("iceberg-snapshot").cell(Op.INSERT_INTO, Op.UPDATE)
    assert not cell.later_fails
    assert RUNTIME_FILTERING.fails(cell.earlier, cell.later)
