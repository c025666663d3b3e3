"""A table's commits, read without an engine session (the triggerer has no JVM), by the
engines' own readers: Delta's log (``engines.deltars.commits``), Iceberg's newest metadata file
(``engines.spark.iceberg_commits``).
MaxCompute: ``engines.maxcompute.maxcompute_commits`` through ``OccflowMaxComputeHook`` (the
stand-in's MetaService history with ID and time versions; on a real project the successful
instances carrying occflow's tag, without versions). Its "location" is the hook's settings and
the table, as JSON (``maxcompute_location``), so the trigger stays serializable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import InvalidDeclarationError
from ..engines.commits import Commit
from ..engines.deltars.commits import delta_table_commits
from ..engines.maxcompute import maxcompute_commits
from ..engines.spark.iceberg_commits import iceberg_table_commits
from ..engines.tags import PREFIX as TAG_PREFIX
from ..hooks.maxcompute import DEFAULT_CONN_ID, OccflowMaxComputeHook

FORMATS = ("delta", "iceberg", "maxcompute")


_MAXCOMPUTE_KEYS = ("table", "maxcompute_conn_id", "project", "endpoint", "standin", "standin_fallback")


def maxcompute_location(
    table: str,
    maxcompute_conn_id: str = DEFAULT_CONN_ID,
    project: str | None = None,
    endpoint: str | None = None,
    standin: str | None = None,
    standin_fallback: str | None = None,
) -> str:
    """Where a MaxCompute table's commits are read from: the hook's settings and the table."""
    values = (table, maxcompute_conn_id, project, endpoint, standin, standin_fallback)
    return json.dumps(dict(zip(_MAXCOMPUTE_KEYS, values, strict=True)), sort_keys=True)


def maxcompute_table_commits(location: str) -> list[Commit]:
    """The commits of the table ``location`` (``maxcompute_location``) names, oldest first."""
    try:
        settings = json.loads(location)
    except ValueError:
        settings = None
    if not isinstance(settings, dict) or not isinstance(settings.get("table"), str):
        raise InvalidDeclarationError(
            f"a MaxCompute commit location is maxcompute_location(table, ...)'s JSON, got {location!r}"
        )
    unknown = set(settings) - set(_MAXCOMPUTE_KEYS)
    if unknown:
        raise InvalidDeclarationError(f"MaxCompute commit location {location!r}: unknown keys {sorted(unknown)}")
    table = settings.pop("table")
    client = OccflowMaxComputeHook(settings.pop("maxcompute_conn_id", None) or DEFAULT_CONN_ID, **settings).get_client()
    return [
        Commit(
            version=c["id_version"],
            operation=str(c["operation"]),
            partitions=frozenset(c["partitions"] or ()),
            metadata={"maxcompute.instance_id": str(c["instance_id"])},
            time_version=c["time_version"],
            data_change=bool(c["data_change"]),
            whole_table=c["partitions"] is None,
        )
        for c in maxcompute_commits(client, table)
    ]


def read_commits(table_format: str, location: str) -> list[Commit]:
    if table_format == "delta":
        return delta_table_commits(location)
    if table_format == "iceberg":
        return iceberg_table_commits(location)
    if table_format == "maxcompute":
        return maxcompute_table_commits(location)
    raise InvalidDeclarationError(f"cannot watch commits of table_format {table_format!r}; known: {FORMATS}")


@dataclass(frozen=True)
class CommitCondition:
    """Which commit a sensor waits for; every field given must hold. ``min_version`` is the ID
    version on MaxCompute; ``min_time_version`` (MaxCompute) is never met by a compaction, which
    has no time version; ``data_changes_only`` skips commits that only reorganise files."""

    min_version: int | None = None
    snapshot_id: int | None = None
    partition: str | None = None  # a partition key; a commit matches when it touched it
    metadata: Mapping[str, str] = field(default_factory=dict)
    min_time_version: float | None = None
    data_changes_only: bool = False

    def __post_init__(self) -> None:
        for name in ("min_version", "min_time_version"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
                raise InvalidDeclarationError(f"{name} must be a version >= 0, got {value!r}")

    def matches(self, commit: Commit) -> bool:
        if self.min_version is not None and (commit.version is None or commit.version < self.min_version):
            return False
        if self.min_time_version is not None and (
            commit.time_version is None or commit.time_version < self.min_time_version
        ):
            return False
        if self.data_changes_only and commit.data_change is not True:
            return False
        if self.snapshot_id is not None and commit.snapshot_id != self.snapshot_id:
            return False
        if self.partition is not None and not commit.whole_table and not _touches(commit.partitions, self.partition):
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
            "min_time_version": self.min_time_version,
            "data_changes_only": self.data_changes_only,
        }


def _touches(keys: frozenset[str], wanted: str) -> bool:
    want = dict(p.split("=", 1) for p in wanted.split("/"))
    for key in keys:
        have = dict(p.split("=", 1) for p in key.split("/"))
        if all(have[c] == want[c] for c in have.keys() & want.keys()):
            return True
    return False


#: The formats whose log names every commit, occflow's or not, with its tag when it is occflow's:
#: a watcher can tell an outside commit there. MaxCompute is not one: on a real project occflow
#: reads only the instances carrying its own tag, so an outside commit is never seen.
OUTSIDE_WATCHABLE = ("delta", "iceberg")


def made_by_occflow(commit: Commit) -> bool:
    """Whether occflow made ``commit``: every commit occflow makes (a write, a fence, a schema
    change) carries ``occflow.*`` keys in its commit info or snapshot summary (``engines.tags``)."""
    return any(key.startswith(TAG_PREFIX) for key in commit.metadata)


def commits_after(commits: list[Commit], watermark: int) -> list[Commit]:
    """The commits past ``watermark`` (the last version a watcher has seen), oldest first."""
    return sorted((c for c in commits if c.version is not None and c.version > watermark),
                  key=lambda c: c.version or 0)


def latest_version(commits: list[Commit]) -> int:
    """The newest version in ``commits``; -1 for a table with none yet (its first commit is new)."""
    return max((c.version for c in commits if c.version is not None), default=-1)
