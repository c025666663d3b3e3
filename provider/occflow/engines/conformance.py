"""Conformance: run pairs of operations on a real engine and compare them with a profile's matrix.

An engine contributes a *pair runner*: given two canonical operations, it prepares one partition
of a fresh real table, lets both jobs start on the same snapshot, commits ``earlier`` first and
then ``later``, and reports what really happened as an :class:`Observation`. This module drives a
runner over every pair of its profile's operations and compares each observation with any number
of profiles (the engine's own profile and the documented matrices), cell by cell. Divergences are
rows like any other: they are listed, never dropped.

Engines plug in through their folder's ``conformance_runners(workdir)``: a context manager
yielding the engine's runners (one per isolation level it runs, for example), and
``conformance_meta() -> dict[str, str]`` (library versions, shown with the report). This module
knows no engine: the CLI (``occflow.cli.conformance``) names them and hands their runners to
:func:`run_runners`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tabulate import tabulate

from ..core.errors import InvalidDeclarationError
from ..core.kinds import ConflictKind
from ..core.operations import Operation, parse_operation
from ..core.profiles import Profile, get_profile


@dataclass(frozen=True)
class Observation:
    """What really happened when ``later`` (started on ``earlier``'s snapshot) committed second.

    ``later_kind`` is the classification of the later job's error (``None`` when it committed).
    ``earlier_committed`` False means the experiment itself broke: the pair proves nothing.
    """

    later_committed: bool
    later_kind: ConflictKind | None = None
    later_error: str | None = None
    earlier_committed: bool = True
    earlier_error: str | None = None
    seconds: float = 0.0
    note: str = ""

    def __post_init__(self) -> None:
        if self.later_committed and self.later_kind is not None:
            raise ValueError("a committed later job has no error kind")

    @property
    def valid(self) -> bool:
        return self.earlier_committed

    @property
    def later_fails(self) -> bool:
        return not self.later_committed


@runtime_checkable
class PairRunner(Protocol):
    """One engine at one isolation level, able to run one ordered pair of operations for real.

    ``profile`` is the profile whose operations the runner covers and whose matrix it should
    match; ``compare_with`` names further (documented) profiles its observations are compared
    with, so a divergence from the documentation shows up next to the agreement with the
    engine's own profile.
    """

    engine: str
    profile: str
    compare_with: tuple[str, ...]
    # Optional: ``label`` (str) tells runners of one engine apart ("delta-rs Serializable");
    # without it the report names the runner by its profile.

    def run_pair(self, earlier: Operation, later: Operation) -> Observation: ...


@dataclass(frozen=True)
class ConformanceRow:
    """One cell: what ``profile`` predicts for the pair and what ``engine`` really did."""

    engine: str
    profile: str
    earlier: Operation
    later: Operation
    predicted_fails: bool
    predicted_kind: ConflictKind | None
    observed_fails: bool
    observed_kind: ConflictKind | None
    observed_error: str | None
    agrees: bool
    source: str = ""
    note: str = ""

    @property
    def outcome_agrees(self) -> bool:
        """Whether fail / succeed agree, whatever the kind."""
        return self.predicted_fails == self.observed_fails

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "profile": self.profile,
            "earlier": self.earlier.value,
            "later": self.later.value,
            "predicted_fails": self.predicted_fails,
            "predicted_kind": None if self.predicted_kind is None else self.predicted_kind.value,
            "observed_fails": self.observed_fails,
            "observed_kind": None if self.observed_kind is None else self.observed_kind.value,
            "observed_error": self.observed_error,
            "agrees": self.agrees,
            "source": self.source,
            "note": self.note,
        }


def compare(
    engine: str, profile: Profile, earlier: Operation, later: Operation, observed: Observation
) -> ConformanceRow:
    """The row for one observation against one profile's cell.

    Agreement needs the same outcome and, when both fail, a kind the cell allows (its exception or
    one it ``also_raises``): a later job that fails for another reason than the matrix says would be
    retried or reported wrongly.
    """
    cell = profile.cell(earlier, later)
    note = observed.note
    if not observed.valid:
        agrees = False
        note = f"experiment invalid: the earlier job failed ({observed.earlier_error})"
    elif cell.later_fails != observed.later_fails:
        agrees = False
    else:
        agrees = not cell.later_fails or observed.later_kind in cell.kinds
    return ConformanceRow(
        engine=engine,
        profile=profile.name,
        earlier=earlier,
        later=later,
        predicted_fails=cell.later_fails,
        predicted_kind=cell.exception,
        observed_fails=observed.later_fails,
        observed_kind=observed.later_kind,
        observed_error=observed.later_error,
        agrees=agrees,
        source=cell.source,
        note=note,
    )


@dataclass(frozen=True)
class ProfileComparison:
    """All rows of one run compared with one profile."""

    engine: str
    profile: str
    rows: tuple[ConformanceRow, ...]

    @property
    def covered(self) -> int:
        return len(self.rows)

    @property
    def agreeing(self) -> tuple[ConformanceRow, ...]:
        return tuple(r for r in self.rows if r.agrees)

    @property
    def diverging(self) -> tuple[ConformanceRow, ...]:
        return tuple(r for r in self.rows if not r.agrees)

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "profile": self.profile,
            "covered": self.covered,
            "agreeing": len(self.agreeing),
            "diverging": len(self.diverging),
            "rows": [r.to_dict() for r in self.rows],
        }


@dataclass(frozen=True)
class RunnerResult:
    """One runner's observations over its pairs, and their comparison with each profile."""

    engine: str
    runner_profile: str
    label: str
    observations: tuple[tuple[Operation, Operation, Observation], ...]
    comparisons: tuple[ProfileComparison, ...]
    seconds: float

    def comparison(self, profile: str) -> ProfileComparison:
        for c in self.comparisons:
            if c.profile == profile:
                return c
        raise KeyError(f"no comparison with profile {profile!r}")


@dataclass(frozen=True)
class ConformanceReport:
    engine: str
    results: tuple[RunnerResult, ...]
    seconds: float
    meta: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "seconds": round(self.seconds, 2),
            "meta": dict(self.meta),
            "runs": [
                {
                    "runner": r.label,
                    "runner_profile": r.runner_profile,
                    "seconds": round(r.seconds, 2),
                    "comparisons": [c.to_dict() for c in r.comparisons],
                }
                for r in self.results
            ],
        }


def pair_rows(part: str, ids: Sequence[int], value: int) -> Any:
    """The rows a job of a pair writes, as an Arrow table (``id``, ``part``, ``value``): the one
    shape the Arrow-writing runners (delta-rs, pyiceberg) race with."""
    import pyarrow as pa  # optional heavy dependency

    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "part": pa.array([part] * len(ids), pa.string()),
            "value": pa.array([value] * len(ids), pa.int64()),
        }
    )


def parse_pair(text: str) -> tuple[Operation, Operation]:
    """``"truncate:insert_into"`` -> the ordered pair; anything else is an error saying the form."""
    earlier, sep, later = text.partition(":")
    if not sep or not earlier.strip() or not later.strip():
        raise InvalidDeclarationError(f"pair {text!r} is not EARLIER:LATER (e.g. truncate:insert_into)")
    return parse_operation(earlier.strip()), parse_operation(later.strip())


def pairs(operations: Sequence[Operation]) -> list[tuple[Operation, Operation]]:
    """Every ordered pair, ``earlier`` first: the cells of the square matrix."""
    return [(a, b) for a in operations for b in operations]


def run_runner(
    runner: PairRunner,
    only: Iterable[tuple[Operation, Operation]] | None = None,
    progress: Callable[[Operation, Operation, Observation], None] | None = None,
) -> RunnerResult:
    """Run ``runner`` over its profile's pairs (or ``only`` those) and compare every profile."""
    own = get_profile(runner.profile)
    profiles = [own] + [get_profile(name) for name in runner.compare_with]
    todo = list(only) if only is not None else pairs(own.operations)
    for earlier, later in todo:
        own.operation(earlier)  # an operation the runner's profile does not know is an error
        own.operation(later)
    start = time.perf_counter()
    observed: list[tuple[Operation, Operation, Observation]] = []
    for earlier, later in todo:
        obs = runner.run_pair(earlier, later)
        observed.append((earlier, later, obs))
        if progress is not None:
            progress(earlier, later, obs)
    seconds = time.perf_counter() - start
    comparisons = []
    for profile in profiles:
        known = set(profile.operations)
        rows = tuple(
            compare(runner.engine, profile, a, b, obs)
            for a, b, obs in observed
            if a in known and b in known
        )
        comparisons.append(ProfileComparison(runner.engine, profile.name, rows))
    label = str(getattr(runner, "label", "") or f"{runner.engine} ({runner.profile})")
    return RunnerResult(runner.engine, runner.profile, label, tuple(observed), tuple(comparisons), seconds)


#: An engine's ``conformance_runners``: its runners for tables under a work directory.
RunnerFactory = Callable[[Path], AbstractContextManager[Sequence[PairRunner]]]


def run_runners(
    engine: str,
    runners: RunnerFactory,
    workdir: Path,
    progress: Callable[[Operation, Operation, Observation], None] | None = None,
    only: Sequence[tuple[Operation, Operation]] | None = None,
    meta: Callable[[], dict[str, str]] | None = None,
) -> ConformanceReport:
    """Every runner of ``engine`` over all its pairs (or ``only`` those), tables in ``workdir``;
    ``meta`` says what the engine is (library versions) for the report."""
    start = time.perf_counter()
    results: list[RunnerResult] = []
    with runners(workdir) as found:
        for runner in found:
            results.append(run_runner(runner, only=only, progress=progress))
    seconds = time.perf_counter() - start
    return ConformanceReport(engine, tuple(results), seconds, {} if meta is None else dict(meta()))


# ---------------------------------------------------------------------------------------------
# Rendering: the same report as a terminal table, JSON or the Markdown page under docs/.


def _mark(fails: bool, kind: ConflictKind | None) -> str:
    return f"fails ({kind.value})" if fails and kind is not None else ("fails" if fails else "ok")


def _short(text: str | None, limit: int = 110) -> str:
    if not text:
        return ""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def render_json(report: ConformanceReport) -> str:
    return json.dumps(report.to_dict(), indent=2, sort_keys=True)


def render_table(report: ConformanceReport) -> str:
    lines = [f"conformance of {report.engine} ({report.seconds:.1f} s)"]
    for result in report.results:
        lines.append("")
        lines.append(
            f"runner {result.label} (profile {result.runner_profile}): {len(result.observations)} pairs "
            f"run in {result.seconds:.1f} s"
        )
        for comp in result.comparisons:
            lines.append(
                f"  vs {comp.profile}: {comp.covered} cells covered, {len(comp.agreeing)} agree, "
                f"{len(comp.diverging)} diverge"
            )
            if comp.diverging:
                rows = [
                    [f"{row.earlier.value} -> {row.later.value}", _mark(row.predicted_fails, row.predicted_kind),
                     _mark(row.observed_fails, row.observed_kind)]
                    for row in comp.diverging
                ]
                lines.extend(_indent(tabulate(rows, headers=["pair", "predicted", "observed"]), "    "))
        lines.append("  observed matrix (rows: earlier, columns: later; x = later fails):")
        headers, cells = _grid_cells(result)
        lines.extend(_indent(tabulate(cells, headers=headers, tablefmt="plain", stralign="right"), "  "))
    return "\n".join(lines)


def _indent(text: str, prefix: str) -> list[str]:
    return [prefix + line for line in text.splitlines()]


_ABBREV: dict[Operation, str] = {
    Operation.INSERT_OVERWRITE: "ins_ow",
    Operation.TRUNCATE: "trunc",
    Operation.INSERT_INTO: "ins_to",
    Operation.UPDATE: "update",
    Operation.DELETE: "delete",
    Operation.MERGE: "merge",
    Operation.SMALL_FILE_MERGE: "sf_mrg",
    Operation.MINOR_COMPACT: "minor",
    Operation.MAJOR_COMPACT: "major",
    Operation.OPTIMIZE: "optim",
    Operation.ALTER_METADATA: "alter",
}


def _grid_cells(result: RunnerResult) -> tuple[list[str], list[list[str]]]:
    """The observed matrix: a header of abbreviated operations, one row per earlier operation."""
    ops: list[Operation] = []
    for a, b, _ in result.observations:
        for op in (a, b):
            if op not in ops:
                ops.append(op)
    seen = {(a, b): obs for a, b, obs in result.observations}
    rows = []
    for a in ops:
        marks = []
        for b in ops:
            obs = seen.get((a, b))
            marks.append("" if obs is None else ("!" if not obs.valid else ("x" if obs.later_fails else ".")))
        rows.append([a.value, *marks])
    return ["", *(_ABBREV.get(op, op.value[:7]) for op in ops)], rows


def _grid(result: RunnerResult) -> list[str]:
    """The observed matrix in fixed-width columns (the docs pages keep this exact layout)."""
    headers, rows = _grid_cells(result)
    width = max((len(row[0]) for row in rows), default=0)
    out = [" " * width + " " + " ".join(f"{h:>7}" for h in headers[1:])]
    out.extend(f"{row[0]:>{width}} " + " ".join(f"{mark:>7}" for mark in row[1:]) for row in rows)
    return out


def render_markdown(report: ConformanceReport) -> str:
    """The docs page: summary, the divergences, then every cell with the error observed."""
    out = [
        f"# Conformance: {report.engine}",
        "",
        "Generated by `occflow conformance --engine "
        f"{report.engine} --write-docs`; do not edit by hand. Each row is one pair of jobs on one "
        "partition of a real table: the later job started on the earlier job's snapshot and "
        "committed after it. *Predicted* is the profile's cell, *observed* what the engine did.",
        "",
    ]
    if report.meta:
        out += [", ".join(f"{k}: {v}" for k, v in sorted(report.meta.items())), ""]
    out += ["| runner | compared with | cells covered | agree | diverge | seconds |", "|---|---|---|---|---|---|"]
    for result in report.results:
        for comp in result.comparisons:
            out.append(
                f"| {result.label} | {comp.profile} | {comp.covered} | {len(comp.agreeing)} "
                f"| {len(comp.diverging)} | {result.seconds:.1f} |"
            )
    for result in report.results:
        for comp in result.comparisons:
            out += ["", f"## {result.label}: observed vs {comp.profile}", ""]
            if comp.diverging:
                own = get_profile(result.runner_profile)
                out += [
                    f"{len(comp.diverging)} divergences (*why*: the note of the {own.name} profile's cell):",
                    "",
                    "| earlier | later | predicted | observed | why | engine error |",
                    "|---|---|---|---|---|---|",
                ]
                for row in comp.diverging:
                    why = _why(own, row)
                    out.append(
                        f"| {row.earlier.value} | {row.later.value} | "
                        f"{_mark(row.predicted_fails, row.predicted_kind)} | "
                        f"{_mark(row.observed_fails, row.observed_kind)} | {_md(why)} | "
                        f"{_md(_short(row.observed_error))} |"
                    )
            else:
                out.append("No divergences: every covered cell agrees.")
        out += ["", f"## {result.label}: every cell observed", ""]
        out += ["```", *_grid(result), "```", "", "(x: the later job failed; .: both committed; !: invalid run)", ""]
        out += ["| earlier | later | observed | engine error | runner's note |", "|---|---|---|---|---|"]
        for a, b, obs in result.observations:
            observed = "INVALID: " + _short(obs.earlier_error) if not obs.valid else _mark(
                obs.later_fails, obs.later_kind
            )
            out.append(
                f"| {a.value} | {b.value} | {_md(observed)} | {_md(_short(obs.later_error))} | {_md(obs.note)} |"
            )
    return "\n".join(out) + "\n"


def _why(own: Profile, row: ConformanceRow) -> str:
    if own.name == row.profile or row.earlier not in own.operations or row.later not in own.operations:
        return row.note
    return own.cell(row.earlier, row.later).note


def _md(text: str) -> str:
    return text.replace("|", "\\|")


RENDERERS: dict[str, Callable[[ConformanceReport], str]] = {
    "table": render_table,
    "json": render_json,
    "markdown": render_markdown,
}

