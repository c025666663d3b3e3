"""The project's SQL instances as occflow's ledger reads them: which carry a write's commit tag.

MaxCompute keeps no per-commit properties on a table, so occflow's tag travels in each
instance's settings (hints, ``ledger.maxcompute_hints``) and a write's history is the project's
instances whose SQL writes the table and whose settings carry the tag. ``ProjectJobs`` reads
them through PyODPS's client (``list_instances``; each instance's ``tasks`` hold the SQL and its
settings), so it serves ``MaxComputeLedger`` (did the write land?) and the reconnection to a
still-running instance of the write (no second submission).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.identifiers import unquoted_parts
from ..tags import FENCE, WRITE_ID
from .ledger import SETTING_PREFIX
from .sql import read_maxcompute_write

#: The setting that carries the write id in an instance's settings.
WRITE_ID_SETTING = SETTING_PREFIX + WRITE_ID


@dataclass(frozen=True)
class TaggedInstance:
    id: str
    running: bool
    successful: bool
    settings: Mapping[str, str]
    end_time: str | None
    instance: Any

    @property
    def write_id(self) -> str | None:
        return self.settings.get(WRITE_ID_SETTING)

    def as_job(self) -> dict[str, Any]:
        return {"id": self.id, "settings": dict(self.settings), "end_time": self.end_time}


@dataclass(frozen=True)
class ProjectJobs:
    """The instances of the client's project that wrote ``table`` and carry an occflow tag
    (``MaxComputeJobs`` for the ledger). ``lookback_hours``: how far back instances are read."""

    client: Any
    lookback_hours: float = 72.0

    def tagged(self, table: str, status: str | None = None) -> list[TaggedInstance]:
        since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=self.lookback_hours)
        found = []
        for instance in self.client.list_instances(status=status, start_time=since):
            settings, sql = _task_settings(instance)
            if WRITE_ID_SETTING not in settings or not _writes(sql, table):
                continue
            running = not instance.is_terminated()
            successful = not running and bool(instance.is_successful())
            end = getattr(instance, "end_time", None)
            found.append(TaggedInstance(str(instance.id), running, successful, settings,
                                        None if end is None else str(end), instance))
        return found

    def successful_jobs(self, table: str) -> list[Mapping[str, Any]]:
        return [t.as_job() for t in self.tagged(table, "Terminated") if t.successful]

    def of_write(self, table: str, write_id: str) -> list[TaggedInstance]:
        """Every instance of one logical write, oldest first."""
        return [t for t in self.tagged(table) if t.write_id == write_id]


#: The setting that carries the fencing token of the lease a job was submitted under.
FENCE_SETTING = SETTING_PREFIX + FENCE


def stop_fenced_jobs(client: Any, table: str, fences: Iterable[int], *, timeout: float = 600.0,
                     poll: float = 0.5) -> list[str]:
    """Stop the running instances writing ``table`` that were submitted under one of ``fences``
    (leases that lapsed: their clients may be stalled, their jobs still run on the service),
    and wait until each has ended; the ids stopped. An instance ends committed (it finished
    first) or cancelled: never after this returns."""
    wanted = {str(f) for f in fences}
    stopped = []
    for instance in client.list_instances(status="Running"):
        settings, sql = _task_settings(instance)
        if settings.get(FENCE_SETTING) in wanted and _writes(sql, table) and not instance.is_terminated():
            instance.stop()
            stopped.append(instance)
    deadline = time.monotonic() + timeout
    for instance in stopped:
        while not instance.is_terminated():
            if time.monotonic() >= deadline:
                raise TimeoutError(f"instance {instance.id} of a lapsed lease on {table} did not end "
                                   f"within {timeout:.0f}s of being stopped")
            time.sleep(poll)
    return [str(i.id) for i in stopped]


def _task_settings(instance: Any) -> tuple[dict[str, str], str]:
    """The SQL task's settings and query (PyODPS keeps the settings as JSON in its properties)."""
    for task in getattr(instance, "tasks", None) or ():
        query = getattr(task, "query", None)
        if not query:
            continue
        raw = (getattr(task, "properties", None) or {}).get("settings") or "{}"
        try:
            settings = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except ValueError:
            settings = {}
        return {str(k): str(v) for k, v in settings.items()}, str(query)
    return {}, ""


def _writes(sql: str, table: str) -> bool:
    """Whether ``sql`` writes ``table`` (a name without the project matches it in any project)."""
    try:
        written = [p.lower() for p in unquoted_parts(read_maxcompute_write(sql, None).table)]
    except InvalidDeclarationError:
        return False
    wanted = [p.lower() for p in unquoted_parts(table)]
    shorter, longer = sorted((written, wanted), key=len)
    return longer[len(longer) - len(shorter):] == shorter
