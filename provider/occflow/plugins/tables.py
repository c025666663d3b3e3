"""One table under the names the view meets it by: the lease store files a delta-rs table under
its location, a report names it, a user filters by a name (``db.t``) or a location."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from ..core.errors import OccflowError
from ..core.identifiers import canonical_location, canonical_table
from ..hooks.spark import default_delta_location


def is_location(text: str) -> bool:
    return "://" in text or text.startswith("/")


def table_key(text: str) -> str:
    """A table as the lease store files it: a location (delta-rs) or a canonical name."""
    return canonical_location(text) if is_location(text) else canonical_table(text)


@lru_cache(maxsize=4096)
def identities(table: str) -> frozenset[str]:
    """Every key the store may file ``table`` under: a location is itself; a name is its canonical
    name and the location a ``DeltaWriteOperator`` without ``path`` writes it at."""
    if is_location(table):
        return frozenset({canonical_location(table)})
    keys = {canonical_table(table)}
    # A name no default location exists for (outside the warehouse) is its name only; the
    # operator resolves symlinks in its path, so does this.
    with contextlib.suppress(OccflowError, OSError):
        keys.add(canonical_location(str(Path(default_delta_location(table)).resolve())))
    return frozenset(keys)


def same_table(a: str, b: str) -> bool:
    """One table in two spellings: a location and a name that leads there, or two names (a
    report's declared name may lack the catalog the store's key carries). A text that is no
    table's name (a malformed or hostile report's) is only itself."""
    try:
        return _same_table(a, b)
    except (OccflowError, ValueError):
        return a == b


def _same_table(a: str, b: str) -> bool:
    if identities(a) & identities(b):
        return True
    if is_location(a) or is_location(b):
        return False
    a, b = canonical_table(a), canonical_table(b)
    return a.endswith("." + b) or b.endswith("." + a)


def table_name(key: str, names: Mapping[str, str] | None = None) -> str:
    """What to call the table the store files under ``key``: the name a report gave it, the name
    its default location stands for (``<warehouse>/<db>/<table>``), else the key itself."""
    if names and key in names:
        return names[key]
    if is_location(key):
        try:
            root = canonical_location(str(Path(default_delta_location("d.t")).resolve().parent.parent))
        except (OccflowError, OSError):
            return key
        parts = key[len(root) + 1:].split("/") if key.startswith(root + "/") else []
        if len(parts) == 2 and all(parts):
            return ".".join(parts)
    return key


__all__ = ["identities", "is_location", "same_table", "table_key", "table_name"]
