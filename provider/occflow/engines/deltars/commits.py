"""Every commit of a Delta table at a local path, read from its ``_delta_log`` by number with the
one log parser (``log.parse_commit``): what ``TableCommitSensor`` watches."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ..commits import Commit, local_table_path, partition_key_of
from .log import parse_commit

_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def delta_table_commits(location: str) -> list[Commit]:
    """The table's commits, oldest first (none when it has no log yet)."""
    log = local_table_path(location) / "_delta_log"
    if not log.is_dir():
        return []
    commits = []
    for entry in sorted(log.iterdir()):
        match = _COMMIT_FILE.match(entry.name)
        if not match:
            continue
        logged = parse_commit(int(match.group(1)), entry.read_text())
        parts = {partition_key_of(f.partition) for f in (*logged.added, *logged.removed) if f.partition}
        metadata = _occflow_tag(logged.info)
        commits.append(Commit(logged.version, logged.operation, None, frozenset(parts), metadata))
    return commits


def _occflow_tag(info: Mapping[str, Any]) -> dict[str, str]:
    """occflow's tag in a commit's ``commitInfo``: top-level ``occflow.*`` keys where delta-rs
    wrote it (commit properties), else the JSON object in ``userMetadata`` where delta-spark
    carries it (``spark.databricks.delta.commitInfo.userMetadata``). One Delta log, whichever
    engine committed: a sensor waits for a tag whoever wrote the commit."""
    tag = {k: str(v) for k, v in info.items() if k.startswith("occflow.")}
    if tag:
        return tag
    user = info.get("userMetadata")
    if not isinstance(user, str):
        return {}
    try:
        data = json.loads(user)
    except ValueError:  # a user's own free text, not occflow's tag
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: str(v) for k, v in data.items() if isinstance(k, str) and k.startswith("occflow.")}


__all__ = ["delta_table_commits"]
