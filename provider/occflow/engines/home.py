"""Where the embedded default keeps its tables and catalogs: ``$OCCFLOW_HOME`` or ``~/.occflow``.

Read by the hooks (Spark's warehouse, the Iceberg catalog) and by delta-rs's derived locations
(``engines.deltars.location``); pure, so the CLI can locate a table without importing Airflow."""

from __future__ import annotations

import os
from pathlib import Path


def embedded_home() -> Path:
    """Where the embedded default keeps warehouse and catalog: ``$OCCFLOW_HOME`` or ``~/.occflow``."""
    return Path(os.environ.get("OCCFLOW_HOME") or Path.home() / ".occflow").expanduser()


__all__ = ["embedded_home"]
