"""Every snapshot of an Iceberg table at a local path, read from its newest ``*.metadata.json``
without a Spark session (Hadoop and JDBC catalogs whose tables live on a filesystem path): what
``TableCommitSensor`` watches."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..commits import Commit, local_table_path

_METADATA_FILE = re.compile(r"^(?:v(\d+)|(\d+)-[0-9a-f-]+)\.metadata\.json$")


def iceberg_table_commits(location: str) -> list[Commit]:
    """The table's snapshots, by sequence number (none before its first metadata file)."""
    folder = local_table_path(location) / "metadata"
    if not folder.is_dir():
        return []
    newest: tuple[int, Path] | None = None
    for entry in folder.iterdir():
        match = _METADATA_FILE.match(entry.name)
        if match:
            number = int(match.group(1) or match.group(2))
            if newest is None or number > newest[0]:
                newest = (number, entry)
    if newest is None:
        return []
    meta = json.loads(newest[1].read_text())
    commits = []
    for snap in meta.get("snapshots", []):
        summary = {str(k): str(v) for k, v in (snap.get("summary") or {}).items()}
        parts = frozenset(p for p in summary.get("occflow.partitions", "").split(",") if p)
        commits.append(
            Commit(
                version=int(snap.get("sequence-number", 0)),
                operation=summary.get("operation", ""),
                snapshot_id=int(snap["snapshot-id"]),
                partitions=parts,
                metadata={k: v for k, v in summary.items() if k.startswith("occflow.")},
            )
        )
    return sorted(commits, key=lambda c: c.version or 0)


__all__ = ["iceberg_table_commits"]
