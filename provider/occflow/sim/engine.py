"""The simulator's commit validator: each profile's conflict matrix at partition granularity.

A table keeps a version and a log of the commits that a live attempt may still lose to. An
attempt begins at the table's current version; when it commits it is checked against every
commit made since its begin, in commit order, and it fails on the first one whose footprint
overlaps its own and whose matrix cell says the later job fails (``profile.later_fails(earlier,
later)``). The conflict kind is that cell's exception and the winner that commit's job.
Otherwise it commits and the table gets a new version.

- A footprint is a set of partitions, or None for the whole table; two overlap when either is
  None or they share a partition. The simulator has no rows: jobs on one partition are taken to
  touch the same rows, so a cell that fails only on the same rows (``Condition.SAME_ROWS``)
  fails here.
- A commit older than the oldest live attempt's begin can fail no one any more and is dropped:
  memory follows the work in flight, not the history.

This is deliberately the matrix and not the file-level checkers of ``core.reference``: the
matrices are what admission, the DAG linter and the lower bound reason with, so the simulator
measures those policies against the same rules they were built from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..core.errors import UnknownOperationError
from ..core.kinds import ConflictKind
from ..core.operations import Operation
from ..core.profiles import Profile

Footprint = frozenset[str] | None  # None: the whole table


@dataclass(frozen=True, slots=True)
class Lost:
    """Why an attempt failed to commit: the cell's exception and the commit it lost to."""

    kind: ConflictKind
    winner: int  # the winning commit's job
    version: int  # the version that commit made


def failing_cells(profile: Profile) -> dict[Operation, dict[Operation, ConflictKind]]:
    """For each later operation: the earlier operations that make it fail, with the exception."""
    found = _FAILING.get(profile.name)
    if found is None:
        ops = profile.operations
        found = {
            later: {
                earlier: cell.exception
                for earlier in ops
                if (cell := profile.cell(earlier, later)).exception is not None
            }
            for later in ops
        }
        _FAILING[profile.name] = found
    return found


# Keyed by name: hashing a Profile hashes its whole matrix.
_FAILING: dict[str, dict[Operation, dict[Operation, ConflictKind]]] = {}


def overlap(a: Footprint, b: Footprint) -> bool:
    return a is None or b is None or not a.isdisjoint(b)


class TableLog:
    """One table's version and the commits its live attempts were not yet checked against."""

    __slots__ = ("profile", "version", "_fails", "_ops", "_parts", "_jobs", "_first", "_live")

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.version = 0
        self._fails = failing_cells(profile)
        # The retained commits, oldest first, as three parallel lists: position k made version
        # ``_first + k``.
        self._ops: list[Operation] = []
        self._parts: list[Footprint] = []
        self._jobs: list[int] = []
        self._first = 1
        # Live attempts per begin version; versions only grow, so the first key is the oldest.
        self._live: dict[int, int] = {}

    @property
    def retained(self) -> int:
        """How many commits the log holds (for the tests: bounded by the work in flight)."""
        return len(self._ops)

    @property
    def live(self) -> int:
        return sum(self._live.values())

    def begin(self) -> int:
        """Start an attempt on the current version; returns that version (its token)."""
        version = self.version
        self._live[version] = self._live.get(version, 0) + 1
        return version

    def commit(self, begin: int, operation: Operation, footprint: Footprint, job: int) -> Lost | None:
        """End the attempt that began at ``begin``: None if it committed, else why it lost."""
        count = self._live.get(begin, 0)
        if not count:
            raise ValueError(f"no live attempt began at version {begin} on this table")
        try:
            fails = self._fails[operation]
        except KeyError:
            raise UnknownOperationError(
                f"operation {operation.value!r} is not in profile {self.profile.name!r}"
            ) from None
        lost = None
        ops, parts = self._ops, self._parts
        for k in range(begin + 1 - self._first, len(ops)):
            kind = fails.get(ops[k])
            if kind is not None and (footprint is None or (other := parts[k]) is None
                                     or not footprint.isdisjoint(other)):
                lost = Lost(kind, self._jobs[k], self._first + k)
                break
        if count == 1:
            del self._live[begin]
        else:
            self._live[begin] = count - 1
        if lost is None:
            self.version += 1
            ops.append(operation)
            parts.append(footprint)
            self._jobs.append(job)
        self._prune()
        return lost

    def _prune(self) -> None:
        oldest = next(iter(self._live), self.version)
        drop = oldest + 1 - self._first  # versions <= oldest can fail no live attempt
        if drop > 0:
            del self._ops[:drop], self._parts[:drop], self._jobs[:drop]
            self._first += drop


def table_logs(profiles: Mapping[str, Profile]) -> dict[str, TableLog]:
    return {name: TableLog(profile) for name, profile in profiles.items()}
