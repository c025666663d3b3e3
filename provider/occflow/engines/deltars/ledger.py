"""The exactly-once ledger of a delta-rs table: the ``txn`` map answers "landed?", the log, read
by version number, says which version (``history()``'s labels are off on a stale handle)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..ledger import HISTORY_DEPTH, FoundCommit
from ..tags import CommitTag
from .commit import ambient_commit, deltars_commit
from .table import DeltaRsTable


@dataclass(frozen=True)
class DeltaRsLedger:
    """A delta-rs table as a ``CommitLedger``."""

    delta: DeltaRsTable
    engine: str = "delta-rs"
    #: Tag only commits whose metadata holds these entries (``ambient_commit``'s ``only_if``).
    only_if: Mapping[str, str] | None = None

    @property
    def table(self) -> str:
        return str(self.delta.uri)

    def find_commit(self, tag: CommitTag) -> FoundCommit | None:
        if self.delta.app_version(tag.app_id) is None:
            return None
        for commit in self.tagged_commits():
            if commit.tag.write_id == tag.write_id:
                return commit
        # The txn action outlives log cleanup: the write landed, its version is no longer listed.
        return FoundCommit(self.engine, self.table, tag)

    def tagged_commits(self) -> Iterator[FoundCommit]:
        for commit in self.delta.log().newest_first(HISTORY_DEPTH):
            found = CommitTag.from_properties(commit.info)
            if found is not None:
                yield FoundCommit(self.engine, self.table, found, version=commit.version,
                                  committed_at=str(commit.info.get("timestamp")))

    @contextlib.contextmanager
    def tagging(self, tag: CommitTag) -> Iterator[None]:
        with ambient_commit(deltars_commit(tag), self.only_if):
            yield
