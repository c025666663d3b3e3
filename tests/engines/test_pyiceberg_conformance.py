"""The pyiceberg profiles are what pyiceberg did: the committed conformance page
(docs/conformance/pyiceberg.md, ``occflow conformance --engine pyiceberg --write-docs``) covers all
294 cells (49 pairs x 2 isolation levels x partitioned / unpartitioned / dynamic overwrite), each
agreeing with its level's profile, and a subset re-measured on real tables agrees with the page.
Every expire_snapshots pair on the page expired snapshots (a pair whose expire removed nothing would
prove nothing).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, get_profile
from occflow.core.profiles.pyiceberg import PROFILES as PYICEBERG_PROFILES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "conformance" / "pyiceberg.md"
LABELS = [
    f"pyiceberg {level}, {shape}"
    for level in ("serializable", "snapshot")
    for shape in ("partitioned", "unpartitioned", "partitioned, dynamic overwrite")
]
Op = Operation


@pytest.fixture(autouse=True)
def pyiceberg_profiles(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The pyiceberg profiles in the registry (core/profiles/__init__.py lists them once the lead
    adds them; until then the test adds them, and this is a no-op after)."""
    for profile in PYICEBERG_PROFILES:
        if profile.name not in PROFILES:
            monkeypatch.setitem(PROFILES, profile.name, profile)
    yield


def page_cells() -> dict[str, dict[tuple[Operation, Operation], str]]:
    """Each runner's observed cells as the committed page lists them: ``ok`` or the kind."""
    cells: dict[str, dict[tuple[Operation, Operation], str]] = {}
    label = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## (.+): every cell observed$", line)
        if heading:
            label = heading.group(1)
            cells[label] = {}
            continue
        if line.startswith("## "):
            label = None
        row = re.match(r"\| (\w+) \| (\w+) \| (ok|fails \((\w+)\)|INVALID.*?) \|", line)
        if label is not None and row and row.group(1) != "earlier":
            cells[label][(Op(row.group(1)), Op(row.group(2)))] = row.group(4) or row.group(3)
    return cells


def expected(profile_name: str, earlier: Operation, later: Operation) -> str:
    cell = get_profile(profile_name).cell(earlier, later)
    return "ok" if cell.exception is None else cell.exception.value


def test_the_committed_page_covers_every_cell_each_as_its_profile_says() -> None:
    cells = page_cells()
    assert sorted(cells) == sorted(LABELS)
    for label, observed in cells.items():
        level = label.split()[1].rstrip(",")
        assert len(observed) == 49, label
        wrong = {pair: seen for pair, seen in observed.items() if seen != expected(f"pyiceberg-{level}", *pair)}
        assert not wrong, f"{label}: the page disagrees with pyiceberg-{level}: {wrong}"
    summary = re.findall(r"^\| (pyiceberg [^|]+) \| (pyiceberg-\w+) \| (\d+) \| (\d+) \| (\d+) \|", PAGE.read_text(), re.M)
    assert len(summary) == 6 and all((covered, agree, diverge) == ("49", "49", "0") for *_, covered, agree, diverge in summary)


def page_notes() -> dict[str, dict[tuple[Operation, Operation], str]]:
    """Each runner's notes (the last column of its every-cell table) as the committed page lists them."""
    notes: dict[str, dict[tuple[Operation, Operation], str]] = {}
    label = None
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## (.+): every cell observed$", line)
        label = heading.group(1) if heading else (None if line.startswith("## ") else label)
        if heading:
            notes[label] = {}
        row = re.match(r"\| (\w+) \| (\w+) \| .* \| ([^|]*) \|$", line)
        if label is not None and row and row.group(1) not in ("earlier",):
            notes[label][(Op(row.group(1)), Op(row.group(2)))] = row.group(3).strip()
    return notes


def test_every_expire_on_the_page_removed_snapshots_and_of_two_expires_the_later_found_none_left() -> None:
    for label, notes in page_notes().items():
        expiring = {pair: note for pair, note in notes.items() if Op.EXPIRE_SNAPSHOTS in pair}
        assert len(expiring) == 13, label
        for (earlier, later), note in expiring.items():
            if earlier is later:
                # The later one planned the same two, found them gone, planned again: nothing left.
                assert note == "the earlier expire removed 2 snapshots; the later expire removed 0 snapshots", (label, note)
                continue
            role = "earlier" if earlier is Op.EXPIRE_SNAPSHOTS else "later"
            assert note == f"the {role} expire removed 2 snapshots", (label, earlier, later, note)
    serializable = get_profile("pyiceberg-serializable")
    # Beside a write both commit (the pair does not fail), yet admission keeps them apart; beside a
    # schema change they may run together; two expires both commit (their whole-table footprints
    # keep them apart anyway).
    for writer in (Op.INSERT_INTO, Op.INSERT_OVERWRITE, Op.DELETE, Op.MERGE, Op.TRUNCATE):
        for pair in ((writer, Op.EXPIRE_SNAPSHOTS), (Op.EXPIRE_SNAPSHOTS, writer)):
            cell = serializable.cell(*pair)
            assert not cell.later_fails and cell.effect.keeps_apart, pair
    assert not serializable.cell(Op.ALTER_METADATA, Op.EXPIRE_SNAPSHOTS).effect.keeps_apart
    assert not serializable.cell(Op.EXPIRE_SNAPSHOTS, Op.EXPIRE_SNAPSHOTS).later_fails


def test_the_levels_differ_only_where_pyiceberg_checks_added_files() -> None:
    serializable, snapshot = (get_profile(f"pyiceberg-{level}") for level in ("serializable", "snapshot"))
    differ = {(c.earlier, c.later) for c in serializable if c.later_fails != snapshot.cell(c.earlier, c.later).later_fails}
    assert differ == {(Op.INSERT_INTO, later) for later in (Op.INSERT_OVERWRITE, Op.TRUNCATE, Op.DELETE)}
    # A schema change commits beside an append, either order; two schema changes: the later fails
    # (pyiceberg does not retry it), where Java Iceberg's schema update retries and commits.
    assert not serializable.later_fails(Op.ALTER_METADATA, Op.INSERT_INTO)
    assert not serializable.later_fails(Op.INSERT_INTO, Op.ALTER_METADATA)
    assert serializable.later_fails(Op.ALTER_METADATA, Op.ALTER_METADATA)
    assert not get_profile("iceberg-serializable").later_fails(Op.ALTER_METADATA, Op.ALTER_METADATA)


#: Pairs whose outcome depends on the level, the kind, or differs from Java Iceberg.
SUBSET = [
    (Op.INSERT_INTO, Op.INSERT_OVERWRITE),
    (Op.INSERT_INTO, Op.INSERT_INTO),
    (Op.TRUNCATE, Op.MERGE),
    (Op.ALTER_METADATA, Op.ALTER_METADATA),
    (Op.ALTER_METADATA, Op.DELETE),
    (Op.EXPIRE_SNAPSHOTS, Op.INSERT_OVERWRITE),
    (Op.EXPIRE_SNAPSHOTS, Op.EXPIRE_SNAPSHOTS),
]


@pytest.mark.slow
def test_a_subset_re_measured_on_real_tables_agrees_with_the_page(tmp_path: Path) -> None:
    from occflow.cli.conformance import run_engine

    report = run_engine("pyiceberg", tmp_path, only=SUBSET)
    assert report.meta["pyiceberg"] == "0.12.0"
    committed = page_cells()
    assert [r.label for r in report.results] == LABELS
    for result in report.results:
        assert result.comparison(result.runner_profile).diverging == ()
        for earlier, later, obs in result.observations:
            assert obs.valid, (result.label, earlier, later, obs.earlier_error)
            seen = "ok" if obs.later_committed else obs.later_kind.value  # type: ignore[union-attr]
            assert seen == committed[result.label][(earlier, later)], (result.label, earlier, later, obs.later_error)


def test_a_runner_is_refused_for_an_unknown_level_or_a_dynamic_overwrite_without_partitions(tmp_path: Path) -> None:
    from occflow.engines.pyiceberg.conformance import PyIcebergPairRunner, sqlite_catalog

    catalog = sqlite_catalog(tmp_path)
    with pytest.raises(InvalidDeclarationError, match="unknown pyiceberg isolation level 'repeatable'"):
        PyIcebergPairRunner(catalog, "repeatable")
    with pytest.raises(InvalidDeclarationError, match="dynamic partition overwrite needs a partitioned table"):
        PyIcebergPairRunner(catalog, "snapshot", partitioned=False, dynamic_overwrite=True)
