"""What a policy is: an ``Action`` per stage, a ``KindPolicy`` per conflict kind, the
``WritePolicy`` of one operation on one profile, and the ``Decision`` it takes on a failure."""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidDeclarationError
from ..kinds import Classification, ConflictKind
from ..operations import Operation
from ..profiles import get_profile
from .render import Row, policy_table
from .waits import Stop, StopNever, Wait, WaitNone, stop_from_dict, wait_from_dict


class Action(str, enum.Enum):
    """What to do after a write lost (or failed for another reason)."""

    RETRY = "retry"  # run the job again inside the task, from a fresh snapshot
    RESCHEDULE = "reschedule"  # end this try and come back later: frees the worker slot
    SKIP = "skip"  # nothing left to do (a compaction that lost to a data write)
    FAIL = "fail"  # fail fast and alert: retrying cannot help or may write twice
    DEFAULT = "default"  # not a conflict: Airflow's ordinary retries decide

    @property
    def retries_the_write(self) -> bool:
        return self in (Action.RETRY, Action.RESCHEDULE)



# --------------------------------------------------------------------------- what to do


@dataclass(frozen=True)
class KindPolicy:
    """What to do for one kind: ``action`` until ``stop``, waiting ``wait``; then ``then``.

    ``then`` chains stages: retry in the task a few times, then reschedule, then fail.
    ``reason`` says why, in the words a user reads in the CLI and in alerts.
    """

    action: Action
    wait: Wait = field(default_factory=WaitNone)
    stop: Stop = field(default_factory=StopNever)
    then: KindPolicy | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.action.retries_the_write and isinstance(self.stop, StopNever) and self.then is not None:
            raise InvalidDeclarationError("a stage that never stops cannot have a next stage")
        if not self.action.retries_the_write and self.then is not None:
            raise InvalidDeclarationError(f"{self.action.value} is final: it cannot have a next stage")

    # Constructors that read like the action they build.
    @classmethod
    def retry(
        cls, wait: Wait, stop: Stop, then: KindPolicy | None = None, reason: str = ""
    ) -> KindPolicy:
        return cls(Action.RETRY, wait, stop, then if then is not None else cls.fail("retries exhausted"), reason)

    @classmethod
    def reschedule(
        cls, wait: Wait, stop: Stop, then: KindPolicy | None = None, reason: str = ""
    ) -> KindPolicy:
        return cls(
            Action.RESCHEDULE, wait, stop, then if then is not None else cls.fail("reschedules exhausted"), reason
        )

    @classmethod
    def skip(cls, reason: str = "") -> KindPolicy:
        return cls(Action.SKIP, reason=reason)

    @classmethod
    def fail(cls, reason: str = "") -> KindPolicy:
        return cls(Action.FAIL, reason=reason)

    @classmethod
    def default(cls, reason: str = "") -> KindPolicy:
        return cls(Action.DEFAULT, reason=reason)

    def stages(self) -> tuple[KindPolicy, ...]:
        chain: list[KindPolicy] = []
        stage: KindPolicy | None = self
        while stage is not None:
            chain.append(stage)
            stage = stage.then
        return tuple(chain)

    def stage_at(self, attempt: int, elapsed_seconds: float) -> tuple[KindPolicy, int, int]:
        """The stage that applies after ``attempt`` failed attempts.

        Returns the stage, the attempts made inside it (what its ``stop`` counts) and the index
        its ``wait`` uses. A chained stage counts from where the previous stage's attempt limit
        ended, so the first reschedule after four in-task retries waits the shortest time; time
        limits count from the first attempt.
        """
        stage, made, first = self, attempt, True
        while stage.then is not None and stage.stop.should_stop(made, elapsed_seconds):
            limit = stage.stop.attempt_limit()
            made = max(0, made - limit) if limit is not None else 0
            stage, first = stage.then, False
        return stage, made, made if first else made + 1

    def describe(self) -> str:
        parts = []
        for stage in self.stages():
            if stage.action.retries_the_write:
                parts.append(f"{stage.action.value} [wait {stage.wait}; until {stage.stop}]")
            else:
                parts.append(stage.action.value)
        return " -> ".join(parts)

    def __str__(self) -> str:
        return self.describe()

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"action": self.action.value, "reason": self.reason}
        if self.action.retries_the_write:
            data["wait"] = self.wait.to_dict()
            data["stop"] = self.stop.to_dict()
        if self.then is not None:
            data["then"] = self.then.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KindPolicy:
        try:
            action = Action(data["action"])
        except (KeyError, ValueError, TypeError):
            known = ", ".join(a.value for a in Action)
            raise InvalidDeclarationError(
                f"policy stage {dict(data)!r} needs an action, one of: {known}"
            ) from None
        then = cls.from_dict(data["then"]) if data.get("then") is not None else None
        reason = str(data.get("reason", ""))
        if not action.retries_the_write:
            return cls(action=action, then=then, reason=reason)
        if "stop" not in data:
            raise InvalidDeclarationError(
                f"policy stage {dict(data)!r}: {action.value} needs a stop (attempts and/or seconds), "
                'e.g. {"type": "after_attempt", "attempts": 3}'
            )
        wait = wait_from_dict(data["wait"]) if "wait" in data else WaitNone()
        build = cls.retry if action is Action.RETRY else cls.reschedule
        return build(wait, stop_from_dict(data["stop"]), then=then, reason=reason)


@dataclass(frozen=True)
class Decision:
    """What a policy decided about one failure.

    ``reason`` is the sentence as printed: ``"<kind>: <because><advice>"`` when a policy took
    the decision (``taken``). Its parts are fields so that nobody cuts the sentence back apart:
    ``because`` is the policy's own words, ``advice`` the kind's generic help text a fail-fast
    on a kind that is not retry-safe ends with (``ConflictKind.help``), which the flow words for
    the engine (``with_advice``). A decision built without a policy (the simulator's baselines)
    has no prefix and no advice: its ``because`` is its ``reason``.
    """

    action: Action
    delay_seconds: float
    reason: str
    kind: ConflictKind = ConflictKind.NOT_A_CONFLICT
    attempt: int = 1
    because: str = ""
    advice: str = ""

    def __post_init__(self) -> None:
        if not (self.because or self.advice):
            # Built from a reason alone: that reason is all there is to say why.
            object.__setattr__(self, "because", self.reason)

    @classmethod
    def taken(
        cls, action: Action, delay_seconds: float, kind: ConflictKind, attempt: int, because: str, advice: str = ""
    ) -> Decision:
        """A policy's decision: its printed ``reason`` is the kind, then why."""
        return cls(action, delay_seconds, f"{kind.value}: {because}{advice}", kind, attempt, because, advice)

    @property
    def why(self) -> str:
        """The reason without the ``kind:`` prefix the policy puts before it."""
        return self.because + self.advice

    def with_advice(self, advice: str) -> Decision:
        """This decision with ``advice`` in place of the kind's generic help it ends with (an
        engine's own wording, ``core.advice.kind_help``); unchanged when it ends with none."""
        if not self.advice:
            return self
        return Decision.taken(self.action, self.delay_seconds, self.kind, self.attempt, self.because, advice)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "delay_seconds": self.delay_seconds,
            "reason": self.reason,
            "kind": self.kind.value,
            "attempt": self.attempt,
        }


# --------------------------------------------------------------------------- the policy


@dataclass(frozen=True)
class WritePolicy:
    """The effective policy of one operation on one profile: a ``KindPolicy`` per kind."""

    profile: str
    operation: Operation
    replans_from_fresh_snapshot: bool
    kinds: tuple[tuple[ConflictKind, KindPolicy], ...]
    overridden: frozenset[ConflictKind] = frozenset()
    # The matrix: earlier operations that make this operation fail with each kind.
    winners: tuple[tuple[ConflictKind, tuple[Operation, ...]], ...] = ()
    # How many partitions the write covers (``None``: the whole table); a matrix cell is one.
    partitions: int | None = 1

    def for_kind(self, kind: ConflictKind | str) -> KindPolicy:
        wanted = parse_kind(kind)
        for known, policy in self.kinds:
            if known is wanted:
                return policy
        raise KeyError(wanted)  # unreachable: derive_policy covers every kind

    def winners_of(self, kind: ConflictKind) -> tuple[Operation, ...]:
        return dict(self.winners).get(kind, ())

    def met_kinds(self) -> tuple[ConflictKind, ...]:
        """Kinds this operation can meet on this profile (matrix cells and engine extras)."""
        return tuple(kind for kind, ops in self.winners if ops) + tuple(
            kind for kind in get_profile(self.profile).extra_kinds if not self.winners_of(kind)
        )

    def decide(
        self,
        classification: Classification,
        attempt: int,
        elapsed_seconds: float = 0.0,
        rng: random.Random | None = None,
    ) -> Decision:
        """What to do after ``attempt`` attempts (1 = the first one failed) over ``elapsed_seconds``.

        ``DEFAULT`` for anything not classified as a conflict: occflow never retries it.
        """
        kind = classification.kind
        policy = self.for_kind(kind)
        stage, made, index = policy.stage_at(attempt, elapsed_seconds)
        if stage.action.retries_the_write and stage.stop.should_stop(made, elapsed_seconds):
            # The last stage ran out without a ``then``: nothing left but failing.
            return Decision.taken(Action.FAIL, 0.0, kind, attempt, f"gave up after {attempt} attempts")
        delay = round(stage.wait.seconds(index, rng) if stage.action.retries_the_write else 0.0, 3)
        because = stage.reason or policy.reason
        if stage.action is Action.FAIL and because == kind.help:
            # The kind's generic help (derive's "not retry-safe" rule): the flow words it for the engine.
            return Decision.taken(stage.action, delay, kind, attempt, "", because)
        return Decision.taken(stage.action, delay, kind, attempt, because)

    # ----- printing and serialising

    def rows(self) -> list[dict[str, Any]]:
        rows = []
        for kind, policy in self.kinds:
            rows.append(
                {
                    "kind": kind.value,
                    "action": policy.action.value,
                    "policy": policy.describe(),
                    "after": [op.value for op in self.winners_of(kind)],
                    "overridden": kind in self.overridden,
                    "reason": policy.reason,
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "operation": self.operation.value,
            "replans_from_fresh_snapshot": self.replans_from_fresh_snapshot,
            "partitions": self.partitions,
            "kinds": {kind.value: policy.to_dict() for kind, policy in self.kinds},
            "overridden": sorted(kind.value for kind in self.overridden),
            "met_kinds": [kind.value for kind in self.met_kinds()],
            "rows": self.rows(),
        }

    def expected_from(self, kind: ConflictKind) -> str:
        """Why this operation can meet ``kind`` on this profile: the matrix, the engine, or not."""
        winners = self.winners_of(kind)
        if winners:
            return "after " + ", ".join(op.value for op in winners)
        if kind in get_profile(self.profile).extra_kinds:
            return "raised by the engine outside the matrix"
        return "-"

    def table(self) -> str:
        """The policy as a user reads it: kinds this operation meets first, each stage spelled out."""
        # A matrix cell is one partition: a wider footprint is said, it changes what compactions do.
        covers = "" if self.partitions == 1 else (
            "covers the whole table; " if self.partitions is None else f"covers {self.partitions} partitions; "
        )
        header = (
            f"policy for {self.operation.value} on {self.profile} "
            f"({covers}re-plans from a fresh snapshot: {'yes' if self.replans_from_fresh_snapshot else 'no'})"
        )
        met_kinds = set(self.met_kinds())
        plans: dict[str, str] = {}  # policy text -> its label, so repeated plans print once

        def row(kind: ConflictKind, policy: KindPolicy) -> Row:
            text = policy.describe()
            label = plans.setdefault(text, chr(ord("A") + len(plans))) if policy.action.retries_the_write else "-"
            mark = " *" if kind in self.overridden else ""
            return (kind.value + mark, policy.action.value, label, self.expected_from(kind))

        met = [row(kind, policy) for kind, policy in self.kinds if kind in met_kinds]
        others = [row(kind, policy) for kind, policy in self.kinds if kind not in met_kinds]
        why = [(kind.value, policy.reason) for kind, policy in self.kinds if kind in met_kinds]
        return policy_table(header, met, others, plans, why, bool(self.overridden))

    def __str__(self) -> str:
        return self.table()


def parse_kind(kind: ConflictKind | str) -> ConflictKind:
    if isinstance(kind, ConflictKind):
        return kind
    try:
        return ConflictKind(str(kind).strip().lower())
    except ValueError:
        known = ", ".join(k.value for k in ConflictKind)
        raise InvalidDeclarationError(f"unknown conflict kind {kind!r}; known kinds: {known}") from None

