"""Typed errors: one conflict exception per ``ConflictKind``, and the errors a user can cause."""

from __future__ import annotations

from .kinds import ConflictKind, WinningCommit


class OccflowError(Exception):
    """Base of every error occflow raises itself."""


class InvalidDeclarationError(OccflowError, ValueError):
    """A write declaration a user wrote is wrong (operation, table, partition, profile, file)."""


class UnknownOperationError(InvalidDeclarationError):
    pass


class UnknownProfileError(InvalidDeclarationError):
    pass


class InvalidFootprintError(InvalidDeclarationError):
    pass


class CommitConflict(OccflowError):
    """A commit lost to a concurrent commit. ``kind`` says why; ``winner`` names the winner."""

    kind: ConflictKind = ConflictKind.CONCURRENT_WRITE

    def __init__(self, message: str, winner: WinningCommit | None = None) -> None:
        super().__init__(message)
        self.winner = winner

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.winner))


class ConcurrentAppend(CommitConflict):
    kind = ConflictKind.CONCURRENT_APPEND


class ConcurrentDeleteRead(CommitConflict):
    kind = ConflictKind.CONCURRENT_DELETE_READ


class ConcurrentDeleteDelete(CommitConflict):
    kind = ConflictKind.CONCURRENT_DELETE_DELETE


class MetadataChanged(CommitConflict):
    kind = ConflictKind.METADATA_CHANGED


class ProtocolChanged(CommitConflict):
    kind = ConflictKind.PROTOCOL_CHANGED


class ConcurrentTransaction(CommitConflict):
    kind = ConflictKind.CONCURRENT_TRANSACTION


class ConcurrentWrite(CommitConflict):
    kind = ConflictKind.CONCURRENT_WRITE


class ValidationConflict(CommitConflict):
    kind = ConflictKind.VALIDATION_CONFLICT


class OperationConflict(CommitConflict):
    kind = ConflictKind.OPERATION_CONFLICT


class MetadataLockConflict(CommitConflict):
    kind = ConflictKind.METADATA_LOCK_CONFLICT


class CommitFailed(CommitConflict):
    kind = ConflictKind.COMMIT_FAILED


class CommitRetriesExhausted(CommitConflict):
    kind = ConflictKind.COMMIT_RETRIES_EXHAUSTED


class CommitStateUnknown(CommitConflict):
    kind = ConflictKind.COMMIT_STATE_UNKNOWN


CONFLICT_ERRORS: dict[ConflictKind, type[CommitConflict]] = {
    cls.kind: cls
    for cls in (
        ConcurrentAppend,
        ConcurrentDeleteRead,
        ConcurrentDeleteDelete,
        MetadataChanged,
        ProtocolChanged,
        ConcurrentTransaction,
        ConcurrentWrite,
        ValidationConflict,
        OperationConflict,
        MetadataLockConflict,
        CommitFailed,
        CommitRetriesExhausted,
        CommitStateUnknown,
    )
}


def conflict_error(kind: ConflictKind, message: str, winner: WinningCommit | None = None) -> CommitConflict:
    """The typed exception for ``kind``."""
    if kind is ConflictKind.NOT_A_CONFLICT:
        raise ValueError("not_a_conflict has no conflict exception")
    return CONFLICT_ERRORS[kind](message, winner)
