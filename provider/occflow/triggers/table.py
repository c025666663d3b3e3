"""``TableCommitTrigger``: fires once a commit matching a condition is in a table's log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from .commits import CommitCondition, read_commits


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
