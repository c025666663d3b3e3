"""Where a delta-rs table named ``db.table`` lives when the DAG gives no location of its own.

A derived location is confined to the warehouse root: the table's parts become directories
(unquoted, lower-cased, so the spellings that are one table to admission are one directory), and
the directory, with every symlink followed, must lie under the root, also followed. Writing
anywhere else takes an explicit location (``DeltaWriteOperator(path=...)``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.errors import InvalidDeclarationError
from ...core.identifiers import unquoted_parts
from ..home import embedded_home


def table_location(root: str | Path, table: str) -> str:
    """``<root>/<db>/<table>`` for ``table``; an error if it would resolve outside ``root``."""
    parts = [p.lower() for p in unquoted_parts(table)]
    for part in parts:
        if part.strip(" .") == "" or os.sep in part or (os.altsep and os.altsep in part):
            raise InvalidDeclarationError(
                f"table {table!r} cannot name a directory under the warehouse ({part!r}); "
                "rename it or pass its location explicitly (path=...)"
            )
    location = Path(root, *parts)
    real_root = os.path.realpath(root)
    real = os.path.realpath(location)
    if os.path.commonpath([real, real_root]) != real_root:
        raise InvalidDeclarationError(
            f"table {table!r} resolves to {real}, outside the warehouse root {real_root} (a symlink "
            "leads out of it); pass the location explicitly (path=...) to write there"
        )
    return str(location)


def delta_warehouse() -> Path:
    """The root every derived delta-rs location stays under: ``$OCCFLOW_HOME/delta``."""
    return embedded_home() / "delta"


def default_delta_location(table: str) -> str:
    """``$OCCFLOW_HOME/delta/<db>/<table>`` (``~/.occflow`` by default) for the embedded default;
    an error if the name would lead outside that root."""
    return table_location(delta_warehouse(), table)
