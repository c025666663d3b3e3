"""Every cell of the MaxCompute matrices, against the literal table and against the spec text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation as Op
from occflow.core.profiles import Effect, get_profile
from occflow.core.profiles.maxcompute import (
    MAXCOMPUTE_STANDARD_MATRIX,
    MAXCOMPUTE_TRANSACTIONAL_MATRIX,
)

STANDARD = get_profile("maxcompute-standard")
TRANSACTIONAL = get_profile("maxcompute-transactional")

# The spec tables restated as (earlier, later) -> later fails, independently of the module's data.
# Spec 000: UPDATE/DELETE and small file MERGE fail after anything; INSERTs never fail.
STANDARD_EXPECTED = {
    (a, b): b in (Op.UPDATE, Op.DELETE, Op.SMALL_FILE_MERGE)
    for a in STANDARD.operations
    for b in STANDARD.operations
}
_T = {
    "IO": (Op.INSERT_OVERWRITE, Op.TRUNCATE),
    "II": (Op.INSERT_INTO,),
    "UD": (Op.UPDATE, Op.DELETE),
    "MI": (Op.MINOR_COMPACT,),
    "MA": (Op.MAJOR_COMPACT,),
}
# Spec 001, 25 rows in order, "F" = later fails, "." = both succeed.
_SPEC_001 = {
    "IO": ".FFFF",
    "II": ".FF.F",
    "UD": ".FF.F",
    "MI": "...F.",
    "MA": "...FF",
}
TRANSACTIONAL_EXPECTED = {
    (a, b): _SPEC_001[ga][i] == "F"
    for ga, ops_a in _T.items()
    for i, gb in enumerate(_T)
    for a in ops_a
    for b in _T[gb]
}


@pytest.mark.parametrize(
    "cell", STANDARD.cells, ids=lambda c: f"{c.earlier.value}->{c.later.value} [{c.source}]"
)
def test_standard_cell_matches_spec_000(cell):
    assert cell.later_fails is STANDARD_EXPECTED[(cell.earlier, cell.later)]
    assert cell.source.startswith("spec 000")
    if cell.later_fails:
        assert cell.exception is ConflictKind.OPERATION_CONFLICT
        assert cell.effect is Effect.LATER_FAILS
    elif cell.later in (Op.INSERT_OVERWRITE, Op.TRUNCATE):
        assert cell.effect is Effect.OVERWRITE  # "The later job's data overwrites"
    else:
        assert cell.effect is Effect.APPEND  # "appends its data to the earlier job's result"


@pytest.mark.parametrize(
    "cell", TRANSACTIONAL.cells, ids=lambda c: f"{c.earlier.value}->{c.later.value} [{c.source}]"
)
def test_transactional_cell_matches_spec_001(cell):
    assert cell.later_fails is TRANSACTIONAL_EXPECTED[(cell.earlier, cell.later)]
    assert cell.source.startswith("spec 001")
    if cell.later_fails:
        assert cell.exception is ConflictKind.OPERATION_CONFLICT


def test_matrices_are_complete():
    assert len(STANDARD.cells) == 6 * 6 and len(MAXCOMPUTE_STANDARD_MATRIX) == 4 * 4
    assert len(TRANSACTIONAL.cells) == 7 * 7 and len(MAXCOMPUTE_TRANSACTIONAL_MATRIX) == 5 * 5


def test_insert_jobs_never_conflict_on_standard_tables():
    inserts = (Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.INSERT_INTO)
    assert not any(STANDARD.conflicts(a, b) for a in inserts for b in inserts)


def test_minor_compaction_runs_beside_insert_into_on_delta_tables():
    assert not TRANSACTIONAL.later_fails("insert_into", "minor_compact")
    assert TRANSACTIONAL.cell("insert_into", "minor_compact").effect is Effect.COMPACTION_COMPLETES
    # ... but not in the other order: an INSERT INTO committing after a minor compaction succeeds
    assert not TRANSACTIONAL.later_fails("minor_compact", "insert_into")
    assert TRANSACTIONAL.later_fails("insert_into", "major_compact")


# --- cross-check against the spec texts themselves -------------------------------------------
_GROUP_OF_001 = {
    "INSERT OVERWRITE / TRUNCATE": "IO",
    "INSERT INTO": "II",
    "UPDATE / DELETE": "UD",
    "MINOR COMPACT": "MI",
    "MAJOR COMPACT": "MA",
}


def _parse_spec_001(text: str) -> dict[tuple[str, str], bool]:
    rows = re.findall(r"^\| ([A-Z /]+?) \| ([A-Z /]+?) \| (.+?) \|$", text, flags=re.MULTILINE)
    out = {}
    for earlier, later, outcome in rows:
        if earlier in _GROUP_OF_001 and later in _GROUP_OF_001:
            out[(_GROUP_OF_001[earlier], _GROUP_OF_001[later])] = "Later job fails" in outcome
    return out


def _parse_spec_002(text: str) -> dict[tuple[str, str], bool]:
    body = text.split("Conflict detection rules", 1)[1].split("Concurrency conflict optimization", 1)[0]
    outcomes = re.findall(r"Both jobs succeed\.|The job that ends earlier succeeds\.", body)
    groups = list(_T)
    assert len(outcomes) == 25, f"spec 002 table has {len(outcomes)} outcomes, expected 25"
    return {
        (groups[i // 5], groups[i % 5]): o.startswith("The job that ends earlier")
        for i, o in enumerate(outcomes)
    }


def test_spec_001_text_agrees_with_the_transactional_matrix(specs_dir: Path):
    parsed = _parse_spec_001((specs_dir / "001_91364fd8b65d11e0.txt").read_text())
    assert len(parsed) == 25
    for (ga, gb), fails in parsed.items():
        for a in _T[ga]:
            for b in _T[gb]:
                assert TRANSACTIONAL.later_fails(a, b) is fails, (a, b)


def test_spec_002_earlier_version_says_the_same_as_spec_001(specs_dir: Path):
    v1 = _parse_spec_001((specs_dir / "001_91364fd8b65d11e0.txt").read_text())
    v2 = _parse_spec_002((specs_dir / "002_2c1a90b908fdf3e9.txt").read_text())
    assert v1 == v2


def test_spec_000_text_agrees_with_the_standard_matrix(specs_dir: Path):
    text = (specs_dir / "000_67b4bcfc3388519b.txt").read_text()
    table = text.split("Conflict outcome matrix", 1)[1].split("Summary rules", 1)[0]
    rows = [r for r in table.splitlines() if r.startswith("| ") and not r.startswith("| Job ending")]
    groups = [(Op.INSERT_OVERWRITE, Op.TRUNCATE), (Op.INSERT_INTO,), (Op.UPDATE, Op.DELETE), (Op.SMALL_FILE_MERGE,)]
    assert len(rows) == 4
    for i, row in enumerate(rows):
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert len(cells) == 4
        for j, text_cell in enumerate(cells):
            fails = "reports an error" in text_cell
            for a in groups[i]:
                for b in groups[j]:
                    assert STANDARD.later_fails(a, b) is fails, (a, b, text_cell)
