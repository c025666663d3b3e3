"""``occflow pools plan|sync DAG_FOLDER``: plain Airflow pools that give admission's protection."""

from __future__ import annotations

import argparse
import json

from ..lint.planning import PlannedPool, plan_pools
from . import SUBCOMMANDS
from .lint import scan_for


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pools", help=SUBCOMMANDS["pools"].help)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, text in (("plan", "print the pools and each task's pool_slots"),
                       ("sync", "create or update the planned pools in Airflow (AIRFLOW_HOME's database)")):
        v = verbs.add_parser(verb, help=text)
        v.add_argument("dag_folder", metavar="DAG_FOLDER")
        v.add_argument("--window", type=float, default=60.0, metavar="MINUTES",
                       help="runs of two DAGs starting this close may overlap (default 60)")
        v.add_argument("--format", choices=["text", "json"], default="text")
        v.set_defaults(func=_plan if verb == "plan" else _sync)


def _planned(args: argparse.Namespace) -> tuple[list[PlannedPool] | None, int]:
    """The pools (None when no DAG could be read) and the exit code: 2 when a DAG file failed
    to import, since the plan then misses its tasks."""
    scanned = scan_for("pools", args.dag_folder)
    if scanned is None:
        return None, 2
    return plan_pools(scanned.tasks, window=args.window * 60), 2 if scanned.import_errors else 0


def _show(pools: list[PlannedPool], fmt: str) -> None:
    if fmt == "json":
        print(json.dumps([p.to_dict() for p in pools], indent=2))
        return
    for p in pools:
        print(f"pool {p.name}: {p.slots} slot(s) — {p.description}")
        for task, slots in p.task_slots:
            # In a one-slot pool every task (and every instance of a mapped one) runs alone.
            role = "one at a time" if p.slots == 1 else "runs alone" if slots == p.slots else "shares"
            print(f"    {task}: pool={p.name!r}, pool_slots={slots}" + (f"  ({role})" if role else ""))
        for first, second in p.corrupting:
            pair = first if first == second else f"{first} and {second}"
            print(f"    corrupts data if run together, never share slots: {pair}")
        for w in p.warnings:
            print(f"    warning: {w}")
    print(f"{len(pools)} pool(s)")


def _plan(args: argparse.Namespace) -> int:
    pools, code = _planned(args)
    if pools is not None:
        _show(pools, args.format)
    return code


def _sync(args: argparse.Namespace) -> int:
    pools, code = _planned(args)
    if pools is None or code:
        return code  # never sync a plan made from part of the DAG folder
    # Only `sync` needs Airflow's ORM: importing it reads AIRFLOW_HOME's configuration.
    from airflow.models.pool import Pool

    for p in pools:
        existing = Pool.get_pool(p.name)
        # include_deferred=False: a task deferred while waiting for admission holds no slot.
        Pool.create_or_update_pool(p.name, p.slots, p.description, include_deferred=False)
        state = "created" if existing is None else f"updated (was {existing.slots} slot(s))"
        print(f"pool {p.name}: {p.slots} slot(s) {state}")
    if args.format == "json":
        _show(pools, args.format)
    return 0
