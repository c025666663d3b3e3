"""Conformance on real delta-rs: all 81 ordered pairs at both isolation levels, every cell checked.

Each pair agrees with the ``delta-rs`` profile (a failure here means delta-rs's real behaviour
changed); divergences from the documented Delta profiles are listed and must be exactly the cells
where the delta-rs profile itself departs from them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from occflow.cli import main
from occflow.cli.conformance import run_engine
from occflow.core.errors import InvalidDeclarationError
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.engines.conformance import (
    ConformanceReport,
    Observation,
    PairRunner,
    compare,
    render_json,
    render_markdown,
    render_table,
    run_runner,
)
from occflow.engines.deltars import DeltaRsPairRunner


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ConformanceReport:
    return run_engine("delta-rs", tmp_path_factory.mktemp("conformance"))


def test_every_pair_runs_at_both_isolation_levels(report: ConformanceReport) -> None:
    assert [r.label for r in report.results] == ["delta-rs WriteSerializable", "delta-rs Serializable"]
    for result in report.results:
        assert len(result.observations) == 81
        assert all(obs.valid for _, _, obs in result.observations), "an earlier job failed to commit"
    assert report.meta["deltalake"] == "1.6.6"


def test_every_observation_agrees_with_the_delta_rs_profile(report: ConformanceReport) -> None:
    for result in report.results:
        comp = result.comparison("delta-rs")
        assert comp.covered == 81
        wrong = [f"{r.earlier.value}->{r.later.value}: observed {r.observed_kind}" for r in comp.diverging]
        assert not wrong, f"{result.label} disagrees with the delta-rs profile: {wrong}"


@pytest.mark.parametrize(
    ("label", "documented"),
    [("delta-rs WriteSerializable", "delta-write-serializable"), ("delta-rs Serializable", "delta-serializable")],
)
def test_divergences_from_the_documented_profile_are_listed_not_hidden(
    report: ConformanceReport, label: str, documented: str
) -> None:
    result = next(r for r in report.results if r.label == label)
    comp = result.comparison(documented)
    assert comp.covered == 81  # the documented delta-spark profiles have VACUUM too (issue 36)
    own, doc = get_profile("delta-rs"), get_profile(documented)
    expected = {
        (c.earlier, c.later)
        for c in own
        if c.earlier in doc.operations and c.later in doc.operations
        and (c.later_fails, c.exception) != (doc.cell(c.earlier, c.later).later_fails, doc.cell(c.earlier, c.later).exception)
    }
    listed = {(r.earlier, r.later) for r in comp.diverging}
    print(f"\n{label} vs {documented}: {len(listed)} of 81 diverge:")
    for row in comp.diverging:
        print(f"  {row.earlier.value} -> {row.later.value}: predicted {row.predicted_kind}, observed {row.observed_kind}")
    assert listed == expected
    # the one divergence the issue names: an append fails against a concurrent delete
    assert (Operation.DELETE, Operation.INSERT_INTO) in listed
    text = render_table(report) + render_markdown(report)
    for earlier, later in listed:
        assert f"{earlier.value} -> {later.value}" in text or f"| {earlier.value} | {later.value} |" in text


def test_reports_render_as_json_markdown_and_table(report: ConformanceReport) -> None:
    data = json.loads(render_json(report))
    runs = {r["runner"]: r for r in data["runs"]}
    ws = {c["profile"]: c for c in runs["delta-rs WriteSerializable"]["comparisons"]}
    assert ws["delta-rs"]["agreeing"] == 81
    assert ws["delta-write-serializable"]["diverging"] == len(
        report.results[0].comparison("delta-write-serializable").diverging
    )
    md = render_markdown(report)
    assert md.startswith("# Conformance: delta-rs") and "| delta-rs WriteSerializable | delta-rs | 81 | 81 | 0 |" in md
    assert "81 cells covered, 81 agree, 0 diverge" in render_table(report)


def test_an_invalid_experiment_never_counts_as_agreement() -> None:
    profile = get_profile("delta-rs")
    broken = Observation(later_committed=True, earlier_committed=False, earlier_error="boom")
    row = compare("delta-rs", profile, Operation.INSERT_INTO, Operation.INSERT_INTO, broken)
    assert not row.agrees and "experiment invalid" in row.note


def test_the_same_outcome_with_another_kind_is_a_divergence() -> None:
    profile = get_profile("delta-rs")
    observed = Observation(later_committed=False, later_kind=ConflictKind.CONCURRENT_APPEND)
    row = compare("delta-rs", profile, Operation.TRUNCATE, Operation.UPDATE, observed)
    assert row.outcome_agrees and not row.agrees


def test_a_runner_meets_the_protocol_and_runs_chosen_pairs(tmp_path: Path) -> None:
    runner = DeltaRsPairRunner(tmp_path)
    assert isinstance(runner, PairRunner)
    result = run_runner(runner, only=[(Operation.TRUNCATE, Operation.INSERT_INTO)])
    (earlier, later, obs), = result.observations
    assert obs.later_kind is ConflictKind.CONCURRENT_DELETE_READ
    with pytest.raises(InvalidDeclarationError, match="not in profile"):
        run_runner(runner, only=[(Operation.MINOR_COMPACT, Operation.INSERT_INTO)])


def test_unknown_engine_and_isolation_are_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidDeclarationError, match="known engines: delta-rs"):
        run_engine("duckdb", tmp_path)
    with pytest.raises(InvalidDeclarationError, match="unknown delta.isolationLevel"):
        DeltaRsPairRunner(tmp_path, "Snapshot")


def test_cli_prints_json_and_writes_the_docs_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    rc = main(["conformance", "--engine", "delta-rs", "--format", "json", "--strict",
               "--pair", "truncate:insert_into", "--pair", "INSERT INTO:OPTIMIZE",
               "--write-docs", str(docs), "--workdir", str(tmp_path / "tables")])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["engine"] == "delta-rs" and len(data["runs"]) == 2
    ws = {c["profile"]: c for c in data["runs"][0]["comparisons"]}
    assert ws["delta-rs"]["covered"] == 2 and ws["delta-rs"]["agreeing"] == 2
    assert [(r["earlier"], r["later"]) for r in ws["delta-write-serializable"]["rows"] if not r["agrees"]] == [
        ("truncate", "insert_into")
    ]
    page = (docs / "delta-rs.md").read_text()
    assert "## delta-rs WriteSerializable: observed vs delta-write-serializable" in page


def test_cli_names_a_malformed_pair(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--engine", "delta-rs", "--pair", "truncate"]) == 2
    assert "is not EARLIER:LATER" in capsys.readouterr().err
    assert main(["conformance", "--engine", "delta-rs", "--pair", "truncate:frobnicate"]) == 2
    assert "unknown operation 'frobnicate'" in capsys.readouterr().err


def test_only_two_concurrent_compactions_leave_duplicated_rows(report: ConformanceReport) -> None:
    for result in report.results:
        duplicated = {(a, b) for a, b, obs in result.observations if "DUPLICATED ROWS" in obs.note}
        assert duplicated == {(Operation.OPTIMIZE, Operation.OPTIMIZE)}, result.label
