"""The baseline file: the unprotected findings a team has accepted for now.

``occflow lint DAGS --write-baseline FILE`` writes the current unprotected findings (neither
serialized by admission nor suppressed); ``--baseline FILE`` marks the findings found in it as
known, so only new ones fail the lint. A finding is matched by its fingerprint: DAG and task
ids, table and kind, never line numbers, so moving code around keeps it known. The file is
JSON a reviewer can read in a diff: each entry repeats the tasks, table, kind and reason.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from .config import LintConfigError
from .findings import Finding

FORMAT = "occflow-lint-baseline"
VERSION = 1


class BaselineEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    fingerprint: str
    kind: str
    tasks: tuple[str, ...]
    table: str
    reason: str = ""


class BaselineFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str
    version: int
    findings: tuple[BaselineEntry, ...]


@dataclass(frozen=True)
class Baseline:
    path: Path
    entries: tuple[BaselineEntry, ...]

    @property
    def fingerprints(self) -> frozenset[str]:
        return frozenset(e.fingerprint for e in self.entries)

    def stale(self, found: Sequence[Finding]) -> list[BaselineEntry]:
        """Entries no finding matches any more (fixed, or now protected): trim them."""
        current = {f.fingerprint for f in found if not f.protected}
        return [e for e in self.entries if e.fingerprint not in current]


def read_baseline(path: str | Path) -> Baseline:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise LintConfigError(f"baseline {str(path)!r} does not exist (write one with --write-baseline)") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LintConfigError(f"cannot read baseline {str(path)!r}: {exc}") from exc
    try:
        parsed = BaselineFile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise LintConfigError(f"baseline {str(path)!r} is not an occflow lint baseline: {problems}") from exc
    if parsed.format != FORMAT or parsed.version != VERSION:
        raise LintConfigError(
            f"baseline {str(path)!r} is {parsed.format!r} version {parsed.version}, expected {FORMAT!r} version {VERSION}"
        )
    return Baseline(path, parsed.findings)


def write_baseline(path: str | Path, found: Sequence[Finding]) -> int:
    """Write the unprotected, unsuppressed findings; the number written."""
    entries = [
        {"fingerprint": f.fingerprint, "kind": f.kind.value, "tasks": list(f.idents), "table": f.table,
         "reason": f.reason}
        for f in found
        if not f.protected and f.suppression is None
    ]
    entries.sort(key=lambda e: (str(e["table"]), list(e["tasks"]), str(e["kind"])))
    document = {"format": FORMAT, "version": VERSION, "findings": entries}
    try:
        Path(path).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise LintConfigError(f"cannot write baseline {str(path)!r}: {exc}") from exc
    return len(entries)
