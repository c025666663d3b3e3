"""The ``occflow`` command. Each subcommand lives in its own module with ``register(sub)``."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from ..core.errors import OccflowError

# Modules under occflow.cli, each exposing ``register(subparsers)``; the parser they add sets
# ``func(args) -> int``.
SUBCOMMAND_MODULES = ["matrix", "conformance", "simulate", "policy", "leases", "pools", "lint", "explain"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="occflow",
        description="Conflict-aware concurrent writes on Delta Lake, Iceberg and MaxCompute tables.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
