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
# CLUSTERING (specs 001/002 smart conflict resolution): both succeed beside INSERT INTO; the specs
# say nothing else, so it is taken as small file MERGE on standard tables, MINOR COMPACT on Delta ones.
STANDARD_EXPECTED = {
    (a, b): b in (Op.UPDATE, Op.DELETE, Op.SMALL_FILE_MERGE, Op.CLUSTERING) and (a, b) != (Op.INSERT_INTO, Op.CLUSTERING)
    for a in STANDARD.operations
    for b in STANDARD.operations
}
SMART = "specs 001/002, smart conflict resolution"
TAKEN_AS = "not in the specs: clustering taken as"
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
_AS_MINOR = {Op.CLUSTERING: Op.MINOR_COMPACT}
TRANSACTIONAL_EXPECTED.update(
    {
        (a, b): TRANSACTIONAL_EXPECTED[(_AS_MINOR.get(a, a), _AS_MINOR.get(b, b))]
        for a in TRANSACTIONAL.operations
        for b in TRANSACTIONAL.operations
        if Op.CLUSTERING in (a, b)
    }
)


@pytest.mark.parametrize(
    "cell", STANDARD.cells, ids=lambda c: f"{c.earlier.value}->{c.later.value} [{c.source}]"
)
def test_standard_cell_matches_spec_000(cell):
    assert cell.later_fails is STANDARD_EXPECTED[(cell.earlier, cell.later)]
    if Op.CLUSTERING in (cell.earlier, cell.later):
        assert cell.source.startswith(SMART if Op.INSERT_INTO in (cell.earlier, cell.later) else TAKEN_AS)
    else:
        assert cell.source.startswith("spec 000")
    if cell.later_fails:
        assert cell.exception is ConflictKind.OPERATION_CONFLICT
        assert cell.effect is Effect.LATER_FAILS
    elif cell.later is Op.CLUSTERING:
        assert cell.effect is Effect.COMPACTION_COMPLETES
    elif cell.later in (Op.INSERT_OVERWRITE, Op.TRUNCATE):
        assert cell.effect is Effect.OVERWRITE  # "The later job's data overwrites"
    else:
        assert cell.effect is Effect.APPEND  # "appends its data to the earlier job's result"


@pytest.mark.parametrize(
    "cell", TRANSACTIONAL.cells, ids=lambda c: f"{c.earlier.value}->{c.later.value} [{c.source}]"
)
def test_transactional_cell_matches_spec_001(cell):
    assert cell.later_fails is TRANSACTIONAL_EXPECTED[(cell.earlier, cell.later)]
    if Op.CLUSTERING in (cell.earlier, cell.later):
        assert cell.source.startswith(SMART if Op.INSERT_INTO in (cell.earlier, cell.later) else TAKEN_AS)
    else:
        assert cell.source.startswith("spec 001")
    if cell.later_fails:
        assert cell.exception is ConflictKind.OPERATION_CONFLICT


def test_matrices_are_complete():
    # spec rows x columns, then CLUSTERING's row and column (its own group)
    assert len(STANDARD.cells) == 7 * 7 and len(MAXCOMPUTE_STANDARD_MATRIX) == 4 * 4 + 9
    assert len(TRANSACTIONAL.cells) == 8 * 8 and len(MAXCOMPUTE_TRANSACTIONAL_MATRIX) == 5 * 5 + 11
    assert Op.CLUSTERING in STANDARD.operations and Op.CLUSTERING in TRANSACTIONAL.operations


def test_specs_001_002_say_clustering_and_insert_into_both_succeed(specs_dir: Path):
    v1 = " ".join((specs_dir / "001_91364fd8b65d11e0.txt").read_text().split())
    v2 = " ".join((specs_dir / "002_2c1a90b908fdf3e9.txt").read_text().split())
    assert "when a clustering operation and an INSERT INTO operation overlap in start and commit time, both succeed" in v1
    assert "The clustering operation and the INSERT INTO operation do not cause status inconsistency" in v2


@pytest.mark.parametrize("profile", [STANDARD, TRANSACTIONAL], ids=lambda p: p.name)
def test_clustering_and_insert_into_both_succeed_in_either_order_specs_001_002(profile):
    assert not profile.conflicts(Op.CLUSTERING, Op.INSERT_INTO)
    assert profile.cell(Op.INSERT_INTO, Op.CLUSTERING).effect is Effect.COMPACTION_COMPLETES
    assert profile.cell(Op.CLUSTERING, Op.INSERT_INTO).effect is Effect.APPEND
    # it stays a layout-only compaction: two clusterings of one partition never both succeed
    assert profile.later_fails(Op.CLUSTERING, Op.CLUSTERING)
    assert Op.CLUSTERING.is_compaction and not Op.CLUSTERING.changes_data


def test_clustering_follows_the_compaction_it_resembles_and_says_so():
    for a in STANDARD.operations:
        if a not in (Op.INSERT_INTO, Op.CLUSTERING):
            assert STANDARD.later_fails(a, Op.CLUSTERING) is STANDARD.later_fails(a, Op.SMALL_FILE_MERGE)
            assert "small file MERGE" in STANDARD.cell(a, Op.CLUSTERING).source
    for a in TRANSACTIONAL.operations:
        if a is not Op.CLUSTERING:
            assert TRANSACTIONAL.later_fails(a, Op.CLUSTERING) is TRANSACTIONAL.later_fails(a, Op.MINOR_COMPACT)
            assert TRANSACTIONAL.later_fails(Op.CLUSTERING, a) is TRANSACTIONAL.later_fails(Op.MINOR_COMPACT, a)
            assert "MINOR COMPACT" in TRANSACTIONAL.cell(a, Op.CLUSTERING).source


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
