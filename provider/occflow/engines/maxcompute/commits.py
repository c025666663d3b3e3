"""A MaxCompute table's commits, for whatever waits on one (``TableCommitSensor``): the ID
version, the time version (none for compaction and clustering: spec 001), the operation, the
partitions, and whether the commit changed data.

The stand-in reports its MetaService history. PyODPS reports no versions for a real project, so
there the commits are the successful instances carrying occflow's tag, in the order they ended,
with the operation and partitions their tag names and no versions.
"""

from __future__ import annotations

import json
from typing import Any

from ...core.operations import parse_operation
from ..tags import KEYS
from .jobs import ProjectJobs
from .ledger import SETTING_PREFIX


def maxcompute_commits(client: Any, table: str) -> list[dict[str, Any]]:
    """The table's commits, oldest first (see the module docstring)."""
    history = getattr(client, "history", None)
    if callable(history):  # the stand-in: its MetaService's history
        settle = getattr(client, "settle_due", None)
        if callable(settle):  # jobs whose time is up commit when someone looks (as the service would)
            settle()
        return [
            {
                "id_version": c.version,
                "time_version": c.time_version,
                "operation": c.operation.value,
                "partitions": None if c.footprint.write_partitions is None else sorted(c.footprint.write_partitions),
                "data_change": c.footprint.data_change,
                "instance_id": c.txn_id,
            }
            for c in history(table)
        ]
    found = []
    for job in ProjectJobs(client).tagged(table, "Terminated"):
        if not job.successful:
            continue
        operation = parse_operation(job.settings.get(SETTING_PREFIX + KEYS["operation"], "insert_into"))
        parts = job.settings.get(SETTING_PREFIX + KEYS["partitions"])
        found.append({
            "id_version": None,
            "time_version": None,
            "operation": operation.value,
            "partitions": None if parts is None else json.loads(parts),
            "data_change": operation.changes_data,
            "instance_id": job.id,
        })
    return sorted(found, key=lambda c: str(c["instance_id"]))
