"""What a table format is to the Spark engine: the ``TableFormat`` protocol, the ``CommitInfo`` a
format reads back after a job, and the plain Parquet/Hive format (no commit protocol at all).

Iceberg (``iceberg.py``) and Delta via delta-spark (``delta_spark.py``) implement the protocol;
``config.table_format_for`` picks one for a ``SparkConfig``.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..ledger import CommitLedger
from ..outcome import MetadataCommit, WriteOutcome

log = logging.getLogger(__name__)


class NoConflictDetectionWarning(UserWarning):
    """The table format detects no write conflicts: only admission control protects the table."""


class TableFormat(Protocol):
    """What a table format adds to a session and how it finds the commit a job made."""

    @property
    def name(self) -> str: ...

    def spark_conf(self) -> dict[str, str]: ...

    def jars(self) -> list[str]: ...

    def prepare(self) -> None: ...

    def before(self, spark: Any, table: str) -> Any: ...

    def after(self, spark: Any, table: str, before: Any) -> CommitInfo: ...

    def lost(self, spark: Any, table: str, before: Any, outcome: WriteOutcome) -> WriteOutcome:
        """A lost attempt's outcome with the commit it lost to named, where the format records it."""
        ...

    def commit_ledger(self, spark: Any, table: str) -> CommitLedger | None:
        """The table's exactly-once ledger on ``spark``; ``None`` when the format keeps no history."""
        ...


@dataclass(frozen=True)
class CommitInfo:
    """What a job committed, as far as the table format records it."""

    version: int | None = None
    snapshot_id: int | None = None
    rows: int | None = None
    tag: Mapping[str, str] = field(default_factory=dict)
    #: A commit of the metadata alone (an Iceberg schema change writes no snapshot).
    metadata: MetadataCommit | None = None


@dataclass(frozen=True)
class PlainFormat:
    """Parquet or Hive tables: Spark writes files with no commit protocol and no conflict check."""

    name: str = "parquet"

    def spark_conf(self) -> dict[str, str]:
        return {}

    def jars(self) -> list[str]:
        return []

    def prepare(self) -> None:
        return None

    def before(self, spark: Any, table: str) -> Any:
        message = (
            f"table {table} is a plain {self.name} table: the format detects no write conflicts, "
            "so concurrent writers silently overwrite or duplicate each other; only occflow's "
            "admission control protects it"
        )
        warnings.warn(message, NoConflictDetectionWarning, stacklevel=3)
        log.warning(message)
        return None

    def after(self, spark: Any, table: str, before: Any) -> CommitInfo:
        return CommitInfo(tag={"conflict_detection": "none"})

    def lost(self, spark: Any, table: str, before: Any, outcome: WriteOutcome) -> WriteOutcome:
        return outcome  # no commit protocol, so no commit to name

    def commit_ledger(self, spark: Any, table: str) -> CommitLedger | None:
        # Plain Parquet/Hive tables keep no commit history to find a tag in (docs/exactly-once.md).
        return None
