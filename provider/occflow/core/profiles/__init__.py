"""Profiles: each table format at one isolation level, with its conflict matrix as data."""

from __future__ import annotations

from ..errors import UnknownProfileError
from . import delta, deltars, iceberg, maxcompute
from .model import Cell, Effect, OverwriteScope, Profile, RuleKind

PROFILES: dict[str, Profile] = {
    p.name: p for p in (*maxcompute.PROFILES, *delta.PROFILES, *deltars.PROFILES, *iceberg.PROFILES)
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


def profile_names() -> list[str]:
    return list(PROFILES)


__all__ = [
    "PROFILES",
    "Cell",
    "Effect",
    "OverwriteScope",
    "Profile",
    "RuleKind",
    "get_profile",
    "profile_names",
]
