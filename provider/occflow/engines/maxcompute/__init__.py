"""MaxCompute (remote, reached through PyODPS): the commit tag as job hints, the exactly-once
ledger over the project's instances, the table's facts, one write attempt (submit or reconnect,
wait, versions, residue), MaxCompute's error texts, and a stand-in project for tests."""

from __future__ import annotations

from .commits import maxcompute_commits
from .errors import ResidueError
from .facts import maxcompute_table_facts
from .jobs import ProjectJobs
from .ledger import MaxComputeJobs, MaxComputeLedger, maxcompute_hints
from .sql import check_maxcompute_sql, read_maxcompute_write
from .standin import StandInProject, open_standin
from .writer import MaxComputeWrite

__all__ = [
    "MaxComputeJobs",
    "MaxComputeLedger",
    "MaxComputeWrite",
    "ProjectJobs",
    "ResidueError",
    "StandInProject",
    "check_maxcompute_sql",
    "maxcompute_commits",
    "maxcompute_hints",
    "maxcompute_table_facts",
    "open_standin",
    "read_maxcompute_write",
]
