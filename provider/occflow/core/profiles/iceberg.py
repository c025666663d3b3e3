"""Apache Iceberg profiles (filled in by the Iceberg matrix work)."""

from .model import Profile

PROFILES: tuple[Profile, ...] = ()
