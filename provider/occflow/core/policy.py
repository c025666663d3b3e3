"""Conflict policies derived from a profile's matrix, an operation and the conflict taxonomy.

A policy says, for every ``ConflictKind`` a write can meet, what to do when it loses: retry in
the task (tenacity, fresh snapshot, backoff with jitter), reschedule the task (free the worker
slot and come back later), skip (a compaction that lost to a data write), fail fast and alert,
or leave the error to Airflow's ordinary retries (it is not a conflict).

The pieces read like tenacity's: small frozen objects that each say one thing (how long to wait,
when to give up, what to do) and compose with ``+`` and ``|``; every one prints itself, so
``occflow policy PROFILE OPERATION`` shows exactly what a task will follow.

Derivation is data-driven: ``LOSS_OF_KIND`` says what losing with a kind means, ``TIMING`` how
long each loss waits and when it gives up, ``RULES`` (first match wins) which action follows,
and the profile's matrix says which earlier operations can make this operation lose with which
kind. Pure Python: tenacity is imported only by ``tenacity_kwargs``.
"""

from __future__ import annotations

import enum
import importlib
import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from .errors import InvalidDeclarationError
from .kinds import Classification, ConflictKind
from .operations import Operation
from .profiles import Profile, get_profile

if TYPE_CHECKING:
    import tenacity

__all__ = [
    "LOSS_OF_KIND",
    "RULES",
    "TIMING",
    "Action",
    "Decision",
    "KindPolicy",
    "Loss",
    "Rule",
    "Stop",
    "StopAfterAttempt",
    "StopAfterDelay",
    "StopAny",
    "StopNever",
    "Wait",
    "WaitExponential",
    "WaitFixed",
    "WaitNone",
    "WaitRandom",
    "WaitSum",
    "WritePolicy",
    "derive_policy",
    "parse_kind",
]


class Action(str, enum.Enum):
    """What to do after a write lost (or failed for another reason)."""

    RETRY = "retry"  # run the job again inside the task (tenacity), from a fresh snapshot
    RESCHEDULE = "reschedule"  # end this try and come back later: frees the worker slot
    SKIP = "skip"  # nothing left to do (a compaction that lost to a data write)
    FAIL = "fail"  # fail fast and alert: retrying cannot help or may write twice
    DEFAULT = "default"  # not a conflict: Airflow's ordinary retries decide

    @property
    def retries_the_write(self) -> bool:
        return self in (Action.RETRY, Action.RESCHEDULE)


# --------------------------------------------------------------------------- how long to wait


class Wait:
    """How long to wait before the next attempt. Compose with ``+`` (``exponential + jitter``)."""

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay after ``attempt`` attempts (1 = the first attempt failed)."""
        raise NotImplementedError

    def bounds(self, attempt: int) -> tuple[float, float]:
        """The smallest and largest delay ``seconds(attempt)`` can return."""
        raise NotImplementedError

    def to_tenacity(self) -> Any:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __add__(self, other: Wait) -> WaitSum:
        mine = self.parts if isinstance(self, WaitSum) else (self,)
        theirs = other.parts if isinstance(other, WaitSum) else (other,)
        return WaitSum(mine + theirs)


@dataclass(frozen=True)
class WaitNone(Wait):
    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return 0.0

    def bounds(self, attempt: int) -> tuple[float, float]:
        return (0.0, 0.0)

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.wait_none()

    def to_dict(self) -> dict[str, Any]:
        return {"type": "none"}

    def __str__(self) -> str:
        return "no wait"


@dataclass(frozen=True)
class WaitFixed(Wait):
    wait: float

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return float(self.wait)

    def bounds(self, attempt: int) -> tuple[float, float]:
        return (float(self.wait), float(self.wait))

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.wait_fixed(self.wait)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "fixed", "wait": self.wait}

    def __str__(self) -> str:
        return _dur(self.wait)


@dataclass(frozen=True)
class WaitExponential(Wait):
    """``multiplier * exp_base ** (attempt - 1)`` clamped to ``[min, max]``, as tenacity's."""

    multiplier: float = 1.0
    max: float = 60.0
    exp_base: float = 2.0
    min: float = 0.0

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return self.bounds(attempt)[0]

    def bounds(self, attempt: int) -> tuple[float, float]:
        try:
            raw = self.multiplier * self.exp_base ** max(attempt - 1, 0)
        except OverflowError:
            raw = math.inf
        value = max(self.min, min(raw, self.max))
        return (value, value)

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.wait_exponential(
            multiplier=self.multiplier, max=self.max, exp_base=self.exp_base, min=self.min
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "exponential",
            "multiplier": self.multiplier,
            "max": self.max,
            "exp_base": self.exp_base,
            "min": self.min,
        }

    def __str__(self) -> str:
        return f"{_dur(self.multiplier)}*{_num(self.exp_base)}^(n-1) max {_dur(self.max)}"


@dataclass(frozen=True)
class WaitRandom(Wait):
    """Uniform jitter in ``[min, max]``: spreads writers that lost together."""

    min: float = 0.0
    max: float = 1.0

    def __post_init__(self) -> None:
        if self.max < self.min:
            raise InvalidDeclarationError(f"random wait: max {self.max} < min {self.min}")

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return (rng or random).uniform(self.min, self.max)

    def bounds(self, attempt: int) -> tuple[float, float]:
        return (float(self.min), float(self.max))

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.wait_random(min=self.min, max=self.max)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "random", "min": self.min, "max": self.max}

    def __str__(self) -> str:
        return f"jitter {_num(self.min)}-{_dur(self.max)}"


@dataclass(frozen=True)
class WaitSum(Wait):
    parts: tuple[Wait, ...]

    def seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        return sum(part.seconds(attempt, rng) for part in self.parts)

    def bounds(self, attempt: int) -> tuple[float, float]:
        lows, highs = zip(*(part.bounds(attempt) for part in self.parts), strict=True)
        return (sum(lows), sum(highs))

    def to_tenacity(self) -> Any:
        waits = [part.to_tenacity() for part in self.parts]
        total = waits[0]
        for wait in waits[1:]:
            total = total + wait
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"type": "sum", "parts": [part.to_dict() for part in self.parts]}

    def __str__(self) -> str:
        return " + ".join(str(part) for part in self.parts)


# --------------------------------------------------------------------------- when to give up


class Stop:
    """When to give up the current action. Compose with ``|`` (attempts or total time)."""

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        raise NotImplementedError

    def attempt_limit(self) -> int | None:
        """The number of attempts after which this stops, if it stops by counting attempts."""
        return None

    def to_tenacity(self) -> Any:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def __or__(self, other: Stop) -> StopAny:
        mine = self.parts if isinstance(self, StopAny) else (self,)
        theirs = other.parts if isinstance(other, StopAny) else (other,)
        return StopAny(mine + theirs)


@dataclass(frozen=True)
class StopNever(Stop):
    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return False

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.stop_never

    def to_dict(self) -> dict[str, Any]:
        return {"type": "never"}

    def __str__(self) -> str:
        return "never"


@dataclass(frozen=True)
class StopAfterAttempt(Stop):
    """Give up once ``attempts`` attempts have been made (tenacity's ``stop_after_attempt``)."""

    attempts: int

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidDeclarationError(f"stop after attempt needs attempts >= 1, got {self.attempts!r}")

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return attempt >= self.attempts

    def attempt_limit(self) -> int | None:
        return self.attempts

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.stop_after_attempt(self.attempts)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "after_attempt", "attempts": self.attempts}

    def __str__(self) -> str:
        return f"{self.attempts} tries"


@dataclass(frozen=True)
class StopAfterDelay(Stop):
    """Give up once ``seconds`` have passed since the first attempt started."""

    seconds: float

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise InvalidDeclarationError(f"stop after delay needs seconds > 0, got {self.seconds!r}")

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return elapsed_seconds >= self.seconds

    def to_tenacity(self) -> Any:
        import tenacity

        return tenacity.stop_after_delay(self.seconds)

    def to_dict(self) -> dict[str, Any]:
        return {"type": "after_delay", "seconds": self.seconds}

    def __str__(self) -> str:
        return _dur(self.seconds)


@dataclass(frozen=True)
class StopAny(Stop):
    parts: tuple[Stop, ...]

    def should_stop(self, attempt: int, elapsed_seconds: float) -> bool:
        return any(part.should_stop(attempt, elapsed_seconds) for part in self.parts)

    def attempt_limit(self) -> int | None:
        limits = [limit for part in self.parts if (limit := part.attempt_limit()) is not None]
        return min(limits) if limits else None

    def to_tenacity(self) -> Any:
        stops = [part.to_tenacity() for part in self.parts]
        total = stops[0]
        for stop in stops[1:]:
            total = total | stop
        return total

    def to_dict(self) -> dict[str, Any]:
        return {"type": "any", "parts": [part.to_dict() for part in self.parts]}

    def __str__(self) -> str:
        return " or ".join(str(part) for part in self.parts)


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
    """What a policy decided about one failure."""

    action: Action
    delay_seconds: float
    reason: str
    kind: ConflictKind = ConflictKind.NOT_A_CONFLICT
    attempt: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "delay_seconds": self.delay_seconds,
            "reason": self.reason,
            "kind": self.kind.value,
            "attempt": self.attempt,
        }


# --------------------------------------------------------------------------- derivation data


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


@dataclass(frozen=True)
class Situation:
    """Everything a rule may look at: the kind, the job, and what the matrix says about them."""

    kind: ConflictKind
    loss: Loss
    operation: Operation
    profile: Profile
    replans_from_fresh_snapshot: bool
    # Earlier operations whose commit makes this operation fail with ``kind`` (the matrix).
    winners: tuple[Operation, ...]

    @property
    def winners_text(self) -> str:
        if self.winners:
            return ", ".join(op.value for op in self.winners)
        if self.kind in self.profile.extra_kinds:
            return f"a concurrent job ({self.profile.table_format} raises it outside the matrix)"
        return f"a writer the {self.profile.name} matrix does not expect for {self.operation.value}"

    @property
    def in_task_retry_is_safe(self) -> bool:
        # A blind append writes the same rows whatever the snapshot; a read-modify-write job
        # must re-read the table, which only a job that re-plans each attempt does.
        return not self.operation.reads_table or self.replans_from_fresh_snapshot


@dataclass(frozen=True)
class Rule:
    """One derivation rule: when ``applies``, the kind gets ``build``'s policy. First match wins."""

    name: str
    applies: Callable[[Situation], bool]
    build: Callable[[Situation], KindPolicy]


def _retry_then_reschedule(s: Situation) -> KindPolicy:
    timing = TIMING[s.loss]
    return KindPolicy.retry(
        timing.retry_wait,
        timing.retry_stop,
        then=KindPolicy.reschedule(
            timing.reschedule_wait,
            timing.reschedule_stop,
            reason="still losing after in-task retries: free the worker slot while the other writers finish",
        ),
        reason=f"lost to {s.winners_text}: the job re-runs from a fresh snapshot",
    )


def _reschedule(s: Situation) -> KindPolicy:
    timing = TIMING[s.loss]
    why = (
        f"{s.operation.value} reads the table and does not re-plan from a fresh snapshot in the task: "
        "a new try re-plans"
        if not s.in_task_retry_is_safe
        else "the engine already spent its commit retries: come back when the table is quieter"
    )
    return KindPolicy.reschedule(timing.reschedule_wait, timing.reschedule_stop, reason=why)


RULES: tuple[Rule, ...] = (
    Rule(
        "not a conflict",
        lambda s: s.loss is Loss.NONE,
        lambda s: KindPolicy.default("not a conflict: the task's ordinary retries decide"),
    ),
    Rule(
        "not retry-safe",
        lambda s: s.loss is Loss.UNSAFE,
        lambda s: KindPolicy.fail(s.kind.help),
    ),
    Rule(
        "compaction lost to a writer",
        lambda s: s.operation.is_compaction and s.loss in (Loss.WRITER_WON, Loss.ENGINE_BUDGET),
        lambda s: KindPolicy.skip(
            f"{s.operation.value} lost to {s.winners_text}: the files it rewrote changed, nothing "
            "is left to do; the next scheduled compaction picks up the new files"
        ),
    ),
    Rule(
        "read-modify-write without fresh snapshot",
        lambda s: not s.in_task_retry_is_safe,
        _reschedule,
    ),
    Rule("engine retry budget spent", lambda s: s.loss is Loss.ENGINE_BUDGET, _reschedule),
    Rule("retry from a fresh snapshot", lambda s: True, _retry_then_reschedule),
)


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
            return Decision(Action.FAIL, 0.0, f"{kind.value}: gave up after {attempt} attempts", kind, attempt)
        delay = stage.wait.seconds(index, rng) if stage.action.retries_the_write else 0.0
        reason = f"{kind.value}: {stage.reason or policy.reason}"
        return Decision(stage.action, round(delay, 3), reason, kind, attempt)

    # ----- in-task retries with tenacity

    def tenacity_kwargs(
        self,
        classify: Callable[[BaseException], Classification] | None = None,
        before_sleep: Callable[[tenacity.RetryCallState], None] | None = None,
    ) -> dict[str, Any]:
        """Arguments for ``tenacity.Retrying``: retry while the classified kind says ``RETRY``.

        Each kind keeps its own wait and stop (built from the same objects, ``to_tenacity``);
        ``reraise=True`` so the caller sees the last error and asks ``decide`` what follows
        (reschedule, skip, fail).
        """
        classify_fn = classify or _default_classify
        per_kind = {kind: stage for kind, stage in self.kinds if stage.action is Action.RETRY}
        waits = {kind: stage.wait.to_tenacity() for kind, stage in per_kind.items()}
        stops = {kind: stage.stop.to_tenacity() for kind, stage in per_kind.items()}

        def kind_of(state: tenacity.RetryCallState) -> ConflictKind | None:
            outcome = state.outcome
            if outcome is None or not outcome.failed:
                return None
            error = outcome.exception()
            if error is None:
                return None
            return classify_fn(error).kind

        def retry(state: tenacity.RetryCallState) -> bool:
            return kind_of(state) in per_kind

        def stop(state: tenacity.RetryCallState) -> bool:
            kind = kind_of(state)
            return kind not in stops or bool(stops[kind](state))

        def wait(state: tenacity.RetryCallState) -> float:
            kind = kind_of(state)
            return float(waits[kind](state)) if kind in waits else 0.0

        kwargs: dict[str, Any] = {"retry": retry, "stop": stop, "wait": wait, "reraise": True}
        if before_sleep is not None:
            kwargs["before_sleep"] = before_sleep
        return kwargs

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
        header = (
            f"policy for {self.operation.value} on {self.profile} "
            f"(re-plans from a fresh snapshot: {'yes' if self.replans_from_fresh_snapshot else 'no'})"
        )
        met = set(self.met_kinds())
        ordered = [k for k, _ in self.kinds if k in met] + [k for k, _ in self.kinds if k not in met]
        plans: dict[str, str] = {}  # policy text -> its label, so repeated plans print once
        rows = [("kind", "action", "plan", "expected")]
        for kind in ordered:
            policy = self.for_kind(kind)
            text = policy.describe()
            label = plans.setdefault(text, chr(ord("A") + len(plans))) if policy.action.retries_the_write else "-"
            mark = " *" if kind in self.overridden else ""
            rows.append((kind.value + mark, policy.action.value, label, self.expected_from(kind)))
            if kind in met and (len(ordered) > len(met)) and kind is [k for k in ordered if k in met][-1]:
                rows.append(("", "", "", ""))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [header, ""]
        lines += ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
        lines += ["", "plans:"]
        lines += [f"  {label}: {text}" for text, label in plans.items()]
        lines += ["", "why:"]
        lines += [f"  {kind.value}: {self.for_kind(kind).reason}" for kind in ordered if kind in met]
        lines.append("  (other kinds: not expected here, handled by the same rules if an engine raises them)")
        if self.overridden:
            lines += ["", "* overridden by the user"]
        return "\n".join(line.rstrip() for line in lines)

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


OverrideValue = KindPolicy | Action | str | Mapping[str, Any]


def _override(kind: ConflictKind, value: OverrideValue, derived: KindPolicy, situation: Situation) -> KindPolicy:
    """A user's override for ``kind``, checked against the rules that are not negotiable."""
    if isinstance(value, KindPolicy):
        policy = value
    elif isinstance(value, Mapping):
        policy = KindPolicy.from_dict(value)
    else:
        try:
            action = Action(value)
        except ValueError:
            known = ", ".join(a.value for a in Action)
            raise InvalidDeclarationError(
                f"override for {kind.value}: unknown action {value!r}; known actions: {known}"
            ) from None
        policy = _policy_for_action(action, kind, situation, derived)
    for stage in policy.stages():
        if not stage.action.retries_the_write:
            continue
        if not kind.retry_safe:
            raise InvalidDeclarationError(
                f"override for {kind.value}: {stage.action.value} is refused, the kind is not retry-safe "
                f"({kind.help})"
            )
        if stage.action is Action.RETRY and not situation.in_task_retry_is_safe:
            raise InvalidDeclarationError(
                f"override for {kind.value}: in-task retry is refused for {situation.operation.value} "
                "because the job does not re-plan from a fresh snapshot; use reschedule or fail"
            )
    return replace(policy, reason=policy.reason or f"overridden by the user: {policy.action.value}")


def _policy_for_action(action: Action, kind: ConflictKind, s: Situation, derived: KindPolicy) -> KindPolicy:
    """A bare action as an override: keep the derived timing where the action is the same."""
    if action is derived.action:
        return replace(derived, reason=f"overridden by the user: {action.value}")
    timing = TIMING.get(loss_of(kind), TIMING[Loss.WRITER_WON])
    reason = f"overridden by the user: {action.value}"
    if action is Action.RETRY:
        return replace(_retry_then_reschedule(replace(s, loss=loss_of(kind) if kind.retry_safe else Loss.WRITER_WON)), reason=reason)
    if action is Action.RESCHEDULE:
        return KindPolicy.reschedule(timing.reschedule_wait, timing.reschedule_stop, reason=reason)
    if action is Action.SKIP:
        return KindPolicy.skip(reason)
    if action is Action.FAIL:
        return KindPolicy.fail(reason)
    return KindPolicy.default(reason)


def derive_policy(
    profile: str | Profile,
    operation: str | Operation,
    overrides: Mapping[ConflictKind | str, OverrideValue] | None = None,
    replans_from_fresh_snapshot: bool = True,
) -> WritePolicy:
    """The policy for ``operation`` on ``profile``: every ``ConflictKind`` mapped by ``RULES``.

    ``replans_from_fresh_snapshot``: the job re-reads the table on each attempt (occflow's
    operators guarantee it); ``False`` keeps read-modify-write jobs from in-task retries.
    ``overrides`` maps a kind (or its name) to a ``KindPolicy``, an action name or a dict.
    """
    prof = get_profile(profile)
    op = prof.operation(operation)
    winners = _winners(prof, op)
    kinds: list[tuple[ConflictKind, KindPolicy]] = []
    wanted = {parse_kind(k): v for k, v in (overrides or {}).items()}
    for kind in ConflictKind:
        situation = Situation(
            kind=kind,
            loss=loss_of(kind),
            operation=op,
            profile=prof,
            replans_from_fresh_snapshot=replans_from_fresh_snapshot,
            winners=winners.get(kind, ()),
        )
        rule = next(r for r in RULES if r.applies(situation))
        policy = rule.build(situation)
        if kind in wanted:
            policy = _override(kind, wanted[kind], policy, situation)
        kinds.append((kind, policy))
    return WritePolicy(
        profile=prof.name,
        operation=op,
        replans_from_fresh_snapshot=replans_from_fresh_snapshot,
        kinds=tuple(kinds),
        overridden=frozenset(wanted),
        winners=tuple((kind, winners.get(kind, ())) for kind in ConflictKind),
    )


def _winners(profile: Profile, operation: Operation) -> dict[ConflictKind, tuple[Operation, ...]]:
    """For each kind: the earlier operations whose commit makes ``operation`` fail with it."""
    found: dict[ConflictKind, list[Operation]] = {}
    for cell in profile.cells:
        if cell.later is operation and cell.exception is not None:
            found.setdefault(cell.exception, []).append(cell.earlier)
    return {kind: tuple(ops) for kind, ops in found.items()}


def wait_from_dict(data: Mapping[str, Any]) -> Wait:
    kind = data.get("type")
    if kind == "none":
        return WaitNone()
    if kind == "fixed":
        return WaitFixed(float(data["wait"]))
    if kind == "exponential":
        return WaitExponential(
            multiplier=float(data.get("multiplier", 1.0)),
            max=float(data.get("max", 60.0)),
            exp_base=float(data.get("exp_base", 2.0)),
            min=float(data.get("min", 0.0)),
        )
    if kind == "random":
        return WaitRandom(float(data.get("min", 0.0)), float(data.get("max", 1.0)))
    if kind == "sum":
        return WaitSum(tuple(wait_from_dict(part) for part in data["parts"]))
    raise InvalidDeclarationError(
        f"unknown wait {dict(data)!r}; types: none, fixed, exponential, random, sum"
    )


def stop_from_dict(data: Mapping[str, Any]) -> Stop:
    kind = data.get("type")
    if kind == "never":
        return StopNever()
    if kind == "after_attempt":
        return StopAfterAttempt(int(data["attempts"]))
    if kind == "after_delay":
        return StopAfterDelay(float(data["seconds"]))
    if kind == "any":
        return StopAny(tuple(stop_from_dict(part) for part in data["parts"]))
    raise InvalidDeclarationError(
        f"unknown stop {dict(data)!r}; types: never, after_attempt, after_delay, any"
    )


def overrides_to_dict(overrides: Mapping[ConflictKind | str, OverrideValue] | None) -> dict[str, Any]:
    """Overrides as plain JSON (for serialised DAGs); ``derive_policy`` accepts the result."""
    result: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        kind = parse_kind(key)
        if isinstance(value, KindPolicy):
            result[kind.value] = value.to_dict()
        elif isinstance(value, Action):
            result[kind.value] = value.value
        elif isinstance(value, Mapping):
            result[kind.value] = dict(value)
        else:
            result[kind.value] = str(value)
    return result


def _default_classify(error: BaseException) -> Classification:
    # Imported late: building or printing a policy must not need the classifier's patterns.
    module = importlib.import_module("occflow.core.classify")
    return cast(Classification, module.classify(error))


def _num(value: float) -> str:
    return f"{value:g}"


def _dur(seconds: float) -> str:
    """``90`` -> ``90s``, ``600`` -> ``10m``, ``14400`` -> ``4h``: short enough for one table row."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{_num(seconds / size)}{unit}"
    return f"{_num(seconds)}s"


def kinds_of(policy: WritePolicy, action: Action) -> Iterable[ConflictKind]:
    """The kinds whose first stage is ``action`` (e.g. every kind that is retried in the task)."""
    return (kind for kind, stage in policy.kinds if stage.action is action)
