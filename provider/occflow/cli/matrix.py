"""``occflow matrix PROFILE`` and ``occflow profiles``.

``PROFILE`` may be a table format, with ``--engine`` the engine that commits: resolved as
``occflow policy`` resolves it (``policy.resolve_profile``), the note on stderr but for tables.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tabulate import tabulate

from ..core.profiles import PROFILES, get_profile
from ..core.render import matrix_json, matrix_markdown, matrix_table
from . import SUBCOMMANDS
from .policy import add_engine_option, resolve_profile


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("matrix", help=SUBCOMMANDS["matrix"].help)
    p.add_argument("profile", help=f"a profile: {', '.join(PROFILES)}; or a table format (as for occflow policy)")
    add_engine_option(p)
    p.add_argument("--format", choices=["table", "json", "markdown"], default="table")
    p.set_defaults(func=_matrix)

    p = sub.add_parser("profiles", help=SUBCOMMANDS["profiles"].help)
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument("--write-docs", metavar="DIR", help="write one Markdown page per profile into DIR")
    p.set_defaults(func=_profiles)


def _matrix(args: argparse.Namespace) -> int:
    resolved = resolve_profile(args.profile, args.engine)
    if resolved.note is not None:
        print(resolved.note, file=sys.stdout if args.format == "table" else sys.stderr)
    profile = get_profile(resolved.profile)
    render = {"table": matrix_table, "json": matrix_json, "markdown": matrix_markdown}[args.format]
    print(render(profile))
    return 0


def _profiles(args: argparse.Namespace) -> int:
    if args.write_docs:
        out = Path(args.write_docs)
        out.mkdir(parents=True, exist_ok=True)
        for profile in PROFILES.values():
            (out / f"{profile.name}.md").write_text(matrix_markdown(profile))
            print(f"wrote {out / (profile.name + '.md')}")
        return 0
    if args.format == "json":
        print(json.dumps([
            {"profile": p.name, "title": p.title, "table_format": p.table_format,
             "isolation": p.isolation, "operations": [o.value for o in p.operations],
             "failing_cells": sum(c.later_fails for c in p.cells), "cells": len(p.cells)}
            for p in PROFILES.values()
        ], indent=2))
        return 0
    rows = [
        (p.name, f"{p.title} — {len(p.operations)} operations, "
         f"{sum(c.later_fails for c in p.cells)}/{len(p.cells)} cells fail the later job")
        for p in PROFILES.values()
    ]
    print(tabulate(rows, tablefmt="plain", disable_numparse=True))
    return 0
