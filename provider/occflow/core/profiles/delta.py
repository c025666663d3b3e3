"""Delta Lake profiles (filled in by the Delta matrix work)."""

from .model import Profile

PROFILES: tuple[Profile, ...] = ()
