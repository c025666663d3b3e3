"""Profiles: each table format at one isolation level, with its conflict matrix as data."""

from __future__ import annotations

from ..errors import UnknownProfileError
from ..operations import Operation
from . import delta, delta_rlc, deltars, iceberg, maxcompute, pyiceberg
from .model import Cell, Condition, Effect, OverwriteScope, Profile, RuleKind

PROFILES: dict[str, Profile] = {
    p.name: p for p in (
        *maxcompute.PROFILES,
        *delta.PROFILES,
        *delta_rlc.PROFILES,
        *deltars.PROFILES,
        *iceberg.PROFILES,
        *pyiceberg.PROFILES,
    )
}


def get_profile(name: str | Profile) -> Profile:
    """The profile called ``name``; an unknown name is an error listing the known ones."""
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except (KeyError, TypeError):
        raise UnknownProfileError(
            f"unknown profile {name!r}; known profiles: {', '.join(PROFILES)}"
        ) from None


def operations_conflict(
    profile_a: Profile, op_a: Operation, profile_b: Profile, op_b: Operation
) -> bool:
    """Whether two writes on one footprint can make either fail.

    One table should have one profile; if two declarations disagree, either matrix saying
    "conflict" (or not knowing the other's operation) is enough to keep them apart.
    """
    for profile in {profile_a, profile_b}:
        if op_a not in profile.operations or op_b not in profile.operations:
            return True
        if profile.conflicts(op_a, op_b):
            return True
    return False


def footprint_reach(
    profile: Profile, operation: Operation, partitions: frozenset[str] | None
) -> frozenset[str] | None:
    """The partitions a write's commit is validated against: its own, or the whole table
    (``None``) for an operation whose commit reads every file on this engine
    (``Profile.reads_whole_table``: a delta-rs append or OPTIMIZE fails against a removal in
    any partition), and for a schema, property or protocol change, whatever partitions it was
    declared with: the table's metadata is one for all its partitions (a Delta write of
    partition a fails with a metadata or protocol change committed while it ran, as the
    simulator and its exact scheduler also assume: ``Operation.changes_table_metadata``).
    Maintenance that deletes unreferenced files (VACUUM, expire_snapshots) is in its profiles'
    ``reads_whole_table`` (``Profile`` checks it), so the store and the simulator read it there too."""
    if operation.changes_table_metadata or operation in profile.reads_whole_table:
        return None
    return partitions


def profile_names() -> list[str]:
    return list(PROFILES)


__all__ = [
    "footprint_reach",
    "PROFILES",
    "Cell",
    "Condition",
    "Effect",
    "OverwriteScope",
    "Profile",
    "RuleKind",
    "get_profile",
    "operations_conflict",
    "profile_names",
]
