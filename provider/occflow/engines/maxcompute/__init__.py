"""MaxCompute (remote, reached through PyODPS): the commit tag as job hints, the exactly-once
ledger over the project's instances, the table's facts, one write attempt (submit or reconnect,
wait, versions, residue), MaxCompute's error texts, and a stand-in project for tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:  # the names below load on first use (``__getattr__``)
    from .commits import maxcompute_commits
    from .errors import ResidueError
    from .facts import maxcompute_table_facts
    from .jobs import ProjectJobs
    from .ledger import MaxComputeJobs, MaxComputeLedger, maxcompute_hints
    from .sql import check_maxcompute_sql, read_maxcompute_write
    from .standin import StandInProject, open_standin
    from .writer import MaxComputeWrite

#: Each public name and the module that defines it. Loaded on first use: a caller that needs
#: one reader (a trigger, ``occflow explain``) does not load the whole engine with it.
_LAZY = {
    "MaxComputeJobs": ".ledger",
    "MaxComputeLedger": ".ledger",
    "MaxComputeWrite": ".writer",
    "ProjectJobs": ".jobs",
    "ResidueError": ".errors",
    "StandInProject": ".standin",
    "check_maxcompute_sql": ".sql",
    "maxcompute_commits": ".commits",
    "maxcompute_hints": ".ledger",
    "maxcompute_table_facts": ".facts",
    "open_standin": ".standin",
    "read_maxcompute_write": ".sql",
}

__getattr__ = lazy_exports(__name__, _LAZY)

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
