"""``occflow lint DAG_FOLDER``: pairs of declared writes that can run together and would conflict,
or would both commit and corrupt the data (listed first)."""

from __future__ import annotations

import argparse
import json
import sys

from ..lint.dagscan import ScannedFolder, scan_dag_folder
from ..lint.planning import Collision, FindingKind, collisions


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lint", help="find tasks that can run together and would conflict by the matrix")
    p.add_argument("dag_folder", metavar="DAG_FOLDER")
    p.add_argument("--window", type=float, default=60.0, metavar="MINUTES",
                   help="runs of two DAGs starting this close may overlap (default 60: a run's length)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--exit-zero", action="store_true",
                   help="exit 0 even when conflicts are found (pairs that corrupt data still exit 1)")
    p.set_defaults(func=_lint)


def scan_for(command: str, folder: str) -> ScannedFolder | None:
    """The scanned folder, with a line on stderr per DAG file that failed to import; None when
    no DAG could be read at all (a missing or empty folder is an ``OccflowError``: exit 2)."""
    scanned = scan_dag_folder(folder)
    for problem in scanned.import_problems():
        print(f"occflow {command}: {problem}", file=sys.stderr)
    return scanned if scanned.dag_ids else None


def _lint(args: argparse.Namespace) -> int:
    scanned = scan_for("lint", args.dag_folder)
    if scanned is None:
        return 2
    found = collisions(scanned.tasks, window=args.window * 60)
    corrupting = sum(c.kind is FindingKind.CORRUPTS_DATA for c in found)
    if args.format == "json":
        print(json.dumps({"dags": list(scanned.dag_ids), "declared_writes": len(scanned.tasks),
                          "counts": {kind.value: sum(c.kind is kind for c in found) for kind in FindingKind},
                          "collisions": [c.to_dict() for c in found],
                          "import_errors": scanned.import_problems()}, indent=2))
    else:
        for c in found:
            _print_text(c)
        of_which = f" ({corrupting} that corrupt data)" if corrupting else ""
        print(f"{len(found)} collision(s){of_which} among {len(scanned.tasks)} declared write(s) in "
              f"{len(scanned.dag_ids)} DAG(s)")
    if scanned.import_errors:
        return 2  # the report misses the DAGs that did not import
    if corrupting:
        return 1  # never waived: admission refuses such a pair whatever the profile says
    return 0 if (not found or args.exit_zero) else 1


def _print_text(c: Collision) -> None:
    pair = c.first.ident if c.first.ident == c.second.ident else f"{c.first.ident} and {c.second.ident}"
    ops = f"{c.first.write.operation.value} / {c.second.write.operation.value}"
    flag = "CORRUPTS DATA: " if c.kind is FindingKind.CORRUPTS_DATA else ""
    print(f"{flag}{pair}: {ops} on {c.first.write.table} [{c.footprint}]")
    print(f"    together because: {c.why_together}")
    for evidence in c.evidence:
        print(f"    {evidence.describe()}")
    # JSON carries the notes on every finding; text only where the engine's matrix is decisive.
    for note in c.notes if c.kind is FindingKind.CORRUPTS_DATA else ():
        print(f"    note: {note}")
