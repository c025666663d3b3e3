"""A Delta table's log, read by version number: the one reader every delta-rs path uses.

delta-rs's ``DeltaTable.history()`` reads the newest commits in the log but labels them counting
down from the handle's own version: on a handle loaded before another writer committed, the
newest commit is labelled with the handle's version, every label one (or more) too low. So occflow
never takes a version from ``history()``: it opens ``_delta_log/<version>.json`` by its number
(through ``deltalake``'s storage handler, so an object store works as a local path does) and
finds a commit by what the commit itself carries (occflow's commit id, its tag, its ``txn``).

The latest version number comes from a freshly loaded table, and the log is then probed past it
until a number is missing: a commit that landed after that load is still found.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How far the log is probed past the latest version a fresh load reported (commits that landed
#: in between); a table with more commits in that instant is read again by the caller.
_PROBE = 1000


@dataclass(frozen=True)
class LoggedFile:
    """One ``add`` or ``remove`` action: the file's path, partition values, ``dataChange``."""

    path: str
    partition: Mapping[str, Any]
    data_change: bool = True


@dataclass(frozen=True)
class LoggedCommit:
    """What one commit file of the log holds: its number and every action in it."""

    version: int
    info: Mapping[str, Any] = field(default_factory=dict)  # commitInfo, the version added
    added: tuple[LoggedFile, ...] = ()
    removed: tuple[LoggedFile, ...] = ()
    txns: Mapping[str, int] = field(default_factory=dict)  # app id -> version (``txn`` actions)
    metadata_changed: bool = False  # a ``metaData`` action
    protocol_changed: bool = False  # a ``protocol`` action

    @property
    def operation(self) -> str:
        return str(self.info.get("operation") or "")

    @property
    def read_version(self) -> int | None:
        value = self.info.get("readVersion")
        return None if value is None else int(value)


class DeltaLog:
    """The ``_delta_log`` of the table at ``uri`` (any URI ``deltalake`` opens)."""

    def __init__(self, uri: str | Path, storage_options: Mapping[str, str] | None = None) -> None:
        self.uri = str(uri)
        self.storage_options = dict(storage_options or {})
        self._store: Any = None

    def __repr__(self) -> str:
        return f"DeltaLog({self.uri!r})"

    def commit(self, version: int) -> LoggedCommit | None:
        """Commit ``version`` as its file says; ``None`` when there is no such file (not committed
        yet, or removed by log cleanup)."""
        text = self._read(f"_delta_log/{version:020d}.json")
        return None if text is None else parse_commit(version, text)

    def latest_version(self) -> int:
        """The latest version: a fresh load's number, then the log probed past it."""
        from deltalake import DeltaTable  # optional heavy dependency

        loaded = latest = int(DeltaTable(self.uri, storage_options=self.storage_options or None).version())
        while latest < loaded + _PROBE and self._exists(latest + 1):
            latest += 1
        return latest

    def commits(self, first: int, last: int | None = None) -> Iterator[LoggedCommit]:
        """Commits ``first``, ``first + 1``, ... in order, up to ``last`` (default: as long as the
        log goes on); a number below the latest whose file is gone (log cleanup) is skipped."""
        known = last  # the latest version, loaded only when a file is missing
        version = max(first, 0)
        while last is None or version <= last:
            found = self.commit(version)
            if found is not None:
                yield found
            else:
                if known is None:
                    known = self.latest_version()
                if version > known:
                    return  # past the end of the log
            version += 1

    def newest_first(self, depth: int) -> Iterator[LoggedCommit]:
        """The newest ``depth`` commits, newest first (files removed by log cleanup skipped)."""
        latest = self.latest_version()
        for version in range(latest, max(latest - depth, -1), -1):
            found = self.commit(version)
            if found is not None:
                yield found

    def find(self, match: Callable[[LoggedCommit], bool], after: int | None = None, depth: int = 50) -> LoggedCommit | None:
        """The first commit after version ``after`` that ``match`` accepts (``after=None``: among
        the newest ``depth``); ``None`` when none does."""
        if after is None:
            after = max(self.latest_version() - depth, -1)
        return next((c for c in self.commits(after + 1) if match(c)), None)

    # -- storage ------------------------------------------------------------------------------

    def _handler(self) -> Any:
        if self._store is None:
            from deltalake.fs import DeltaStorageHandler  # optional heavy dependency

            self._store = DeltaStorageHandler(self.uri, self.storage_options or None)
        return self._store

    def _exists(self, version: int) -> bool:
        from pyarrow.fs import FileType  # optional heavy dependency

        info = self._handler().get_file_info([f"_delta_log/{version:020d}.json"])[0]
        return bool(info.type != FileType.NotFound)

    def _read(self, path: str) -> str | None:
        try:
            with self._handler().open_input_file(path) as stream:
                return bytes(stream.read()).decode("utf-8")
        except FileNotFoundError:
            return None


def parse_commit(version: int, text: str) -> LoggedCommit:
    """The actions of one commit file's newline-delimited JSON."""
    added: list[LoggedFile] = []
    removed: list[LoggedFile] = []
    txns: dict[str, int] = {}
    info: dict[str, Any] = {}
    metadata = protocol = False
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            added.append(_file(action["add"]))
        elif "remove" in action:
            removed.append(_file(action["remove"]))
        elif "commitInfo" in action:
            info = dict(action["commitInfo"])
        elif "txn" in action:
            txns[str(action["txn"]["appId"])] = int(action["txn"]["version"])
        elif "metaData" in action:
            metadata = True
        elif "protocol" in action:
            protocol = True
    info["version"] = version
    return LoggedCommit(version, info, tuple(added), tuple(removed), txns, metadata, protocol)


def _file(action: Mapping[str, Any]) -> LoggedFile:
    return LoggedFile(
        path=str(action.get("path")),
        partition=dict(action.get("partitionValues") or {}),
        data_change=bool(action.get("dataChange", True)),
    )
