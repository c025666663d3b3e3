"""Derivation: which ``KindPolicy`` every kind of an operation gets on a profile.

Data-driven: ``timing.LOSS_OF_KIND`` says what losing with a kind means, ``timing.TIMING`` how
long each loss waits and when it gives up, ``RULES`` (first match wins) which action follows,
and the profile's matrix says which earlier operations can make this operation lose with which
kind. A user's overrides are checked against the rules that are not negotiable.

A matrix cell describes two jobs on one partition (or one non-partitioned table). What follows a
lost compaction also depends on how many partitions the compaction covers (``partitions``): the
cell's winner changed the files of *its* partition, so "nothing is left to do" is true for a
compaction of that one partition only; a compaction of several partitions or of the whole table
still has the others to compact, and re-runs from a fresh snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InvalidDeclarationError
from ..kinds import ConflictKind
from ..operations import Operation
from ..profiles import Profile, get_profile
from .model import Action, KindPolicy, WritePolicy, parse_kind
from .timing import TIMING, Loss, loss_of


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
    # How many partitions the write covers; ``None``: the whole table. A cell is one partition.
    partitions: int | None = 1

    @property
    def one_partition(self) -> bool:
        """The write covers one partition: the footprint a matrix cell describes."""
        return self.partitions == 1

    @property
    def footprint_text(self) -> str:
        return "the whole table" if self.partitions is None else f"{self.partitions} partitions"

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


def _retry_what_is_left(s: Situation) -> KindPolicy:
    # The winner changed its partition's files; the compaction failed as one commit, so the other
    # partitions it covers are still uncompacted. A new attempt plans again on the fresh snapshot.
    return replace(
        _retry_then_reschedule(s),
        reason=(
            f"{s.operation.value} of {s.footprint_text} lost to {s.winners_text}, which changed the files "
            "of the partitions it wrote: the rest are still uncompacted, so the compaction re-runs from "
            "a fresh snapshot and rewrites what is left"
        ),
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


def _fail_with_residue(s: Situation) -> KindPolicy:
    return KindPolicy.fail(
        f"{s.operation.value} on {s.profile.name} lost and may have left its rows behind "
        f"({s.profile.residue_source}): a blind retry could write them twice. Check the table and the "
        "partitions this task wrote for the failed job's rows and remove them before rerunning; occflow "
        "cannot verify and clean up on this engine yet"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "not a conflict",
        lambda s: s.loss is Loss.NONE,
        lambda s: KindPolicy.default("not a conflict: the task's ordinary retries decide"),
    ),
    Rule(
        "a failed write may leave data behind",
        lambda s: s.operation in s.profile.residue_on_failure,
        _fail_with_residue,
    ),
    Rule(
        "not retry-safe",
        lambda s: s.loss is Loss.UNSAFE,
        lambda s: KindPolicy.fail(s.kind.help),
    ),
    Rule(
        "compaction of one partition lost to a writer",
        lambda s: s.operation.is_compaction and s.one_partition and s.loss in (Loss.WRITER_WON, Loss.ENGINE_BUDGET),
        lambda s: KindPolicy.skip(
            f"{s.operation.value} of one partition lost to {s.winners_text}: the files it rewrote "
            "changed, nothing is left to do; the next scheduled compaction picks up the new files"
        ),
    ),
    Rule(
        "compaction of several partitions lost to a writer",
        lambda s: s.operation.is_compaction
        and not s.one_partition
        and s.loss is Loss.WRITER_WON
        and s.in_task_retry_is_safe,
        _retry_what_is_left,
    ),
    Rule(
        "read-modify-write without fresh snapshot",
        lambda s: not s.in_task_retry_is_safe,
        _reschedule,
    ),
    Rule("engine retry budget spent", lambda s: s.loss is Loss.ENGINE_BUDGET, _reschedule),
    Rule("retry from a fresh snapshot", lambda s: True, _retry_then_reschedule),
)


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
        if situation.operation in situation.profile.residue_on_failure:
            raise InvalidDeclarationError(
                f"override for {kind.value}: {stage.action.value} is refused, a failed "
                f"{situation.operation.value} on {situation.profile.name} may leave its rows behind "
                f"({situation.profile.residue_source})"
            )
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
    partitions: int | None = 1,
) -> WritePolicy:
    """The policy for ``operation`` on ``profile``: every ``ConflictKind`` mapped by ``RULES``.

    ``replans_from_fresh_snapshot``: the job re-reads the table on each attempt (occflow's
    operators guarantee it); ``False`` keeps read-modify-write jobs from in-task retries.
    ``overrides`` maps a kind (or its name) to a ``KindPolicy``, an action name or a dict.
    ``partitions``: how many partitions the write covers (``None``: the whole table); the
    default, one, is the footprint of a matrix cell (``partitions_of`` counts a declaration's).
    """
    if partitions is not None and (isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1):
        raise InvalidDeclarationError(
            f"partitions must be a number of partitions >= 1, or None for the whole table; got {partitions!r}"
        )
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
            partitions=partitions,
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
        partitions=partitions,
    )


def partitions_of(specs: Sequence[Mapping[str, Any]] | None) -> int | None:
    """How many partitions a declaration's ``partitions`` cover, for ``derive_policy``:
    ``None`` (or none listed) is the whole table."""
    return len(specs) if specs else None


def _winners(profile: Profile, operation: Operation) -> dict[ConflictKind, tuple[Operation, ...]]:
    """For each kind: the earlier operations whose commit makes ``operation`` fail with it."""
    found: dict[ConflictKind, list[Operation]] = {}
    for cell in profile.cells:
        if cell.later is operation and cell.exception is not None:
            found.setdefault(cell.exception, []).append(cell.earlier)
    return {kind: tuple(ops) for kind, ops in found.items()}


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


