"""A ``Decision`` carries its reason's parts as fields (issue 32 item 3): the policy's words
(``because``), the kind's generic help it may end with (``advice``), and the printed ``reason``
made of them. The oracle is the string form the flow cut apart before the fields existed: the
``"<kind>: "`` prefix stripped off the reason, and the kind's help cut off its end.

Every profile, every operation it knows, every kind, over enough attempts to reach each stage
(retry, reschedule, give up) and a long elapsed time: the parts agree with the old cutting."""

from __future__ import annotations

import itertools

import pytest

from occflow.core.kinds import Classification, ConflictKind
from occflow.core.policy import Action, Decision, derive_policy
from occflow.core.profiles import get_profile, profile_names


def _old_why(decision: Decision) -> str:
    """``operators.messages.why`` before the fields: the reason with its ``kind:`` prefix cut off."""
    prefix = f"{decision.kind.value}: "
    return decision.reason[len(prefix):] if decision.reason.startswith(prefix) else decision.reason


def _decisions() -> list[Decision]:
    out = []
    for name in profile_names():
        for operation in get_profile(name).operations:
            policy = derive_policy(name, operation)
            for kind, attempt, elapsed in itertools.product(ConflictKind, (1, 2, 4, 7, 12, 40), (0.0, 86400.0)):
                out.append(policy.decide(Classification(kind, "delta-rs", "evidence"), attempt, elapsed))
    return out


DECISIONS = _decisions()


def test_enough_decisions_of_every_action_are_checked() -> None:
    actions = {d.action for d in DECISIONS}
    assert actions == {Action.RETRY, Action.RESCHEDULE, Action.SKIP, Action.FAIL, Action.DEFAULT}, actions
    assert sum(bool(d.advice) for d in DECISIONS) > 50  # fail-fast on kinds that are not retry-safe


def test_a_policys_decision_reads_as_before_and_its_parts_are_what_was_cut_off() -> None:
    for d in DECISIONS:
        assert d.reason == f"{d.kind.value}: {d.because}{d.advice}", d
        assert d.why == _old_why(d), d
        # The advice is exactly the part the flow used to cut off a fail-fast reason's end.
        old_fitted = d.action is Action.FAIL and d.reason.endswith(d.kind.help)
        assert bool(d.advice) is old_fitted, d
        assert d.advice in ("", d.kind.help), d


def test_rewording_the_advice_changes_only_the_advice() -> None:
    fail = next(d for d in DECISIONS if d.advice)
    worded = fail.with_advice("Ask the table's owner.")
    old = fail.reason[: -len(fail.kind.help)] + "Ask the table's owner."  # the old slicing
    assert worded.reason == old and worded.why == _old_why(worded) == "Ask the table's owner."
    assert (worded.action, worded.kind, worded.attempt, worded.delay_seconds) == (
        fail.action, fail.kind, fail.attempt, fail.delay_seconds)
    plain = next(d for d in DECISIONS if d.action is Action.FAIL and not d.advice)
    assert plain.with_advice("Ask the table's owner.") is plain  # nothing of the kind's help to replace


@pytest.mark.parametrize("reason", ["retries exhausted", "airflow retry", "concurrent_append: from a report"])
def test_a_decision_made_without_a_policy_is_its_reason(reason: str) -> None:
    # The simulator's baselines and metrics build decisions from a reason alone.
    d = Decision(Action.FAIL, 0.0, reason, ConflictKind.CONCURRENT_APPEND, 3)
    assert d.because == d.why == reason and d.advice == ""
    assert d.with_advice("other words") is d
    assert d.to_dict() == {"action": "fail", "delay_seconds": 0.0, "reason": reason,
                           "kind": "concurrent_append", "attempt": 3}
