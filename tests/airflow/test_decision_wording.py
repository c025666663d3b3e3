"""``fitted_to_engine`` and ``why`` read a decision's fields (issue 32 item 3); the text they give
is the text the string slicing they replaced gave, for every engine family, every profile,
operation and kind (the old helpers, copied below, are the oracle)."""

from __future__ import annotations

import itertools
from dataclasses import replace

from occflow.core.advice import kind_help
from occflow.core.engines import committers
from occflow.core.kinds import Classification, ConflictKind
from occflow.core.policy import Action, Decision, derive_policy
from occflow.core.profiles import get_profile, profile_names
from occflow.operators.messages import fitted_to_engine, why


def _old_fitted(decision: Decision, engine: str) -> Decision:
    generic = decision.kind.help
    if decision.action is Action.FAIL and decision.reason.endswith(generic):
        return replace(decision, reason=decision.reason[: -len(generic)] + kind_help(decision.kind, engine))
    return decision


def _old_why(decision: Decision) -> str:
    prefix = f"{decision.kind.value}: "
    return decision.reason[len(prefix):] if decision.reason.startswith(prefix) else decision.reason


def test_the_fields_give_the_text_the_slicing_gave_for_every_engine() -> None:
    engines = sorted({c.name for c in committers()}) + ["spark-submit", "unknown"]
    reworded = 0
    for name in profile_names():
        for operation in get_profile(name).operations:
            policy = derive_policy(name, operation)
            for kind, attempt in itertools.product(ConflictKind, (1, 5, 40)):
                decision = policy.decide(Classification(kind, "x", "evidence"), attempt)
                for engine in engines:
                    fitted = fitted_to_engine(decision, engine)
                    assert fitted.reason == _old_fitted(decision, engine).reason, (name, operation, kind, engine)
                    assert why(fitted) == _old_why(fitted), fitted
                    reworded += fitted.reason != decision.reason
    assert reworded > 0  # some engine's wording really replaced the generic help


def test_delta_rs_protocol_change_is_worded_for_delta_rs() -> None:
    decision = derive_policy("delta-write-serializable", "delete").decide(
        Classification(ConflictKind.PROTOCOL_CHANGED, "delta-rs", "evidence"), 1)
    fitted = fitted_to_engine(decision, "delta-rs")
    assert decision.action is Action.FAIL and ConflictKind.PROTOCOL_CHANGED.help in decision.reason
    assert ConflictKind.PROTOCOL_CHANGED.help not in fitted.reason
    assert "this is not an outdated library" in why(fitted) and fitted.reason.startswith("protocol_changed: ")
