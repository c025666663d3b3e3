"""Conflict policies derived from a profile's matrix, an operation and the conflict taxonomy.

A policy says, for every ``ConflictKind`` a write can meet, what to do when it loses: retry in
the task (fresh snapshot, backoff with jitter), reschedule the task (free the worker slot and
come back later), skip (a compaction of one partition that lost to a data write; one of several partitions or
of the whole table retries what is left), fail fast and alert, or leave
the error to Airflow's ordinary retries (it is not a conflict).

The pieces read like tenacity's: small frozen objects that each say one thing (how long to wait,
when to give up, what to do) and compose with ``+`` and ``|``; every one prints itself, so
``occflow policy PROFILE OPERATION`` shows exactly what a task will follow.

- ``waits``  - ``Wait`` / ``Stop`` strategy objects (and their plain-dict form)
- ``timing`` - ``Loss`` (what losing with a kind means) and ``TIMING`` (how long each loss waits)
- ``model``  - ``Action``, ``KindPolicy`` (stages), ``WritePolicy`` (``decide``), ``Decision``
- ``derive`` - ``RULES`` and ``derive_policy`` (with the user's overrides)
- ``render`` - the text table ``occflow policy`` prints
"""

from __future__ import annotations

from .derive import RULES, OverrideValue, Rule, Situation, derive_policy, overrides_to_dict, partitions_of
from .model import Action, Decision, KindPolicy, WritePolicy, parse_kind
from .timing import LOSS_OF_KIND, TIMING, Loss, Timing, loss_of
from .waits import (
    Stop,
    StopAfterAttempt,
    StopAfterDelay,
    StopAny,
    StopNever,
    Wait,
    WaitExponential,
    WaitFixed,
    WaitNone,
    WaitRandom,
    WaitSum,
    stop_from_dict,
    wait_from_dict,
)

__all__ = [
    "LOSS_OF_KIND",
    "RULES",
    "TIMING",
    "Action",
    "Decision",
    "KindPolicy",
    "Loss",
    "OverrideValue",
    "Rule",
    "Situation",
    "Stop",
    "StopAfterAttempt",
    "StopAfterDelay",
    "StopAny",
    "StopNever",
    "Timing",
    "Wait",
    "WaitExponential",
    "WaitFixed",
    "WaitNone",
    "WaitRandom",
    "WaitSum",
    "WritePolicy",
    "derive_policy",
    "loss_of",
    "overrides_to_dict",
    "parse_kind",
    "partitions_of",
    "stop_from_dict",
    "wait_from_dict",
]
