"""A connection's JSON extras, read without trusting their shape: nested deeper than any real
setting (a hostile or broken extra), they are refused with the connection's name instead of
Python's ``RecursionError`` deep inside the JSON parser."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..core.errors import InvalidDeclarationError

#: No occflow setting nests deeper than a handful of levels (``catalog`` inside ``conf``...).
MAX_DEPTH = 32


def nesting_depth(text: str) -> int:
    """How deeply ``[`` / ``{`` nest in JSON ``text``, strings skipped (no recursion: a scan)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def loads(text: str, what: str) -> Any:
    """``json.loads(text)``, or an error naming ``what`` when it is not JSON or nests too deeply."""
    if nesting_depth(text) > MAX_DEPTH:
        raise InvalidDeclarationError(f"{what} nests deeper than {MAX_DEPTH} levels: not an occflow setting")
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise InvalidDeclarationError(f"{what} is not JSON: {exc}") from None


def connection_extras(conn: Any, conn_id: str) -> Mapping[str, Any]:
    """The extras of Airflow connection ``conn`` as a mapping; an error naming the connection
    when they are not a JSON object or nest too deeply."""
    raw = getattr(conn, "extra", None)
    if not raw:
        return {}
    found = loads(str(raw), f"the extras of connection {conn_id!r}")
    if not isinstance(found, Mapping):
        raise InvalidDeclarationError(
            f"the extras of connection {conn_id!r} must be a JSON object, got {raw[:80]!r}"
        )
    return found


__all__ = ["MAX_DEPTH", "connection_extras", "loads", "nesting_depth"]
