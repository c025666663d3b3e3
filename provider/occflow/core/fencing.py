"""What a write does to fence out writers whose leases lapsed: ``CommitFence``.

A lease is fenced by time, and the last check of it (``LeaseKeeper.ensure_live``) runs before
the engine call. A writer that stalls after that check (a frozen VM, a paused JVM, a worker cut
off from the store for longer than its TTL) would still commit once it resumes, after a
conflicting write was admitted in its place. The store remembers lapsed leases; a write whose
claim conflicts with one supersedes it, and before it reads the table it makes the engine itself
refuse the stalled writer's commit. On Delta that is one metadata commit (the table property
``occflow.lapsed_fence`` raised to the superseded lease's fencing token): every commit planned on
a snapshot older than it fails delta-rs's own conflict check (``metadata_changed``), whatever its
operation, so the stalled writer can commit only before it (when the new write then reads its
result), never after. It happens only when a lease lapsed, which is rare; the writes that ran
beside it on other partitions retry from a fresh snapshot, as after any schema change.

On MaxCompute a job commits on the service at its end, whatever becomes of the client that
submitted it: the write admitted in a stalled writer's place stops that writer's running
instances on the service (found by the fencing token in their settings) and waits until they
ended before it submits its own, so a stalled job either committed before (and is read) or
never commits.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The table property a fencing commit raises to the highest superseded fencing token (Delta).
LAPSED_FENCE_PROPERTY = "occflow.lapsed_fence"


@dataclass(frozen=True)
class CommitFence:
    """One write's lease, and the lapsed leases it supersedes (their holders may be stalled
    inside their engine call, not dead): ``superseded_fence`` is the highest of their tokens."""

    lease_id: str
    fence: int
    supersedes: tuple[str, ...] = ()
    #: The fencing token of each superseded lease, in ``supersedes``' order (an engine that
    #: finds a stalled writer's running job by the token it carries stops exactly those).
    superseded_fences: tuple[int, ...] = ()

    @property
    def superseded_fence(self) -> int:
        """The highest superseded token: what a table is fenced up to (Delta)."""
        return max(self.superseded_fences, default=0)

    def needs_fencing(self, fenced_up_to: int) -> bool:
        """Whether the table, fenced up to token ``fenced_up_to``, must be fenced further."""
        return bool(self.supersedes) and self.superseded_fence > fenced_up_to

    def fenced_out_by(self, fenced_up_to: int) -> bool:
        """Whether a table fenced up to ``fenced_up_to`` refuses this write's own commit."""
        return fenced_up_to >= self.fence > 0


def fenced_up_to(properties: dict[str, str] | None) -> int:
    """The token a table's properties say it is fenced up to (0: never fenced)."""
    value = (properties or {}).get(LAPSED_FENCE_PROPERTY)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


__all__ = ["LAPSED_FENCE_PROPERTY", "CommitFence", "fenced_up_to"]
