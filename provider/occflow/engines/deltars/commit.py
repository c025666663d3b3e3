"""What delta-rs records with a commit: commit options, the ambient (exactly-once) options, the tag.

An operator puts its exactly-once tag on commits made by jobs it does not build through
:func:`ambient_commit`; :func:`deltars_commit` encodes a ``CommitTag`` the delta-rs way (a Delta
``txn`` action plus the tag in the commit info).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.errors import InvalidDeclarationError
from ..tags import APP_VERSION, CommitTag

if TYPE_CHECKING:
    from deltalake import CommitProperties

#: The commit info key holding the id occflow gives each commit, to find its version again.
COMMIT_ID_KEY = "occflow.commit_id"


@dataclass(frozen=True)
class CommitOptions:
    """What delta-rs records with a commit: custom commit info, app transactions, retries.

    ``app_id`` / ``app_version`` write a Delta ``txn`` action (what exactly-once writers check
    with :meth:`DeltaRsTable.app_version`); delta-rs fails a commit whose app id a concurrent
    winner also wrote (``concurrent_transaction``).
    """

    metadata: Mapping[str, str] = field(default_factory=dict)
    app_id: str | None = None
    app_version: int | None = None
    max_commit_retries: int | None = None

    def __post_init__(self) -> None:
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidDeclarationError("an app transaction needs both app_id and app_version")
        if self.app_version is not None and self.app_version < 0:
            raise InvalidDeclarationError(f"app_version must be >= 0, got {self.app_version}")
        if self.max_commit_retries is not None and self.max_commit_retries < 0:
            raise InvalidDeclarationError(f"max_commit_retries must be >= 0, got {self.max_commit_retries}")

    def properties(self, commit_id: str) -> CommitProperties:
        from deltalake import CommitProperties, Transaction  # optional heavy dependency

        ambient = _AMBIENT_COMMIT.get()
        if ambient is not None and self.app_id is None:  # ambient options always name one
            options, only_if = ambient
            if all(self.metadata.get(k) == v for k, v in only_if.items()):
                return options.merged_over(self).properties(commit_id)
        metadata = {**self.metadata, COMMIT_ID_KEY: commit_id}
        txns = None
        if self.app_id is not None and self.app_version is not None:
            txns = [Transaction(app_id=self.app_id, version=self.app_version)]
        return CommitProperties(
            custom_metadata=metadata, max_commit_retries=self.max_commit_retries, app_transactions=txns
        )

    def merged_over(self, other: CommitOptions) -> CommitOptions:
        """``other`` with this one's app transaction and metadata added (this one wins)."""
        return CommitOptions(
            metadata={**other.metadata, **self.metadata},
            app_id=self.app_id,
            app_version=self.app_version,
            max_commit_retries=other.max_commit_retries if self.max_commit_retries is None else self.max_commit_retries,
        )


# Commit options every delta-rs commit made inside ``ambient_commit`` carries: how an operator
# puts its exactly-once tag on commits made by jobs it does not build (deltars_commit).
_AMBIENT_COMMIT: contextvars.ContextVar[tuple[CommitOptions, Mapping[str, str]] | None] = contextvars.ContextVar(
    "occflow_ambient_commit", default=None
)


@contextlib.contextmanager
def ambient_commit(options: CommitOptions, only_if: Mapping[str, str] | None = None) -> Iterator[None]:
    """Inside, every commit whose own options name no app transaction gets ``options`` merged in.

    ``only_if``: only commits whose metadata holds all these entries (e.g. the operator's own
    commit, which names its task), so another writer called during the attempt stays untagged.
    """
    if options.app_id is None:
        raise InvalidDeclarationError("ambient commit options must name an app transaction (app_id, app_version)")
    token = _AMBIENT_COMMIT.set((options, dict(only_if or {})))
    try:
        yield
    finally:
        _AMBIENT_COMMIT.reset(token)


def deltars_commit(tag: CommitTag, base: CommitOptions | None = None) -> CommitOptions:
    """delta-rs commit options for ``tag``: the ``txn`` action and the tag in the commit info."""
    metadata = {**(base.metadata if base is not None else {}), **tag.properties()}
    return CommitOptions(
        metadata=metadata,
        app_id=tag.app_id,
        app_version=APP_VERSION,
        max_commit_retries=None if base is None else base.max_commit_retries,
    )
