"""One lint run: findings with their suppressions and baseline status, the exit code, the output.

Exit codes, as a CI gate expects: 1 when a *new* unprotected finding remains (``corrupts_data``
or ``conflict``, neither suppressed nor in the baseline), 0 otherwise; ``--exit-zero`` waives
conflicts but never a pair that corrupts data. Unreadable DAG files and malformed settings are 2
(raised as ``OccflowError`` by the readers, or ``import_errors`` here).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from .baseline import Baseline
from .config import LintConfig
from .dagscan import ScannedFolder
from .findings import Finding, Suppression, fold
from .planning import Collision, DeclaredTask, FindingKind, collisions
from .pragmas import is_dag_source, location, read_source

MAX_FOOTPRINTS_SHOWN = 3
#: ``--min-severity`` values, most severe first: a finding is listed when its severity is at
#: least the one asked for (``info`` lists the pairs admission serializes too).
SEVERITIES = ("error", "warning", "info")


def shown(f: Finding, min_severity: str) -> bool:
    return SEVERITIES.index(f.kind.severity) <= SEVERITIES.index(min_severity)


@dataclass(frozen=True)
class LintReport:
    scanned: ScannedFolder
    findings: tuple[Finding, ...]
    baseline: Baseline | None = None
    unused_suppressions: tuple[str, ...] = field(default=())
    # The per-instance pairs the findings fold (mapped instances apart): what ``occflow pools``
    # keeps apart, kept in the JSON for tools that read them.
    collisions: tuple[Collision, ...] = field(default=())

    @property
    def new(self) -> list[Finding]:
        return [f for f in self.findings if f.new]

    def count(self, kind: FindingKind) -> int:
        return sum(f.kind is kind for f in self.findings)

    def exit_code(self, exit_zero: bool = False) -> int:
        if self.scanned.import_errors:
            return 2  # the report misses the DAGs that did not import
        new = self.new
        if any(f.kind is FindingKind.CORRUPTS_DATA for f in new):
            return 1  # never waived by --exit-zero
        return 1 if new and not exit_zero else 0

    def summary(self, exit_zero: bool = False) -> dict[str, object]:
        return {
            "dags": list(self.scanned.dag_ids),
            "declared_writes": len(self.scanned.tasks),
            "findings": len(self.findings),
            "by_kind": {kind.value: self.count(kind) for kind in FindingKind},
            "suppressed": sum(f.suppression is not None for f in self.findings),
            "in_baseline": sum(f.in_baseline for f in self.findings),
            "new": len(self.new),
            "baseline": str(self.baseline.path) if self.baseline else None,
            "stale_baseline": [e.fingerprint for e in self.baseline.stale(self.findings)] if self.baseline else [],
            "unused_suppressions": list(self.unused_suppressions),
            "import_errors": self.scanned.import_problems(),
            "exit_code": self.exit_code(exit_zero),
        }

    def to_dict(self, exit_zero: bool = False, min_severity: str = "info") -> dict[str, object]:
        """Every finding at least as severe as ``min_severity`` (the summary counts them all)."""
        return {"findings": [{**f.to_dict(), "location": where(f)} for f in self.findings if shown(f, min_severity)],
                "summary": self.summary(exit_zero), "collisions": [c.to_dict() for c in self.collisions]}

    def summary_line(self) -> str:
        by_kind = ", ".join(f"{self.count(k)} {k.value}" for k in FindingKind)
        return (f"{len(self.findings)} finding(s) ({by_kind}); {len(self.new)} new, "
                f"{sum(f.suppression is not None for f in self.findings)} suppressed, "
                f"{sum(f.in_baseline for f in self.findings)} in baseline; "
                f"{len(self.scanned.tasks)} declared write(s) in {len(self.scanned.dag_ids)} DAG(s)")

    def text(self, show_all: bool = False, min_severity: str = "warning") -> list[str]:
        """New findings (with ``show_all``, suppressed ones and those in the baseline too), at
        least as severe as ``min_severity``: ``serialized`` pairs (info) only when asked."""
        lines: list[str] = []
        for f in self.findings:
            if (f.new or f.protected or show_all) and shown(f, min_severity):
                lines.extend(_finding_text(f))
        if self.baseline:
            stale = self.baseline.stale(self.findings)
            if stale:
                lines.append(f"{len(stale)} baseline entr{'y' if len(stale) == 1 else 'ies'} no longer found: "
                             "rewrite the baseline with --write-baseline")
        lines.extend(f"unused suppression: {u}" for u in self.unused_suppressions)
        lines.append(self.summary_line())
        return lines


def _shown_path(path: str) -> str:
    try:
        shown = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if shown.startswith("..") else shown


def where(f: Finding) -> str:
    """``path:line`` of the finding's first task found in its DAG file (see ``location``); a
    DAG read from a zip has no lines: its DAG id."""
    for t in f.tasks:
        found = location(t.source, t.base_task_id, t.dag_id)
        if found:
            path, line = found
            return f"{_shown_path(path)}:{line}"
    return f.dag_ids[0]


def _finding_text(f: Finding) -> list[str]:
    if len(f.tasks) == 1:
        pair = f"{f.tasks[0].base_ident} with itself"
    elif len(f.dag_ids) == 1:
        pair = f"{f.dag_ids[0]}: " + " x ".join(t.base_task_id for t in f.tasks)
    else:
        pair = " x ".join(t.base_ident for t in f.tasks)
    shown = ", ".join(f.footprints[:MAX_FOOTPRINTS_SHOWN])
    more = len(f.footprints) - MAX_FOOTPRINTS_SHOWN
    footprints = f"{shown}, +{more} more" if more > 0 else shown
    status = (f" [suppressed: {f.suppression.reason}]" if f.suppression
              else " [in baseline]" if f.in_baseline else "")
    head = f"{where(f)}: {f.kind.value} ({f.kind.severity}): {pair} on {f.table} [{footprints}]{status}"
    if f.protected:
        return [head, f"    admission runs them one at a time (without it: {f.would_be.value}: {f.effects()})"]
    return [head, f"    {f.reason}"]


def _suppression(f: Finding, config: LintConfig, used: set[str]) -> Suppression | None:
    """The first pragma (in the DAG file, on either task) or config entry that silences ``f``."""
    if f.protected:
        return None  # information only: nothing to silence
    for t in f.tasks:
        if t.source and is_dag_source(t.source):
            for p in read_source(t.source).pragmas_of(t.base_task_id):
                if f.kind.value in p.kinds:
                    where = f"{_shown_path(t.source)}:{p.line}"
                    used.add(where)
                    return Suppression("pragma", where, t.base_ident, p.kinds, p.reason)
        for entry in config.settings.ignore:
            if entry.task == t.base_ident and f.kind.value in entry.kinds:
                used.add(f"config:{entry.task}")
                return Suppression("config", str(config.path), entry.task, entry.kinds, entry.reason)
    return None


def _unused(tasks: Sequence[DeclaredTask], config: LintConfig, used: set[str]) -> tuple[str, ...]:
    """Pragmas and config entries that silenced nothing (a typo, or a fixed finding)."""
    out = [f"{config.path}: task {e.task!r} ({', '.join(e.kinds)})"
           for e in config.settings.ignore if f"config:{e.task}" not in used]
    for source in sorted({t.source for t in tasks if t.source and is_dag_source(t.source)}):
        for line in sorted(read_source(source).pragmas):
            where = f"{_shown_path(source)}:{line}"
            if where not in used:
                out.append(f"{where}: pragma silenced nothing")
    return tuple(out)


def lint(scanned: ScannedFolder, config: LintConfig, baseline: Baseline | None = None,
         window: float = 3600.0) -> LintReport:
    """The findings of a scanned DAG folder, with suppressions and the baseline applied."""
    known = baseline.fingerprints if baseline else frozenset()
    used: set[str] = set()
    result: list[Finding] = []
    pairs = collisions(scanned.tasks, window)
    for f in fold(pairs):
        suppression = _suppression(f, config, used)
        result.append(f.with_status(suppression, f.fingerprint in known))
    return LintReport(scanned, tuple(result), baseline, _unused(scanned.tasks, config, used), tuple(pairs))
