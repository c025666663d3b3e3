"""``occflow policy PROFILE OPERATION``: the effective conflict policy a write task follows."""

from __future__ import annotations

import argparse
import json

from ..core.errors import InvalidDeclarationError
from ..core.policy import Action, derive_policy
from ..core.profiles import PROFILES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "policy",
        help="print the conflict policy of an operation on a profile",
        description="What a write task does when it loses a conflict, per conflict kind, as derived "
        "from the profile's matrix (and your overrides).",
    )
    p.add_argument("profile", help=f"one of: {', '.join(PROFILES)}")
    p.add_argument("operation", help="canonical name (merge) or SQL spelling ('MERGE INTO')")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KIND=ACTION",
        help=f"override one kind (repeatable); actions: {', '.join(a.value for a in Action)}",
    )
    p.add_argument(
        "--no-replan",
        action="store_true",
        help="the job does not re-plan from a fresh snapshot on retry (read-modify-write jobs then "
        "reschedule instead of retrying in the task)",
    )
    p.set_defaults(func=_policy)


def _overrides(pairs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in pairs:
        kind, sep, action = pair.partition("=")
        if not sep or not kind.strip() or not action.strip():
            raise InvalidDeclarationError(f"--override {pair!r}: write KIND=ACTION, e.g. concurrent_append=reschedule")
        found[kind.strip()] = action.strip()
    return found


def _policy(args: argparse.Namespace) -> int:
    policy = derive_policy(
        args.profile,
        args.operation,
        _overrides(args.override),
        replans_from_fresh_snapshot=not args.no_replan,
    )
    if args.format == "json":
        print(json.dumps(policy.to_dict(), indent=2))
    else:
        print(policy.table())
    return 0
