"""What delta-rs records with a commit: commit options, the ambient (exactly-once) options, the tag.

An operator puts its exactly-once tag on commits made by jobs it does not build through
:func:`ambient_commit`; :func:`deltars_commit` encodes a ``CommitTag`` the delta-rs way (a Delta
``txn`` action plus the tag in the commit info).

One write, one commit: :meth:`CommitOptions.ready` is the last step before a commit. It runs the
caller's ``before_commit`` hook (the lease is live, the tag is not in the table yet) and checks
that the snapshot the commit plans on holds no ``txn`` of the write yet. delta-rs's conflict
checker refuses a commit whose app id a commit made after that snapshot also carries
(``concurrent_transaction``), so between them two tries of one write cannot both commit.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.errors import InvalidDeclarationError
from ...core.fencing import CommitFence
from ..ledger import AlreadyCommitted
from ..tags import APP_VERSION, FENCE, CommitTag

if TYPE_CHECKING:
    from deltalake import CommitProperties, DeltaTable

#: The commit info key holding the id occflow gives each commit, to find its version again.
COMMIT_ID_KEY = "occflow.commit_id"


@dataclass(frozen=True)
class CommitOptions:
    """What delta-rs records with a commit: custom commit info, app transactions, retries.

    ``app_id`` / ``app_version`` write a Delta ``txn`` action (what exactly-once writers check
    with :meth:`DeltaRsTable.app_version`); delta-rs fails a commit whose app id a concurrent
    winner also wrote (``concurrent_transaction``). ``before_commit`` runs right before the
    commit and raises a ``CommitRefused`` to stop it; ``fence`` (the lease's fencing token) is
    stamped into the commit info as ``occflow.fence``.
    """

    metadata: Mapping[str, str] = field(default_factory=dict)
    app_id: str | None = None
    app_version: int | None = None
    max_commit_retries: int | None = None
    before_commit: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    fence: int | None = None
    #: What the write must fence out (``core.fencing``), asked right after ``before_commit``:
    #: a lapsed lease that lapsed meanwhile (one this write awaited at its gate) is fenced then.
    commit_fence: Callable[[], CommitFence | None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if (self.app_id is None) != (self.app_version is None):
            raise InvalidDeclarationError("an app transaction needs both app_id and app_version")
        if self.app_version is not None and self.app_version < 0:
            raise InvalidDeclarationError(f"app_version must be >= 0, got {self.app_version}")
        if self.max_commit_retries is not None and self.max_commit_retries < 0:
            raise InvalidDeclarationError(f"max_commit_retries must be >= 0, got {self.max_commit_retries}")

    def resolved(self) -> CommitOptions:
        """These options with the ambient ones merged in, where they apply (``ambient_commit``)."""
        ambient = _AMBIENT_COMMIT.get()
        if ambient is not None and self.app_id is None:  # ambient options always name one
            options, only_if = ambient
            if all(self.metadata.get(k) == v for k, v in only_if.items()):
                return options.merged_over(self)
        return self

    def ready(self, snapshot: DeltaTable | None, commit_id: str) -> tuple[CommitProperties, CommitFence | None]:
        """The commit's properties, once the checks that must pass right before it have passed,
        and the lease fence they carry.

        Runs ``before_commit``, then asks for the fence (``commit_fence``); then, for an app
        transaction, refuses (``AlreadyCommitted``) when ``snapshot``, the version the commit
        plans on, already holds it: delta-rs would accept that second commit, since only ``txn``
        actions committed after the snapshot conflict.
        """
        options = self.resolved()
        if options.before_commit is not None:
            options.before_commit()
        fence = None if options.commit_fence is None else options.commit_fence()
        if snapshot is not None and options.app_id is not None and options.app_version is not None:
            done = snapshot.transaction_version(options.app_id)
            if done is not None and int(done) >= options.app_version:
                raise AlreadyCommitted(
                    f"version {snapshot.version()} of {snapshot.table_uri} already holds app transaction "
                    f"{options.app_id} (version {done}): the write is in the table, it is not committed again"
                )
        return options.properties(commit_id), fence

    def properties(self, commit_id: str) -> CommitProperties:
        from deltalake import CommitProperties, Transaction  # optional heavy dependency

        resolved = self.resolved()
        if resolved is not self:
            return resolved.properties(commit_id)
        metadata = {**self.metadata, COMMIT_ID_KEY: commit_id}
        if self.fence is not None:
            metadata[FENCE] = str(self.fence)
        txns = None
        if self.app_id is not None and self.app_version is not None:
            txns = [Transaction(app_id=self.app_id, version=self.app_version)]
        return CommitProperties(
            custom_metadata=metadata, max_commit_retries=self.max_commit_retries, app_transactions=txns
        )

    def merged_over(self, other: CommitOptions) -> CommitOptions:
        """``other`` with this one's app transaction and metadata added (this one wins); both
        ``before_commit`` hooks run."""
        return CommitOptions(
            metadata={**other.metadata, **self.metadata},
            app_id=self.app_id,
            app_version=self.app_version,
            max_commit_retries=other.max_commit_retries if self.max_commit_retries is None else self.max_commit_retries,
            before_commit=_both(other.before_commit, self.before_commit),
            fence=other.fence if self.fence is None else self.fence,
            commit_fence=other.commit_fence if self.commit_fence is None else self.commit_fence,
        )


def _both(first: Callable[[], None] | None, second: Callable[[], None] | None) -> Callable[[], None] | None:
    if first is None or second is None:
        return first or second

    def both() -> None:
        first()
        second()

    return both


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
        before_commit=None if base is None else base.before_commit,
        fence=tag.fence if base is None or base.fence is None else base.fence,
        commit_fence=None if base is None else base.commit_fence,
    )
