"""What a pyiceberg commit carries: occflow's labels and commit tag as snapshot summary
properties (``snapshot_properties``), and the exactly-once tag put on every commit made inside
``ambient_tag`` (how the ledger tags the operator's commit without the job knowing).

pyiceberg writes ``snapshot_properties`` into the summary of every snapshot a write commits (an
overwrite that drops whole files and adds new ones commits a DELETE and an APPEND snapshot, both
carrying them): the ledger and the winner read them back from the snapshot log. A schema change
commits no snapshot: its labels go into table properties set in the same transaction
(``SCHEMA_CHANGE_PREFIX``), so the ledger finds it there. So does ``expire_snapshots``: pyiceberg's
``ExpireSnapshots`` commits only a ``RemoveSnapshotsUpdate`` (no snapshot, no summary to carry
``snapshot_properties``), so its labels go under ``EXPIRE_SNAPSHOTS_PREFIX`` in the same commit.
Each prefix holds the last such commit's labels: the ledger finds the newest of each kind.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from ..tags import FENCE, CommitTag

#: The summary key holding the id occflow gives each commit, to find its snapshots again.
COMMIT_ID_KEY = "occflow.commit-id"
#: Table properties a schema change sets in its own transaction: its commit id and its tag.
SCHEMA_CHANGE_PREFIX = "occflow.schema-change."
#: Table properties an ``expire_snapshots`` sets in its own commit: its commit id and its tag.
EXPIRE_SNAPSHOTS_PREFIX = "occflow.expire-snapshots."
#: ``00004-<uuid>.metadata.json`` (or ``v4.metadata.json``): the metadata file's number.
_METADATA_NUMBER = re.compile(r"(?:^|/)v?(\d+)(?:-[^/]*)?\.metadata\.json$")


def metadata_number(location: str | None) -> int | None:
    """The number of an Iceberg metadata file (``MetadataCommit.version``), ``None`` if unnumbered."""
    found = None if location is None else _METADATA_NUMBER.search(location)
    return None if found is None else int(found.group(1))


@dataclass(frozen=True)
class CommitOptions:
    """What one pyiceberg commit records (``metadata``, the lease's ``fence``) and the check that
    must pass right before it (``before_commit``: raises a ``CommitRefused`` to stop it)."""

    metadata: Mapping[str, str] = field(default_factory=dict)
    before_commit: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    fence: int | None = None

    def properties(self, commit_id: str) -> dict[str, str]:
        """The snapshot summary properties: the labels, the commit id, the fence, and the
        ambient exactly-once tag when this commit is the operator's own (``ambient_tag``)."""
        props = {**self.metadata, COMMIT_ID_KEY: commit_id}
        if self.fence is not None:
            props[FENCE] = str(self.fence)
        ambient = _AMBIENT_TAG.get()
        if ambient is not None:
            tag, only_if = ambient
            if all(self.metadata.get(k) == v for k, v in only_if.items()):
                props.update(tag.properties())
        return props


# The tag every commit inside ``ambient_tag`` carries (when its labels match ``only_if``).
_AMBIENT_TAG: contextvars.ContextVar[tuple[CommitTag, Mapping[str, str]] | None] = contextvars.ContextVar(
    "occflow_pyiceberg_tag", default=None
)


@contextlib.contextmanager
def ambient_tag(tag: CommitTag, only_if: Mapping[str, str] | None = None) -> Iterator[None]:
    """Inside, every pyiceberg commit made through ``PyIcebergTable`` whose labels hold all of
    ``only_if`` (the operator's own commit names its task) carries ``tag``."""
    token = _AMBIENT_TAG.set((tag, dict(only_if or {})))
    try:
        yield
    finally:
        _AMBIENT_TAG.reset(token)


def schema_change_properties(props: Mapping[str, str], prefix: str = SCHEMA_CHANGE_PREFIX) -> dict[str, str]:
    """A metadata-only commit's labels as the table properties it sets (``SCHEMA_CHANGE_PREFIX``,
    or ``EXPIRE_SNAPSHOTS_PREFIX`` for an expire)."""
    return {prefix + key: value for key, value in props.items()}


def from_schema_change_properties(properties: Mapping[str, str], prefix: str = SCHEMA_CHANGE_PREFIX) -> dict[str, str]:
    """The labels the last tagged schema change (or expire, by ``prefix``) left in the table's properties."""
    return {k.removeprefix(prefix): v for k, v in properties.items() if k.startswith(prefix)}


__all__ = [
    "COMMIT_ID_KEY",
    "EXPIRE_SNAPSHOTS_PREFIX",
    "SCHEMA_CHANGE_PREFIX",
    "CommitOptions",
    "ambient_tag",
    "from_schema_change_properties",
    "metadata_number",
    "schema_change_properties",
]
