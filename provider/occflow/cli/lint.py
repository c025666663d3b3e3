"""``occflow lint DAG_FOLDER``: pairs of declared writes that can run together and would conflict
or corrupt data, and (as information) the pairs admission serializes. A CI gate: exit 1 only
for new unprotected findings (see ``occflow.lint.report``); docs/lint.md."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from ..core.errors import OccflowError
from ..engines.deltars.location import default_delta_location
from ..lint.baseline import read_baseline, write_baseline
from ..lint.config import load_config
from ..lint.dagscan import ScannedFolder, scan_dag_folder
from ..lint.planning import with_name_locations
from ..lint.report import SEVERITIES, lint
from . import SUBCOMMANDS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lint", help=SUBCOMMANDS["lint"].help)
    p.add_argument("dag_folder", metavar="DAG_FOLDER")
    p.add_argument("--window", type=float, default=60.0, metavar="MINUTES",
                   help="runs of two DAGs starting this close may overlap (default 60: a run's length)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--baseline", metavar="FILE",
                   help="findings in this file are known: only new ones fail (default: the config's baseline)")
    p.add_argument("--write-baseline", metavar="FILE",
                   help="write the current unprotected, unsuppressed findings to FILE and exit 0")
    p.add_argument("--config", metavar="FILE",
                   help="lint settings (default: the closest .occflow-lint.toml or pyproject.toml "
                        "with [tool.occflow.lint] at or above DAG_FOLDER)")
    p.add_argument("--show-all", action="store_true",
                   help="text output: also list suppressed findings and those in the baseline")
    p.add_argument("--min-severity", choices=SEVERITIES, default=None,
                   help="list findings at least this severe (default: warning for text, info for JSON); "
                        "info adds the pairs admission serializes. The exit code is the same")
    p.add_argument("--exit-zero", action="store_true",
                   help="exit 0 even when new conflicts are found (new pairs that corrupt data still exit 1)")
    p.set_defaults(func=_lint)


def scan_for(command: str, folder: str) -> ScannedFolder | None:
    """The scanned folder, with a line on stderr per DAG file that failed to import; None when
    no DAG could be read at all (a missing or empty folder is an ``OccflowError``: exit 2).
    A hand-made Delta declaration that names no location is keyed by where its name leads too,
    as ``DeltaWriteOperator`` resolves it, so lint and pools meet it with the operator's write."""
    scanned = scan_dag_folder(folder)
    for problem in scanned.import_problems():
        print(f"occflow {command}: {problem}", file=sys.stderr)
    if not scanned.dag_ids:
        return None
    return replace(scanned, tasks=with_name_locations(scanned.tasks, name_location))


def name_location(table: str) -> str | None:
    """Where ``DeltaWriteOperator`` writes ``table`` when given no ``path``: under the warehouse
    of ``$OCCFLOW_HOME`` (``default_delta_location``), symlinks resolved as the operator resolves
    them; ``None`` for a name that leads nowhere there (a template, a name outside the root)."""
    try:
        return str(Path(default_delta_location(table)).resolve())
    except (OccflowError, OSError):
        return None


def _lint(args: argparse.Namespace) -> int:
    config = load_config(args.dag_folder, args.config)  # settings errors first: nothing scanned yet
    baseline_path = args.baseline or (None if args.write_baseline else config.baseline)
    baseline = read_baseline(baseline_path) if baseline_path else None
    scanned = scan_for("lint", args.dag_folder)
    if scanned is None:
        return 2
    report = lint(scanned, config, baseline, window=args.window * 60)
    if args.write_baseline:
        if scanned.import_errors:
            print("occflow lint: baseline not written: DAG files failed to import", file=sys.stderr)
            return 2
        written = write_baseline(args.write_baseline, report.findings)
        print(f"wrote {written} finding(s) to {args.write_baseline}")
        print(report.summary_line())
        return 0
    if args.format == "json":
        print(json.dumps(report.to_dict(args.exit_zero, args.min_severity or "info"), indent=2))
    else:
        print("\n".join(report.text(args.show_all, args.min_severity or "warning")))
    for unused in report.unused_suppressions:
        if args.format == "json":
            print(f"occflow lint: unused suppression: {unused}", file=sys.stderr)
    return report.exit_code(args.exit_zero)
