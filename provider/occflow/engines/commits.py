"""A table's commits as a watcher sees them (``TableCommitSensor`` in the triggerer, which has no
engine session): one ``Commit`` type every engine's reader returns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InvalidDeclarationError


@dataclass(frozen=True)
class Commit:
    """One commit: its version (Delta), sequence number (Iceberg) or ID version (MaxCompute;
    ``None`` where the service does not report it), and what it says about itself."""

    version: int | None
    operation: str
    snapshot_id: int | None = None
    partitions: frozenset[str] = frozenset()  # "col=value/..." keys of files it added or removed
    metadata: Mapping[str, str] = field(default_factory=dict)
    time_version: float | None = None  # MaxCompute: none for compaction and clustering (spec 001)
    data_change: bool | None = None  # MaxCompute: False for compaction and clustering; None: not read
    whole_table: bool = False  # the commit wrote the whole table (it touches every partition)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operation": self.operation,
            "snapshot_id": self.snapshot_id,
            "partitions": sorted(self.partitions),
            "metadata": dict(self.metadata),
            "time_version": self.time_version,
            "data_change": self.data_change,
            "whole_table": self.whole_table,
        }


def local_table_path(location: str) -> Path:
    """A table location on this machine's filesystem (``file://`` or a path); a remote URI is an
    error: the watchers read table logs from a filesystem path."""
    path = location[len("file://") :] if location.startswith("file://") else location
    if "://" in path:
        raise InvalidDeclarationError(
            f"commit watching reads table logs from a filesystem path; {location!r} is a remote URI"
        )
    return Path(path)


def partition_key_of(values: Mapping[str, Any]) -> str:
    """``col=value/...`` of a file's partition values, columns sorted."""
    return "/".join(f"{k}={values[k]}" for k in sorted(values))


__all__ = ["Commit", "local_table_path", "partition_key_of"]
