"""A table's commit log, read without an engine session (the triggerer has no JVM).

Delta: the JSON actions in ``_delta_log/`` (commit info, ``add`` actions with partition values).
Iceberg: the newest ``*.metadata.json`` under the table's ``metadata/`` folder (snapshots with
their summaries); this works for Hadoop and JDBC catalogs whose tables live on a filesystem
path occflow can read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InvalidDeclarationError

FORMATS = ("delta", "iceberg")
_DELTA_COMMIT = re.compile(r"^(\d{20})\.json$")
_ICEBERG_METADATA = re.compile(r"^(?:v(\d+)|(\d+)-[0-9a-f-]+)\.metadata\.json$")


@dataclass(frozen=True)
class Commit:
    """One commit: its version (Delta) or sequence number (Iceberg), and what it says about itself."""

    version: int
    operation: str
    snapshot_id: int | None = None
    partitions: frozenset[str] = frozenset()  # "col=value/..." keys of files it added or removed
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "operation": self.operation,
            "snapshot_id": self.snapshot_id,
            "partitions": sorted(self.partitions),
            "metadata": dict(self.metadata),
        }


def _local(location: str) -> Path:
    path = location[len("file://"):] if location.startswith("file://") else location
    if "://" in path:
        raise InvalidDeclarationError(
            f"commit watching reads table logs from a filesystem path; {location!r} is a remote URI"
        )
    return Path(path)


def _partition_key(values: Mapping[str, Any]) -> str:
    return "/".join(f"{k}={values[k]}" for k in sorted(values))


def delta_commits(location: str) -> list[Commit]:
    log = _local(location) / "_delta_log"
    if not log.is_dir():
        return []
    commits = []
    for entry in sorted(log.iterdir()):
        match = _DELTA_COMMIT.match(entry.name)
        if not match:
            continue
        operation, metadata, parts = "", {}, set()
        for line in entry.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
                operation = str(info.get("operation", ""))
                metadata = {k: str(v) for k, v in info.items() if k.startswith("occflow.")}
            for kind in ("add", "remove"):
                if kind in action and action[kind].get("partitionValues"):
                    parts.add(_partition_key(action[kind]["partitionValues"]))
        commits.append(Commit(int(match.group(1)), operation, None, frozenset(parts), metadata))
    return commits


def iceberg_commits(location: str) -> list[Commit]:
    folder = _local(location) / "metadata"
    if not folder.is_dir():
        return []
    newest: tuple[int, Path] | None = None
    for entry in folder.iterdir():
        match = _ICEBERG_METADATA.match(entry.name)
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
    return sorted(commits, key=lambda c: c.version)


def read_commits(table_format: str, location: str) -> list[Commit]:
    if table_format == "delta":
        return delta_commits(location)
    if table_format == "iceberg":
        return iceberg_commits(location)
    raise InvalidDeclarationError(f"cannot watch commits of table_format {table_format!r}; known: {FORMATS}")


@dataclass(frozen=True)
class CommitCondition:
    """Which commit a sensor waits for; every field given must hold."""

    min_version: int | None = None
    snapshot_id: int | None = None
    partition: str | None = None  # a partition key; a commit matches when it touched it
    metadata: Mapping[str, str] = field(default_factory=dict)

    def matches(self, commit: Commit) -> bool:
        if self.min_version is not None and commit.version < self.min_version:
            return False
        if self.snapshot_id is not None and commit.snapshot_id != self.snapshot_id:
            return False
        if self.partition is not None and not _touches(commit.partitions, self.partition):
            return False
        return all(commit.metadata.get(k) == v for k, v in self.metadata.items())

    def first_match(self, commits: list[Commit]) -> Commit | None:
        return next((c for c in commits if self.matches(c)), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_version": self.min_version,
            "snapshot_id": self.snapshot_id,
            "partition": self.partition,
            "metadata": dict(self.metadata),
        }


def _touches(keys: frozenset[str], wanted: str) -> bool:
    want = dict(p.split("=", 1) for p in wanted.split("/"))
    for key in keys:
        have = dict(p.split("=", 1) for p in key.split("/"))
        if all(have[c] == want[c] for c in have.keys() & want.keys()):
            return True
    return False
