"""``occflow policy PROFILE OPERATION``: the effective conflict policy a write task follows.

``PROFILE`` may also be a table format (``delta``, ``iceberg``, ``maxcompute``...): the format's
default profile (``core.declaration.format_default_profile``), or with ``--engine`` the profile
the engine's operator uses on such a table (``DeltaWriteOperator``: delta-rs's own matrix, not
Databricks'). ``occflow matrix`` resolves its name the same way (``resolve_profile``). The
engines, their operators and what they commit are the engine registry's (``core.engines``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

from ..core.declaration import format_default_profile
from ..core.engines import engine_spec, engine_specs, own_profiles, table_kind, table_kinds
from ..core.errors import InvalidDeclarationError, UnknownProfileError
from ..core.operations import Operation, parse_operation
from ..core.policy import Action, derive_policy
from ..core.profiles import PROFILES, get_profile
from ..core.tablefacts import TableFacts
from . import SUBCOMMANDS


@dataclass(frozen=True)
class Resolved:
    """The profile a name (and ``--engine``) means, and a note saying how it was chosen."""

    profile: str
    note: str | None = None


def _format_facts(name: str, engine: str) -> TableFacts:
    """A table of kind ``name`` (``core.engines.table_kinds``) written by ``engine``, with no
    property set but those the kind implies: the profile its facts give is the one the
    operator uses by default."""
    kind = table_kind(name)
    spec = engine_spec(engine)
    commits = spec.committer_for(kind.table_format)
    if commits is None:
        raise InvalidDeclarationError(
            f"--engine {engine} ({spec.operator_name}) does not write {kind.table_format} tables; "
            f"it writes {', '.join(spec.table_formats)}"
        )
    return TableFacts(f"a {name} table", kind.table_format, commits.name, properties=kind.properties)


def _format_names() -> str:
    """The table-format names that are not also profile names (for messages)."""
    return ", ".join(f for f in table_kinds() if f not in PROFILES)


def resolve_profile(name: str, engine: str | None = None, operation: Operation | None = None) -> Resolved:
    """The profile ``name`` means: a profile, or a table format's profile, the default one or
    (``engine``) the one that engine's operator uses for ``operation``."""
    if name in PROFILES:
        if engine is not None:
            _check_engine_uses(name, engine, operation)
        return Resolved(name)
    if name not in table_kinds():
        raise UnknownProfileError(
            f"unknown profile or table format {name!r}; profiles: {', '.join(PROFILES)}; table formats: {_format_names()}"
        )
    if engine is not None:
        profile = _format_facts(name, engine).profile_name(operation)
        operator = engine_spec(engine).operator_name
        return Resolved(profile, f"table format {name} written by {engine} ({operator}): profile {profile}")
    default = format_default_profile(name)
    same, others = [], []
    for other in engine_specs():
        try:
            profile = _format_facts(name, other.name).profile_name(operation)
        except InvalidDeclarationError:  # the engine does not write this format
            continue
        if profile == default:
            same.append(f"{other.operator_name}'s, --engine {other.name}")
        else:
            others.append(f"; {other.operator_name} uses {profile} (--engine {other.name})")
    used_by = f" ({'; '.join(same)})" if same else ""
    return Resolved(
        default,
        f"table format {name}: its default profile {default}{used_by}{''.join(others)}; name a profile to choose another",
    )


def _check_engine_uses(name: str, engine: str, operation: Operation | None) -> None:
    """Refuse a profile the engine's operator does not follow: another format's, or (Delta)
    a committer's own matrix (delta-rs's) on another engine, and the format's matrices on
    the committer that has its own."""
    profile = get_profile(name)
    spec = engine_spec(engine)
    if spec.committer_for(profile.table_format) is None:
        raise InvalidDeclarationError(
            f"profile {name} describes {profile.table_format} tables; --engine {engine} "
            f"({spec.operator_name}) writes {', '.join(spec.table_formats)}"
        )
    own = own_profiles()  # the matrices that are one engine's own, whatever the table's properties
    uses = _format_facts(profile.table_format, engine).profile_name(operation)
    if (name in own or uses in own) and name != uses:
        raise InvalidDeclarationError(
            f"--engine {engine} ({spec.operator_name}) does not follow profile {name}: on a "
            f"{profile.table_format} table it follows {uses}"
        )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "policy",
        help=SUBCOMMANDS["policy"].help,
        description="What a write task does when it loses a conflict, per conflict kind, as derived "
        "from the profile's matrix (and your overrides).",
    )
    p.add_argument("profile", help=f"a profile: {', '.join(PROFILES)}; or a table format ({_format_names()}) for its default "
                   "profile, or with --engine the one that engine's operator uses")
    p.add_argument("operation", help="canonical name (merge) or SQL spelling ('MERGE INTO')")
    add_engine_option(p)
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


def add_engine_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=[spec.name for spec in engine_specs()],
        help="the engine that commits: a table format then means the profile its operator uses ("
        + ", ".join(f"{spec.name}: {spec.operator_name}" for spec in engine_specs())
        + "); a profile it does not follow is refused",
    )


def _policy(args: argparse.Namespace) -> int:
    operation = parse_operation(args.operation)
    resolved = resolve_profile(args.profile, args.engine, operation)
    if resolved.note is not None:
        print(resolved.note, file=sys.stderr if args.format == "json" else sys.stdout)
    policy = derive_policy(
        resolved.profile,
        operation,
        _overrides(args.override),
        replans_from_fresh_snapshot=not args.no_replan,
    )
    if args.format == "json":
        print(json.dumps(policy.to_dict(), indent=2))
    else:
        print(policy.table())
    return 0
