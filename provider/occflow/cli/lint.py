"""``occflow lint DAG_FOLDER``: pairs of declared writes that can run together and would conflict."""

from __future__ import annotations

import argparse
import json
import sys

from ..lint.dagscan import scan_dag_folder
from ..lint.planning import collisions


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("lint", help="find tasks that can run together and would conflict by the matrix")
    p.add_argument("dag_folder", metavar="DAG_FOLDER")
    p.add_argument("--window", type=float, default=60.0, metavar="MINUTES",
                   help="runs of two DAGs starting this close may overlap (default 60: a run's length)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even when collisions are found")
    p.set_defaults(func=_lint)


def _lint(args: argparse.Namespace) -> int:
    scanned = scan_dag_folder(args.dag_folder)
    for path, error in scanned.import_errors.items():
        print(f"occflow lint: cannot import {path}: {error.strip().splitlines()[-1]}", file=sys.stderr)
    found = collisions(scanned.tasks, window=args.window * 60)
    if args.format == "json":
        print(json.dumps({"dags": list(scanned.dag_ids), "declared_writes": len(scanned.tasks),
                          "collisions": [c.to_dict() for c in found]}, indent=2))
    else:
        for c in found:
            pair = c.first.ident if c.first is c.second else f"{c.first.ident} and {c.second.ident}"
            ops = f"{c.first.write.operation.value} / {c.second.write.operation.value}"
            print(f"{pair}: {ops} on {c.first.write.table} [{c.footprint}]")
            print(f"    together because: {c.why_together}")
            for cell in c.cells:
                print(f"    {c.first.write.profile.name}: {cell.earlier.value} then {cell.later.value} -> "
                      f"later fails with {cell.exception.value if cell.exception else '-'} ({cell.source})")
        print(f"{len(found)} collision(s) among {len(scanned.tasks)} declared write(s) in "
              f"{len(scanned.dag_ids)} DAG(s)")
    if scanned.import_errors:
        return 2
    return 0 if (not found or args.exit_zero) else 1
