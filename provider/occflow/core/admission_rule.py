"""The one admission rule: which writes on one table may run together, and in which commit order.

A ``Claim`` is what a write asks for: an operation on a footprint (partition keys, or the whole
table) under a profile. Against one running write a newcomer is in one of four ``Pairing``\\ s,
read from the profile's matrix cells in both commit orders (``Profile.commit_is_clean``):

- ``TOGETHER``: their reach does not overlap, or both commit orders are clean;
- ``AFTER``: only running-then-newcomer is clean: the newcomer may run, its commit held at its
  gate until the running write's lease ends;
- ``BEFORE``: only newcomer-then-running is clean: the newcomer may run, and the running
  write's commit is held at its gate until the newcomer's lease ends;
- ``APART``: neither order is clean (or two profiles disagree, or an operation is unknown):
  they never run together.

``rule`` turns the pairings with every running write and every request waiting ahead into one
``Ruling`` (granted, the leases its commit awaits, the leases whose commits it holds, or what
blocks it), and refuses a hold that would close a cycle of commits waiting for each other.

Given ``Durations`` and an estimate per write (seconds: the lease history's past durations of
the same task, Airflow's task durations, a default when unknown), the rule also knows how long
things take (issue 38): it refuses a gate that would hold a commit for more than ``k`` times
its writer's own length (the writer waits outside its slot instead), a request ahead only by its
head start (it arrived later) does not keep out a newcomer no running write blocks, and of two
requests that arrived together the shorter goes first. The estimates are inputs, so every
caller that passes the same ones gets the same ruling.

The lease store, the simulator and ``occflow explain --against`` all ask this module: a second
copy of the rule is a disagreement waiting to happen (``explain --against`` once kept the rule
from before the commit gates).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from .errors import InvalidFootprintError
from .footprint import footprints_overlap
from .operations import Operation, parse_operation
from .profiles import Profile, footprint_reach, get_profile, operations_conflict

K = TypeVar("K")


class Pairing(str, enum.Enum):
    """A newcomer against one running write (see the module's docstring)."""

    TOGETHER = "together"
    AFTER = "after"
    BEFORE = "before"
    APART = "apart"


def operation_pairing(profile: Profile, newcomer: Operation, running: Operation) -> Pairing:
    """Two operations on one overlapping footprint under one profile, read from its two cells."""
    if newcomer not in profile.operations or running not in profile.operations:
        return Pairing.APART  # a matrix that does not know an operation cannot clear it
    running_first = profile.commit_is_clean(running, newcomer)
    newcomer_first = profile.commit_is_clean(newcomer, running)
    if running_first and newcomer_first:
        return Pairing.TOGETHER
    if running_first:
        return Pairing.AFTER
    if newcomer_first:
        return Pairing.BEFORE
    return Pairing.APART


def operation_pairings(profile: Profile) -> Mapping[Operation, Mapping[Operation, Pairing]]:
    """``operation_pairing`` for every (newcomer, running) pair of ``profile``'s operations,
    computed once per profile: the simulator reads it on every admission check."""
    found = _PAIRINGS.get(profile.name)  # keyed by name: hashing a Profile hashes its matrix
    if found is None:
        ops = profile.operations
        found = _PAIRINGS[profile.name] = {n: {h: operation_pairing(profile, n, h) for h in ops} for n in ops}
    return found


_PAIRINGS: dict[str, Mapping[Operation, Mapping[Operation, Pairing]]] = {}


@dataclass(frozen=True)
class Claim:
    """What a lease or a waiting request claims: an operation on a footprint, under a profile."""

    profile: Profile
    operation: Operation
    partitions: frozenset[str] | None  # None = the whole table

    def __post_init__(self) -> None:
        # Names are taken as a user writes them ("merge", "iceberg-serializable"); an unknown one
        # is an error that lists the known ones (``get_profile``, ``parse_operation``).
        if not isinstance(self.profile, Profile):
            object.__setattr__(self, "profile", get_profile(self.profile))
        if not isinstance(self.operation, Operation):
            object.__setattr__(self, "operation", parse_operation(self.operation))
        if self.partitions is not None and not isinstance(self.partitions, frozenset):
            if isinstance(self.partitions, str):
                raise InvalidFootprintError(
                    f"partitions must be a set of partition keys or None (the whole table), not the string {self.partitions!r}"
                )
            object.__setattr__(self, "partitions", frozenset(self.partitions))

    @classmethod
    def of(cls, profile: str | Profile, operation: str | Operation, partitions: frozenset[str] | None) -> Claim:
        """From stored values (a row's profile name and operation value)."""
        return cls(get_profile(profile), Operation(operation), partitions)

    @property
    def reach(self) -> frozenset[str] | None:
        """The partitions its commit is validated against (``footprint_reach``: the whole table
        for a metadata change, and where the engine validates the operation against every file)."""
        return footprint_reach(self.profile, self.operation, self.partitions)

    def pairing(self, running: Claim) -> Pairing:
        """This claim (a newcomer) against ``running``. Two profiles on one table (two
        declarations that disagree) are never ordered: either matrix saying conflict keeps them
        apart."""
        if not footprints_overlap(self.reach, running.reach):
            return Pairing.TOGETHER
        if self.profile.name == running.profile.name:
            return operation_pairings(self.profile).get(self.operation, {}).get(running.operation, Pairing.APART)
        if operations_conflict(self.profile, self.operation, running.profile, running.operation):
            return Pairing.APART
        return Pairing.TOGETHER

    def blocks(self, other: Claim) -> bool:
        """Whether the two must not run together without ordering their commits: their reach
        overlaps and a commit order fails or corrupts the data (symmetric)."""
        return self.pairing(other) is not Pairing.TOGETHER

    def may_follow(self, earlier: Claim) -> bool:
        """Whether this claim may run beside ``earlier``, its commit held until ``earlier``'s."""
        return self.pairing(earlier) is Pairing.AFTER

    def may_precede(self, later: Claim) -> bool:
        """Whether this claim may run beside ``later``, ``later``'s commit held until this one's."""
        return self.pairing(later) is Pairing.BEFORE


@dataclass(frozen=True)
class Durations:
    """The duration-aware choices of the rule, as one small policy (issue 38).

    - ``gate_factor`` (k): a gate may hold a writer's commit at most k times the writer's own
      estimated length; a longer hold keeps the newcomer out instead (it would sit in a worker
      slot doing nothing for longer than it works).
    - ``same_arrival``: requests that arrived within this many seconds of each other arrived
      together, and the shorter goes first (shortest first lowers every waiter's wait).
    - ``default_seconds``: the estimate of a write nothing is known about.
    """

    gate_factor: float = 1.0
    same_arrival: float = 1.0
    default_seconds: float = 60.0

    def __post_init__(self) -> None:
        for name in ("gate_factor", "same_arrival", "default_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
                raise ValueError(f"Durations.{name} must be a finite number of seconds >= 0, not {value!r}")

    def seconds(self, estimate: float | None) -> float:
        """The estimate to use: ``estimate``, or the default when nothing is known."""
        return self.default_seconds if estimate is None else estimate

    def holds_too_long(self, held: float, own: float) -> bool:
        """Whether holding a commit ``held`` seconds at its gate is more than k times ``own``."""
        return held > self.gate_factor * own

    def goes_first(self, arrival: float, estimate: float | None, other_arrival: float,
                   other_estimate: float | None) -> bool:
        """Whether a request that arrived at ``arrival`` goes ahead of one that arrived at
        ``other_arrival``, having arrived together and being estimated shorter."""
        return abs(arrival - other_arrival) <= self.same_arrival and \
            self.seconds(estimate) < self.seconds(other_estimate)

    def describe(self) -> str:
        return (f"a gate holds a commit at most {self.gate_factor:g}x its writer's length; requests within "
                f"{self.same_arrival:g} s of each other go shortest first; unknown writes take "
                f"{self.default_seconds:g} s")


@dataclass(frozen=True)
class Running(Generic[K]):
    """A live lease: its id, its claim, whether its writer holds its commit at the gate, and
    whether it has reached the gate already (then nobody may hold it back further).
    ``remaining``/``length``: its estimated seconds to its commit and its whole estimated
    length (None: unknown; read only with ``Durations``)."""

    key: K
    claim: Claim
    commit_gate: bool = False
    at_gate: bool = False
    remaining: float | None = None
    length: float | None = None


@dataclass(frozen=True)
class Waiting(Generic[K]):
    """A request waiting ahead of the newcomer in the table's queue; ``arrival`` (when it first
    asked) and ``estimate`` (its seconds) are read only with ``Durations``."""

    key: K
    claim: Claim
    commit_gate: bool = False
    arrival: float | None = None
    estimate: float | None = None


@dataclass(frozen=True)
class Blocked(Generic[K]):
    """What keeps the newcomer out: a live lease (``waiting`` False) or a request ahead, and why."""

    key: K
    waiting: bool
    why: str


class Verdict(str, enum.Enum):
    """A ruling in one word, as ``explain --against`` and the tests print it."""

    GRANTED = "granted"  # runs now, no commit order to keep
    AWAITS = "awaits"  # runs now, its commit held at its gate for some running writes
    HOLDS = "holds"  # runs now, and holds some running writes' commits at their gates
    AWAITS_AND_HOLDS = "awaits_and_holds"
    BLOCKED = "blocked"  # waits for its turn


@dataclass(frozen=True)
class Ruling(Generic[K]):
    """The decision on a newcomer: what blocks it, and if nothing does, the running writes its
    commit must follow (``awaits``) and those whose commits must follow its own (``holds``)."""

    blocked_by: tuple[Blocked[K], ...] = ()
    awaits: tuple[K, ...] = ()
    holds: tuple[K, ...] = ()

    @property
    def granted(self) -> bool:
        return not self.blocked_by

    @property
    def verdict(self) -> Verdict:
        if self.blocked_by:
            return Verdict.BLOCKED
        if self.awaits and self.holds:
            return Verdict.AWAITS_AND_HOLDS
        if self.awaits:
            return Verdict.AWAITS
        return Verdict.HOLDS if self.holds else Verdict.GRANTED


def rule(
    newcomer: Claim,
    running: Iterable[Running[K]],
    ahead: Iterable[Waiting[K]] = (),
    *,
    commit_gate: bool,
    gates: Mapping[K, Collection[K]] | None = None,
    commit_ahead: bool = True,
    waited_for: Callable[[K], bool] | None = None,
    durations: Durations | None = None,
    estimate: float | None = None,
    arrival: float | None = None,
    slot_wanted: bool = True,
) -> Ruling[K]:
    """The ruling on ``newcomer`` against the ``running`` writes and the requests waiting
    ``ahead`` of it; ``commit_gate``: the newcomer holds its commit at its gate (else it is
    order-blind: every pairing but ``TOGETHER`` blocks it).

    - ``AFTER`` a running write: the newcomer awaits it.
    - ``BEFORE`` a running write: its commit is held for the newcomer's, if that writer holds
      its commit at the gate, has not reached it yet (a writer at its gate is never held back
      further, so a stream of newcomers cannot starve it), no request waiting ahead waits for it
      in both orders (holding it would make that request wait longer for a newcomer: first come,
      first served), and ``commit_ahead`` (the simulator's ablation turns it off).
    - A request ahead blocks only a pair no gate can order: granted later, it awaits the
      newcomer, or (if it holds its commit at the gate) the newcomer holds its commit.
    - ``gates`` (waiter -> the leases it awaits): a hold that would close a cycle of commits
      waiting for each other blocks instead (``without_cycles``).

    ``waited_for``: for a caller that indexes its queue rather than listing it (the simulator),
    whether some request ahead waits for that lease in both commit orders; ``ahead`` then need
    only list the requests that may block the newcomer.

    ``durations`` (None: duration-blind), with the newcomer's ``estimate`` and ``arrival``:
    an ``AFTER`` whose wait at the gate (the running write's remaining time less the newcomer's
    own) is more than k times the newcomer's length blocks; so does a ``BEFORE`` whose hold on
    the running write (the newcomer's length less that write's remaining time) is more than k
    times that write's length. Unknown remaining times hold nothing back; nor does a hold while
    no other write wants a worker slot (``slot_wanted`` False: a slot nobody waits for costs
    nothing to hold; a caller that cannot tell passes True). A request ahead that
    arrived after the newcomer (ahead only by its head start) does not block a newcomer that no
    running write blocks, nor does one that arrived together with it and is estimated longer.
    """
    waiting_ahead = list(ahead)
    # Requests ahead that wait for a lease whatever the order: a newcomer must not hold that lease.
    exclusive_ahead = [w.claim for w in waiting_ahead] if commit_gate and waited_for is None else []

    def waited(lease: Running[K]) -> bool:
        if waited_for is not None:
            return waited_for(lease.key)
        return any(waiter.pairing(lease.claim) is Pairing.APART for waiter in exclusive_ahead)

    blocked, awaits, holds = _against_running(
        newcomer, running, waited, commit_gate=commit_gate, commit_ahead=commit_ahead,
        durations=durations if slot_wanted else None, estimate=estimate,
    )
    free_of_running = not blocked
    blocked += _blocked_ahead(newcomer, waiting_ahead, commit_gate, durations, estimate, arrival, free_of_running)
    ruling = Ruling(tuple(blocked), tuple(awaits), tuple(holds))
    return ruling if gates is None else without_cycles(ruling, gates)


def _against_running(
    newcomer: Claim,
    running: Iterable[Running[K]],
    waited: Callable[[Running[K]], bool],
    *,
    commit_gate: bool,
    commit_ahead: bool,
    durations: Durations | None,
    estimate: float | None,
) -> tuple[list[Blocked[K]], list[K], list[K]]:
    """``rule`` against the running writes: the leases that block the newcomer, those it awaits
    and those whose commit it holds. ``durations`` None: no gate is too long (duration-blind, or
    no other write wants a slot); ``waited``: whether a request ahead waits for that lease."""
    blocked: list[Blocked[K]] = []
    awaits: list[K] = []
    holds: list[K] = []
    for lease in running:
        pairing = newcomer.pairing(lease.claim)
        if pairing is Pairing.TOGETHER:
            continue
        too_long = None if durations is None else _gate_too_long(durations, pairing, estimate, lease)
        if too_long is not None and commit_gate:
            blocked.append(Blocked(lease.key, False, too_long))
        elif commit_gate and pairing is Pairing.AFTER:
            awaits.append(lease.key)
        elif commit_gate and pairing is Pairing.BEFORE and commit_ahead and lease.commit_gate and not lease.at_gate \
                and not waited(lease):
            holds.append(lease.key)
        else:
            blocked.append(Blocked(lease.key, False, _why_lease(pairing, commit_gate, commit_ahead, lease)))
    return blocked, awaits, holds


def _blocked_ahead(
    newcomer: Claim,
    waiting_ahead: Iterable[Waiting[K]],
    commit_gate: bool,
    durations: Durations | None,
    estimate: float | None,
    arrival: float | None,
    free_of_running: bool,
) -> list[Blocked[K]]:
    """``rule`` against the requests waiting ahead: those that block the newcomer (a pair no
    gate can order), unless ahead only by a head start or longer and arrived together."""
    blocked: list[Blocked[K]] = []
    for request in waiting_ahead:
        if durations is not None and arrival is not None and request.arrival is not None and (
                (free_of_running and request.arrival > arrival)
                or durations.goes_first(arrival, estimate, request.arrival, request.estimate)):
            continue  # ahead only by its head start, or longer and arrived together: the newcomer goes
        pairing = newcomer.pairing(request.claim)
        orderable = pairing is Pairing.AFTER or (request.commit_gate and pairing is Pairing.BEFORE)
        if pairing is not Pairing.TOGETHER and not (commit_gate and orderable):
            blocked.append(Blocked(request.key, True, f"waiting ahead, {_said(pairing, commit_gate)}"))
    return blocked


def _gate_too_long(durations: Durations, pairing: Pairing, estimate: float | None, lease: Running[K]) -> str | None:
    """Why a gate between the newcomer and ``lease`` would hold a commit too long, or None."""
    if lease.remaining is None or pairing not in (Pairing.AFTER, Pairing.BEFORE):
        return None
    own = durations.seconds(estimate)
    if pairing is Pairing.AFTER:
        held = lease.remaining - own
        if durations.holds_too_long(held, own):
            return (f"its commit would wait about {held:.3g} s at its gate for this write, more than "
                    f"{durations.gate_factor:g}x its own {own:.3g} s")
        return None
    if lease.at_gate or not lease.commit_gate:
        return None  # not held by the newcomer whatever its length (``_why_lease`` says why)
    length = durations.seconds(lease.length)
    held = own - lease.remaining
    if durations.holds_too_long(held, length):
        return (f"it would hold this write's commit about {held:.3g} s, more than "
                f"{durations.gate_factor:g}x that write's {length:.3g} s")
    return None


def _said(pairing: Pairing, commit_gate: bool) -> str:
    if pairing is Pairing.APART:
        return "neither commit order is clean"
    if not commit_gate:
        return "one commit order fails and the newcomer holds no commit gate"
    return "its commit order could not be held"


def _why_lease(pairing: Pairing, commit_gate: bool, commit_ahead: bool, lease: Running[K]) -> str:
    if commit_gate and pairing is Pairing.BEFORE:
        if not commit_ahead:
            return "it must commit after the newcomer, and no newcomer may commit ahead of a running write"
        if not lease.commit_gate:
            return "it must commit after the newcomer but holds no commit gate"
        if lease.at_gate:
            return "it must commit after the newcomer but already waits at its gate"
        return "it must commit after the newcomer, and a request ahead waits for it"
    return _said(pairing, commit_gate)


def closes_cycle(gates: Mapping[K, Collection[K]], awaits: Iterable[K], holds: Iterable[K]) -> bool:
    """Whether the newcomer awaiting ``awaits`` and holding ``holds`` closes a cycle: following
    ``gates`` (waiter -> the leases it awaits) from ``awaits`` reaches one of ``holds``."""
    starts, targets = list(awaits), set(holds)
    if not starts or not targets:
        return False
    seen, stack = set(starts), list(starts)
    while stack:
        node = stack.pop()
        if node in targets:
            return True
        for nxt in gates.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def without_cycles(ruling: Ruling[K], gates: Mapping[K, Collection[K]]) -> Ruling[K]:
    """``ruling``, unless holding its ``holds`` would close a cycle of commits waiting for each
    other: then those block instead. Gates then stay acyclic, so some writer always commits."""
    if not closes_cycle(gates, ruling.awaits, ruling.holds):
        return ruling
    cycle = tuple(Blocked(key, False, "holding its commit would close a cycle of commit gates") for key in ruling.holds)
    return Ruling(ruling.blocked_by + cycle, ruling.awaits, ())


__all__ = [
    "Blocked",
    "Claim",
    "Durations",
    "Pairing",
    "Ruling",
    "Running",
    "Verdict",
    "Waiting",
    "closes_cycle",
    "operation_pairing",
    "operation_pairings",
    "rule",
    "without_cycles",
]
