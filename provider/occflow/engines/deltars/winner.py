"""delta-rs: the commit a lost write lost to, read from the table's log.

delta-rs's ``CommitFailedError`` names the reason, not the commit. Every commit that landed since
the losing attempt's read version is in the log, so occflow reads them by number (each commit
file's ``add`` / ``remove`` / ``metaData`` / ``protocol`` / ``txn`` actions and its commit info)
and names the first one that did what the conflict kind says the winner did: it is the one
delta-rs's conflict checker stopped at, since it checks the winning commits in order.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.kinds import ConflictKind, WinningCommit
from ..tags import with_writer
from .log import DeltaLog, LoggedCommit

#: Commits read at most after the read version: a conflict is decided on the first few.
MAX_COMMITS = 100

# Operations whose removes carry dataChange=false: delta-rs does not check them against a later
# job's reads or removes (delta-io/delta-rs#3982), only their added files count.
_REARRANGING = ("OPTIMIZE", "ZORDER")

#: A file as the winner finder sees it: its partition values (``{}`` on an unpartitioned table).
Partition = Mapping[str, Any]


@dataclass(frozen=True)
class CommitChange:
    """What one log version did, against the version before it."""

    version: int
    info: Mapping[str, Any]
    added: tuple[Partition, ...]
    removed: tuple[Partition, ...]
    metadata_changed: bool
    protocol_changed: bool
    same_transaction: bool

    @property
    def operation(self) -> str:
        return str(self.info.get("operation") or "")

    @property
    def data_change(self) -> bool:
        return not self.operation.upper().startswith(_REARRANGING)


def _in_scope(files: tuple[Partition, ...], scope: Partition | None) -> bool:
    """Whether a file of ``files`` lies in ``scope`` (the loser's partition; ``None``: everywhere)."""
    if scope is None:
        return bool(files)
    return any(not part or all(str(part.get(k)) == str(v) for k, v in scope.items()) for part in files)


Rule = Callable[[CommitChange, Partition | None], bool]

# What the winner did, per conflict kind: delta-rs's check that raises it
# (conflict_checker.rs, as core/profiles/deltars.py ports it). A kind missing here (retries
# exhausted, a lost version race) says nothing about which commit it was.
WINNER_DID: Mapping[ConflictKind, tuple[str, Rule]] = {
    ConflictKind.CONCURRENT_APPEND: ("added files where this write read", lambda c, s: _in_scope(c.added, s)),
    ConflictKind.CONCURRENT_DELETE_READ: (
        "removed files this write read",
        lambda c, s: c.data_change and _in_scope(c.removed, s),
    ),
    ConflictKind.CONCURRENT_DELETE_DELETE: (
        "removed files this write removes",
        lambda c, s: c.data_change and _in_scope(c.removed, s),
    ),
    ConflictKind.METADATA_CHANGED: ("changed the table's metadata", lambda c, s: c.metadata_changed),
    ConflictKind.PROTOCOL_CHANGED: ("changed the table's protocol", lambda c, s: c.protocol_changed),
    ConflictKind.CONCURRENT_TRANSACTION: ("committed the same app transaction", lambda c, s: c.same_transaction),
}


def find_winner(
    log: DeltaLog,
    read_version: int,
    kind: ConflictKind,
    app_id: str | None = None,
    scope: Partition | None = None,
) -> WinningCommit | None:
    """The commit after ``read_version`` that a write losing with ``kind`` lost to.

    ``log`` is the table's log, read by version number (never ``history()``'s labels, which a
    handle loaded before the winner committed gets wrong); ``scope`` is the partition the losing
    write worked on (``None``: the whole table, or it read every file); ``app_id`` its Delta app
    transaction. ``None`` when nothing was committed since the read. When no commit did what
    ``kind`` says, the first commit after the read is named, and ``basis`` says so.
    """
    changes = [_change(c, app_id) for c in itertools.islice(log.commits(read_version + 1), MAX_COMMITS)]
    if not changes:
        return None
    rule = WINNER_DID.get(kind)
    chosen = None if rule is None else next((c for c in changes if rule[1](c, scope)), None)
    if chosen is None:
        chosen = changes[0]
        why = f"{kind.value} does not say which commit" if rule is None else f"no commit {rule[0]}"
        basis = f"the first commit after read version {read_version} ({why})"
    else:
        assert rule is not None
        basis = f"the first commit after read version {read_version} that {rule[0]}"
    winner = WinningCommit(
        version=chosen.version,
        operation=chosen.operation or None,
        timestamp=_iso(chosen.info.get("timestamp")),
        others=tuple(c.version for c in changes if c is not chosen),
        basis=basis,
    )
    return with_writer(winner, chosen.info)


def _change(commit: LoggedCommit, app_id: str | None) -> CommitChange:
    """What one commit did, from its own actions (the facts delta-rs's conflict checker reads)."""
    return CommitChange(
        version=commit.version,
        info=commit.info,
        added=tuple(f.partition for f in commit.added),
        removed=tuple(f.partition for f in commit.removed),
        metadata_changed=commit.metadata_changed,
        protocol_changed=commit.protocol_changed,
        same_transaction=app_id is not None and app_id in commit.txns,
    )


def _iso(millis: Any) -> str | None:
    if not isinstance(millis, int) or isinstance(millis, bool):
        return None
    return dt.datetime.fromtimestamp(millis / 1000, tz=dt.timezone.utc).isoformat()
