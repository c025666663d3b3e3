"""The table triggers, both over one reader of the table's log (``commits.read_commits``, which
``TableCommitSensor`` reads too):

- ``TableCommitTrigger``: fires once a commit matching a condition is in a table's log (a
  deferred ``TableCommitSensor``);
- ``OutsideCommitTrigger``: an event trigger for ``AssetWatcher``: one asset event per commit
  occflow did not make (a streaming job, another platform), its watermark in Airflow's asset
  state store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from ..core.errors import InvalidDeclarationError
from ..engines.commits import Commit
from .commits import (
    OUTSIDE_WATCHABLE,
    CommitCondition,
    commits_after,
    latest_version,
    made_by_occflow,
    read_commits,
)

#: The asset state store key of an ``OutsideCommitTrigger``'s watermark.
WATERMARK_KEY = "occflow.outside_commits.watermark"


class TableCommitTrigger(BaseTrigger):
    def __init__(
        self,
        table_format: str,
        location: str,
        condition: Mapping[str, Any],
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger.__init__ is not annotated
        self.table_format = table_format
        self.location = location
        self.condition = dict(condition)
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_format": self.table_format,
                "location": self.location,
                "condition": self.condition,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        condition = CommitCondition(**self.condition)
        while True:
            # The log is read from files: off the event loop, so other triggers keep running.
            commits = await asyncio.to_thread(read_commits, self.table_format, self.location)
            found = condition.first_match(commits)
            if found is not None:
                yield TriggerEvent({"status": "committed", "commit": found.to_dict(), "location": self.location})
                return
            await asyncio.sleep(self.poll_interval)


class OutsideCommitTrigger(BaseEventTrigger):
    """One event per commit to a Delta or Iceberg table that occflow did not make.

    Use it in an ``AssetWatcher`` on the table's asset (docs/assets.md)::

        Asset(uri="file:///lake/events", name="file:///lake/events",
              watchers=[AssetWatcher(name="outside_writes", trigger=OutsideCommitTrigger("delta", "/lake/events"))])

    The event's payload (``extra["payload"]`` of the asset event) is the commit: ``version``,
    ``snapshot_id`` (Iceberg), ``operation``, ``partitions``, and the ``table_format`` and
    ``location`` it was read from. A commit occflow made (its ``occflow.*`` tag in Delta's
    ``commitInfo`` / ``userMetadata`` or Iceberg's snapshot summary) is skipped: its write
    operator emits its own event.

    The watermark (the last version looked at) is kept in Airflow's asset state store under
    ``occflow.outside_commits.watermark``, with the location it is for, so a restarted triggerer
    goes on from there; it is advanced after the commit's event is handed to the triggerer, so a
    triggerer killed in between emits that one event again (at least once, never lost). Without a
    stored watermark the watcher starts at ``start_version`` (default: the table's newest version
    when it first looks, so its history is not replayed).

    :param table_format: ``delta`` or ``iceberg`` (MaxCompute: occflow reads only its own tagged
        instances there, so an outside commit is never seen).
    :param location: the table's path (``file://`` or a local path).
    :param start_version: the first version to emit when no watermark is stored.
    :param poll_interval: seconds between two reads of the log.
    """

    def __init__(
        self,
        table_format: str,
        location: str,
        start_version: int | None = None,
        poll_interval: float = 5.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseEventTrigger.__init__ is not annotated
        if table_format not in OUTSIDE_WATCHABLE:
            raise InvalidDeclarationError(
                f"OutsideCommitTrigger watches {OUTSIDE_WATCHABLE} tables, got table_format={table_format!r} "
                "(on MaxCompute occflow reads only the instances it tagged, so an outside commit is never seen)"
            )
        if not isinstance(location, str) or not location:
            raise InvalidDeclarationError(f"OutsideCommitTrigger needs the table's location (a path), got {location!r}")
        if start_version is not None and (
            isinstance(start_version, bool) or not isinstance(start_version, int) or start_version < 0
        ):
            raise InvalidDeclarationError(f"start_version must be a version >= 0, got {start_version!r}")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) or not poll_interval > 0:
            raise InvalidDeclarationError(f"poll_interval must be a number of seconds > 0, got {poll_interval!r}")
        self.table_format = table_format
        self.location = location
        self.start_version = start_version
        self.poll_interval = float(poll_interval)
        self._watermark: int | None = None  # where this instance is, stored or not

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_format": self.table_format,
                "location": self.location,
                "start_version": self.start_version,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        seen = await self._stored_watermark()
        while True:
            # The log is read from files: off the event loop, so other triggers keep running.
            commits = await asyncio.to_thread(read_commits, self.table_format, self.location)
            if seen is None:
                seen = latest_version(commits) if self.start_version is None else self.start_version - 1
                await self._store_watermark(seen)
            for commit in commits_after(commits, seen):
                if not made_by_occflow(commit):
                    yield TriggerEvent(self.payload(commit))
                seen = int(commit.version or 0)
                await self._store_watermark(seen)
            await asyncio.sleep(self.poll_interval)

    def payload(self, commit: Commit) -> dict[str, Any]:
        """What the asset event's ``extra["payload"]`` says of an outside commit."""
        return {
            "table_format": self.table_format,
            "location": self.location,
            "version": commit.version,
            "snapshot_id": commit.snapshot_id,
            "operation": commit.operation,
            "partitions": sorted(commit.partitions),
        }

    async def _stored_watermark(self) -> int | None:
        if self.asset_state_store is None:  # not run by a triggerer for an asset (a test, a deferral)
            return self._watermark
        try:
            stored = await self.asset_state_store.aget(WATERMARK_KEY)
        except ValueError:
            # One trigger watched for several assets: Airflow offers no single place, so the
            # watermark lives in this triggerer only (a restart starts at start_version again).
            self.log.warning("OutsideCommitTrigger on several assets: its watermark is kept in memory only")
            self.asset_state_store = None
            return self._watermark
        version = stored.get("version") if isinstance(stored, dict) else None
        if isinstance(stored, dict) and stored.get("location") == self.location and type(version) is int:
            self._watermark = version
        # A watermark stored for another location (the watcher now reads another table) is not this table's.
        return self._watermark

    async def _store_watermark(self, version: int) -> None:
        self._watermark = version
        if self.asset_state_store is not None:
            await self.asset_state_store.aset(WATERMARK_KEY, {"location": self.location, "version": version})
