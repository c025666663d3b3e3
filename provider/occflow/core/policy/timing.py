"""What losing with a kind means (``Loss``) and how long each loss waits (``TIMING``): data."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..kinds import ConflictKind
from .waits import Stop, StopAfterAttempt, StopAfterDelay, Wait, WaitExponential, WaitRandom


class Loss(str, enum.Enum):
    """What losing with a kind means for the job that lost."""

    POINTER_RACE = "pointer_race"  # a race on a lock or metadata pointer: nothing read changed
    WRITER_WON = "writer_won"  # a concurrent writer changed data or metadata this job depends on
    ENGINE_BUDGET = "engine_budget"  # the engine already retried the commit: contention is high
    UNSAFE = "unsafe"  # not retry-safe (kinds.py): retrying cannot help or may write twice
    NONE = "none"  # not a conflict


# Only retry-safe kinds are listed; the others follow ConflictKind.retry_safe (see loss_of).
LOSS_OF_KIND: dict[ConflictKind, Loss] = {
    ConflictKind.METADATA_LOCK_CONFLICT: Loss.POINTER_RACE,
    ConflictKind.COMMIT_FAILED: Loss.POINTER_RACE,
    ConflictKind.CONCURRENT_APPEND: Loss.WRITER_WON,
    ConflictKind.CONCURRENT_DELETE_READ: Loss.WRITER_WON,
    ConflictKind.CONCURRENT_DELETE_DELETE: Loss.WRITER_WON,
    ConflictKind.METADATA_CHANGED: Loss.WRITER_WON,
    ConflictKind.CONCURRENT_WRITE: Loss.WRITER_WON,
    ConflictKind.VALIDATION_CONFLICT: Loss.WRITER_WON,
    ConflictKind.OPERATION_CONFLICT: Loss.WRITER_WON,
    ConflictKind.COMMIT_RETRIES_EXHAUSTED: Loss.ENGINE_BUDGET,
}


def loss_of(kind: ConflictKind) -> Loss:
    if not kind.is_conflict:
        return Loss.NONE
    if not kind.retry_safe:
        return Loss.UNSAFE
    return LOSS_OF_KIND[kind]


@dataclass(frozen=True)
class Timing:
    """How one loss waits and when it gives up, in the task and across reschedules."""

    retry_wait: Wait
    retry_stop: Stop
    reschedule_wait: Wait
    reschedule_stop: Stop


# A pointer race clears at once: retry quickly. A writer that won usually finished (OCC: it
# committed before we lost), so a fresh snapshot succeeds after a short backoff; repeated losses
# mean a stream of writers on the same footprint, so the task then reschedules, freeing its
# worker slot while they finish, instead of holding it in a retry loop.
TIMING: dict[Loss, Timing] = {
    Loss.POINTER_RACE: Timing(
        retry_wait=WaitExponential(multiplier=0.5, max=5) + WaitRandom(0, 0.5),
        retry_stop=StopAfterAttempt(5) | StopAfterDelay(60),
        reschedule_wait=WaitExponential(multiplier=30, max=300) + WaitRandom(0, 15),
        reschedule_stop=StopAfterAttempt(8) | StopAfterDelay(3600),
    ),
    Loss.WRITER_WON: Timing(
        retry_wait=WaitExponential(multiplier=2, max=60) + WaitRandom(0, 2),
        retry_stop=StopAfterAttempt(4) | StopAfterDelay(600),
        reschedule_wait=WaitExponential(multiplier=60, max=900) + WaitRandom(0, 30),
        reschedule_stop=StopAfterAttempt(8) | StopAfterDelay(4 * 3600),
    ),
    # The engine spent its own commit retries already: more in-task retries only add contention.
    Loss.ENGINE_BUDGET: Timing(
        retry_wait=WaitExponential(multiplier=5, max=120) + WaitRandom(0, 5),
        retry_stop=StopAfterAttempt(2) | StopAfterDelay(600),
        reschedule_wait=WaitExponential(multiplier=120, max=1800) + WaitRandom(0, 60),
        reschedule_stop=StopAfterAttempt(6) | StopAfterDelay(4 * 3600),
    ),
}
