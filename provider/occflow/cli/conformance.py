"""``occflow conformance --engine ENGINE``: run every pair on the real engine, compare, report."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ..core.operations import Operation
from ..engines.conformance import (
    RENDERERS,
    ConformanceReport,
    Observation,
    parse_pair,
    render_markdown,
    run_runners,
)
from ..engines.registry import ConformanceEntry, conformance_entry, conformance_names
from . import SUBCOMMANDS

DEFAULT_DOCS_DIR = "docs/conformance"


def engine_for(name: str) -> ConformanceEntry:
    """The conformance entry points of engine ``name`` (a committer in the engine registry,
    ``core.engines``); an unknown name is an error naming the known."""
    return conformance_entry(name)


def run_engine(
    engine: str,
    workdir: Path,
    progress: Callable[[Operation, Operation, Observation], None] | None = None,
    only: Sequence[tuple[Operation, Operation]] | None = None,
) -> ConformanceReport:
    """Every runner of ``engine`` over all its pairs (or ``only`` those), tables in ``workdir``."""
    found = engine_for(engine)
    return run_runners(found.name, found.runners, workdir, progress, only, found.meta)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "conformance",
        help=SUBCOMMANDS["conformance"].help,
        description=(
            "Each pair runs on one partition of a fresh real table: the later job starts on the earlier "
            "job's snapshot and commits after it. Divergences from the profiles are listed, not hidden."
        ),
    )
    p.add_argument("--engine", required=True, choices=sorted(conformance_names()), help="the engine to run")
    p.add_argument("--format", choices=sorted(RENDERERS), default="table")
    p.add_argument(
        "--write-docs",
        nargs="?",
        const=DEFAULT_DOCS_DIR,
        metavar="DIR",
        help=f"also write the Markdown page DIR/ENGINE.md (default DIR: {DEFAULT_DOCS_DIR})",
    )
    p.add_argument("--workdir", help="where to create the tables (default: a temporary directory)")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a pair diverges from the runner's own profile (documented profiles never fail it)",
    )
    p.add_argument("--progress", action="store_true", help="print each pair to stderr as it finishes")
    p.add_argument(
        "--pair",
        action="append",
        metavar="EARLIER:LATER",
        help="run only this ordered pair (repeatable), e.g. --pair truncate:insert_into",
    )
    p.set_defaults(func=_conformance)


def _progress(earlier: Operation, later: Operation, obs: Observation) -> None:
    outcome = "INVALID" if not obs.valid else ("ok" if obs.later_committed else f"fails ({obs.later_kind})")
    print(f"  {earlier.value} -> {later.value}: {outcome}", file=sys.stderr)


def _conformance(args: argparse.Namespace) -> int:
    progress = _progress if args.progress else None
    only = None if not args.pair else [parse_pair(text) for text in args.pair]
    if args.workdir:
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        report = run_engine(args.engine, workdir, progress, only)
    else:
        with tempfile.TemporaryDirectory(prefix="occflow-conformance-") as tmp:
            report = run_engine(args.engine, Path(tmp), progress, only)
    print(RENDERERS[args.format](report))
    if args.write_docs:
        out = Path(args.write_docs)
        out.mkdir(parents=True, exist_ok=True)
        page = out / f"{args.engine}.md"
        page.write_text(render_markdown(report))
        print(f"wrote {page}", file=sys.stderr)
    if args.strict:
        own = [
            row
            for result in report.results
            for row in result.comparison(result.runner_profile).diverging
        ]
        return 1 if own else 0
    return 0
