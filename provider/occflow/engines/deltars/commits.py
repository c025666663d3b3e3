"""Every commit of a Delta table at a local path, read from its ``_delta_log`` by number with the
one log parser (``log.parse_commit``): what ``TableCommitSensor`` watches."""

from __future__ import annotations

import re

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
        metadata = {k: str(v) for k, v in logged.info.items() if k.startswith("occflow.")}
        commits.append(Commit(logged.version, logged.operation, None, frozenset(parts), metadata))
    return commits


__all__ = ["delta_table_commits"]
