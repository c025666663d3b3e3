"""pyiceberg: Iceberg tables written from Python (no JVM) through a catalog (SQL on SQLite or
PostgreSQL, REST), with occflow's commit tags in snapshot summaries, the snapshot log as the
exactly-once ledger, the observed footprint from manifests, and a conformance runner.
``pyiceberg`` / ``pyarrow`` are imported where a table is used, so importing this package costs
nothing where they are not installed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # the names below load on first use (``__getattr__``)
    from .catalog import CatalogConfig
    from .commit import COMMIT_ID_KEY, CommitOptions, ambient_tag
    from .conformance import PyIcebergPairRunner, conformance_meta, conformance_runners
    from .facts import pyiceberg_table_facts
    from .ledger import PyIcebergLedger
    from .table import ENGINE, PyIcebergTable
    from .target import PyIcebergTarget, PyIcebergWrite

#: Each public name and the module that defines it, loaded on first use.
_LAZY = {
    "COMMIT_ID_KEY": ".commit",
    "CatalogConfig": ".catalog",
    "CommitOptions": ".commit",
    "ENGINE": ".table",
    "PyIcebergLedger": ".ledger",
    "PyIcebergPairRunner": ".conformance",
    "PyIcebergTable": ".table",
    "PyIcebergTarget": ".target",
    "PyIcebergWrite": ".target",
    "ambient_tag": ".commit",
    "conformance_meta": ".conformance",
    "conformance_runners": ".conformance",
    "pyiceberg_table_facts": ".facts",
}

__getattr__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "COMMIT_ID_KEY",
    "ENGINE",
    "CatalogConfig",
    "CommitOptions",
    "PyIcebergLedger",
    "PyIcebergPairRunner",
    "PyIcebergTable",
    "PyIcebergTarget",
    "PyIcebergWrite",
    "ambient_tag",
    "conformance_meta",
    "conformance_runners",
    "pyiceberg_table_facts",
]
