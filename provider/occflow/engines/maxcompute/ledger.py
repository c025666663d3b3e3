"""MaxCompute keeps no per-commit properties on a table, so the tag lives in the job's settings
(hints) and "landed?" is "did a successful job with this write id write the table?"."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..ledger import FoundCommit
from ..tags import CommitTag

#: The prefix MaxCompute settings carry; occflow's tag keys go after it.
SETTING_PREFIX = "odps."


def maxcompute_hints(tag: CommitTag) -> dict[str, str]:
    """Job settings for a MaxCompute SQL instance (PyODPS ``hints=``)."""
    return {f"{SETTING_PREFIX}{k}": v for k, v in tag.properties().items()}


class MaxComputeJobs(Protocol):
    """What occflow needs from a MaxCompute client: the settings of the project's recent jobs."""

    def successful_jobs(self, table: str) -> list[Mapping[str, Any]]:
        """Recent successful SQL jobs that wrote ``table``: ``{"id", "settings", "end_time"}``."""
        ...


@dataclass(frozen=True)
class MaxComputeLedger:
    jobs: MaxComputeJobs
    table: str
    engine: str = "maxcompute"

    def tagged_commits(self) -> Iterator[FoundCommit]:
        entries = sorted(self.jobs.successful_jobs(self.table), key=lambda j: str(j.get("end_time")), reverse=True)
        for job in entries:
            settings = {str(k)[len(SETTING_PREFIX):]: v for k, v in dict(job.get("settings") or {}).items()
                        if str(k).startswith(SETTING_PREFIX + "occflow.")}
            found = CommitTag.from_properties(settings)
            if found is not None:
                yield FoundCommit(self.engine, self.table, found, committed_at=str(job.get("end_time")))

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        return next((c for c in self.tagged_commits() if c.tag.write_id == tag.write_id), None)

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        # The job runner passes maxcompute_hints(tag) with the SQL; nothing to set around it.
        yield
