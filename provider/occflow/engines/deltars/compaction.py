"""Two delta-rs compactions of the same files that both committed: the rows are in the table twice.

delta-rs does not check a commit's removes with ``dataChange=false`` (OPTIMIZE, Z-ORDER) against
another commit's removes (delta-io/delta-rs#3982), so two OPTIMIZEs planned on one snapshot both
commit, each adding its own compacted copy of the same rows. Nothing fails; only the log shows it:
two commits that removed the same file. :func:`duplicate_compaction` reads the log by number
around one compaction's commit and names that pair, so the write flow can fail loudly.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .log import DeltaLog, LoggedCommit

_REARRANGING = ("OPTIMIZE", "ZORDER")

#: Commits read at most after the compaction: a racing compaction commits within moments.
MAX_AFTER = 100


@dataclass(frozen=True)
class CompactionRace:
    """Two commits that removed the same files: ``earlier`` and ``later`` are their versions."""

    table: str
    earlier: int
    later: int
    operations: tuple[str, str]
    files: tuple[str, ...]

    @property
    def versions(self) -> tuple[int, int]:
        return (self.earlier, self.later)

    def describe(self) -> str:
        shown = ", ".join(self.files[:3]) + (f" and {len(self.files) - 3} more" if len(self.files) > 3 else "")
        both = all(op.upper().startswith(_REARRANGING) for op in self.operations)
        effect = (
            "each added its own copy of their rows, which are now in the table twice"
            if both
            else "the compaction's copy brings back rows the other commit removed"
        )
        return (
            f"versions {self.earlier} ({self.operations[0]}) and {self.later} ({self.operations[1]}) of "
            f"{self.table} both removed {len(self.files)} file(s) ({shown}): {effect} (delta-rs does not "
            "check a compaction's removes against another commit's, delta-io/delta-rs#3982); undo "
            f"version {self.later} (RESTORE the table to version {self.later - 1} if nothing committed since)"
        )


def duplicate_compaction(
    uri: str | Path, version: int, storage_options: Mapping[str, str] | None = None
) -> CompactionRace | None:
    """The pair of commits that removed the same files as commit ``version`` did, one of them
    ``version`` itself; ``None`` when no other commit removed any of them.

    The other commit lies after the version ``version`` read (``readVersion`` in its commit
    info: a commit before that made the files disappear from its snapshot) and at most
    ``MAX_AFTER`` commits after ``version``.
    """
    log = DeltaLog(uri, storage_options)
    ours = log.commit(version)
    if ours is None or not ours.removed:
        return None
    paths = {f.path for f in ours.removed}
    read = ours.read_version if ours.read_version is not None else version - 1
    before = log.commits(read + 1, version - 1) if read + 1 <= version - 1 else iter(())
    after = itertools.islice(log.commits(version + 1), MAX_AFTER)
    for other in itertools.chain(before, after):
        same = paths & {f.path for f in other.removed}
        if same:
            first, second = sorted((ours, other), key=lambda c: c.version)
            return _race(str(uri), first, second, same)
    return None


def _race(table: str, first: LoggedCommit, second: LoggedCommit, files: set[str]) -> CompactionRace:
    return CompactionRace(
        table=table,
        earlier=first.version,
        later=second.version,
        operations=(first.operation or "UNKNOWN", second.operation or "UNKNOWN"),
        files=tuple(sorted(files)),
    )
