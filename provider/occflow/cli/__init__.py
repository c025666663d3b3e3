"""The ``occflow`` command. Each subcommand lives in its own module with ``register(sub)``.

Only the chosen subcommand's module is imported: the modules pull in SQLAlchemy (leases), the
simulator, Airflow (lint) or sqlglot (explain), about 2 s of CPU together, and ``occflow
explain`` needs none but its own. ``occflow --help`` lists every subcommand from
``SUBCOMMANDS`` without importing any (tests/cli/test_cli_startup.py holds the help texts equal
to the ones the modules register, and the imports to the chosen module's).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.errors import OccflowError


@dataclass(frozen=True)
class Subcommand:
    """Where a subcommand is registered (a module under ``occflow.cli`` exposing
    ``register(subparsers)``, whose parser sets ``func(args) -> int``) and its one-line help."""

    module: str
    help: str


#: Every subcommand, in ``--help`` order.
SUBCOMMANDS: dict[str, Subcommand] = {
    "matrix": Subcommand("matrix", "print a profile's conflict matrix"),
    "profiles": Subcommand("matrix", "list the profiles"),
    "conformance": Subcommand("conformance", "run every pair of operations on a real engine and compare with the profiles' matrices"),
    "simulate": Subcommand("simulate", "simulate a workload of concurrent writes under each policy"),
    "policy": Subcommand("policy", "print the conflict policy of an operation on a profile"),
    "leases": Subcommand("leases", "list or release admission leases"),
    "pools": Subcommand("pools", "derive Airflow pools from the DAGs' declared writes"),
    "lint": Subcommand("lint", "find tasks that can run together and would conflict by the matrix"),
    "explain": Subcommand("explain", "the write a SQL job declares: operation, partitions, profile, conflicts"),
}


def chosen_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level
    parser has no option that takes a value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: the chosen subcommand registered by its module, every other
    one a stub carrying its help (enough for ``--help`` and for naming the choices)."""
    parser = argparse.ArgumentParser(
        prog="occflow",
        description="Conflict-aware concurrent writes on Delta Lake, Iceberg and MaxCompute tables.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = SUBCOMMANDS.get(chosen_subcommand(sys.argv[1:] if argv is None else argv) or "")
    for name, command in SUBCOMMANDS.items():
        if chosen is not None and command.module == chosen.module:
            if name not in sub.choices:  # a module may register several (matrix: matrix, profiles)
                importlib.import_module(f"{__name__}.{command.module}").register(sub)
        else:
            sub.add_parser(name, help=command.help, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except OccflowError as exc:
        print(f"occflow: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `occflow matrix ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
