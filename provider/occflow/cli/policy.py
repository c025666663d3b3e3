"""``occflow policy PROFILE OPERATION``: the effective conflict policy a write task follows.

``PROFILE`` may also be a table format (``delta``, ``iceberg``, ``maxcompute``...): the format's
default profile, the one an operator given ``table_format=`` uses (``FORMAT_DEFAULT_PROFILE``).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..core.declaration import FORMAT_DEFAULT_PROFILE
from ..core.errors import InvalidDeclarationError, UnknownProfileError
from ..core.policy import Action, derive_policy
from ..core.profiles import PROFILES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "policy",
        help="print the conflict policy of an operation on a profile",
        description="What a write task does when it loses a conflict, per conflict kind, as derived "
        "from the profile's matrix (and your overrides).",
    )
    formats = ", ".join(f for f in FORMAT_DEFAULT_PROFILE if f not in PROFILES)
    p.add_argument("profile", help=f"a profile: {', '.join(PROFILES)}; or a table format ({formats}) for its default profile")
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


def profile_for(name: str) -> tuple[str, str | None]:
    """The profile ``name`` means, and a note when it is a table format's default profile."""
    if name in PROFILES:
        return name, None
    if name in FORMAT_DEFAULT_PROFILE:
        profile = FORMAT_DEFAULT_PROFILE[name]
        return profile, f"table format {name}: its default profile {profile} (name a profile to choose another)"
    formats = ", ".join(f for f in FORMAT_DEFAULT_PROFILE if f not in PROFILES)
    raise UnknownProfileError(
        f"unknown profile or table format {name!r}; profiles: {', '.join(PROFILES)}; table formats: {formats}"
    )


def _policy(args: argparse.Namespace) -> int:
    profile, note = profile_for(args.profile)
    if note is not None:
        print(note, file=sys.stderr if args.format == "json" else sys.stdout)
    policy = derive_policy(
        profile,
        args.operation,
        _overrides(args.override),
        replans_from_fresh_snapshot=not args.no_replan,
    )
    if args.format == "json":
        print(json.dumps(policy.to_dict(), indent=2))
    else:
        print(policy.table())
    return 0
