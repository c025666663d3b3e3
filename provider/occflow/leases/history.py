"""An invariant checker over the store's recorded history (``LeaseStore(history=True)``).

It replays events in decision order (``seq``; decisions on one table are serial under the
table's lock) and proves, independently of the store's own bookkeeping:
- no grant was made while a conflicting lease on an overlapping footprint was live (live =
  granted, not yet released or reclaimed, and not past its expiry at the grant's time), unless
  the grant awaits that lease, or holds it (its commit waits for the grant's: order-aware
  admission), and the matrix cells, read here, say that order commits cleanly while the other
  one does not;
- no gate was passed (``pass``) while a lease it awaits was live;
- the store's clock never ran backwards on a table;
- no heartbeat revived a lease that had already expired;
- fencing tokens strictly increase, grant after grant, on each table;
and tells which requests were never served.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.admission_rule import Claim
from ..core.profiles import get_profile

#: The events that end a lease: let go, reclaimed after it lapsed, and (in histories recorded
#: before a retry had to wait for its earlier try's lease to lapse) taken over by a later try.
ENDS = ("release", "expire", "takeover")


@dataclass(frozen=True)
class Violation:
    seq: int
    message: str


def _keys(text: str | None) -> frozenset[str] | None:
    return None if text is None else frozenset(json.loads(text))


def _gated_cleanly(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> bool:
    """``later`` may commit after ``earlier`` (one profile; that order clean, the other not)."""
    if earlier["profile"] != later["profile"]:
        return False
    profile = get_profile(later["profile"])

    def clean(first: str, then: str) -> bool:
        return profile.commit_is_clean(first, then)

    return clean(earlier["operation"], later["operation"]) and not clean(later["operation"], earlier["operation"])


def _awaits(event: Mapping[str, Any], field: str = "awaits") -> list[str]:
    return [str(lease_id) for lease_id in json.loads(event.get(field) or "[]")]


def _check_pass(e: Mapping[str, Any], live: Mapping[str, Mapping[str, Any]]) -> Violation | None:
    """A gate passed while a lease it awaits was live (and not past its expiry)."""
    still = [lid for lid in _awaits(e) if lid in live and live[lid]["expires_at"] > e["at"]]
    if not still:
        return None
    return Violation(e["seq"], f"lease {e['lease_id'][:8]} passed its gate while lease {still[0][:8]} it awaits was live")


def check_history(events: Iterable[Mapping[str, Any]]) -> list[Violation]:
    violations: list[Violation] = []
    live: dict[str, dict[str, Any]] = {}
    last_at: dict[str, float] = {}
    last_fence: dict[str, int] = {}
    for e in sorted(events, key=lambda ev: ev["seq"]):
        table, at, kind = e["table_name"], e["at"], e["kind"]
        if at < last_at.get(table, float("-inf")):
            violations.append(Violation(e["seq"], f"clock ran backwards on {table}: {at} after {last_at[table]}"))
        last_at[table] = max(at, last_at.get(table, at))
        if kind == "grant" and e.get("fence"):
            if e["fence"] <= last_fence.get(table, 0):
                violations.append(Violation(e["seq"], f"fence {e['fence']} on {table} after {last_fence[table]}"))
            last_fence[table] = max(e["fence"], last_fence.get(table, 0))
        if kind == "grant":
            mine = _keys(e["partitions"])
            for lease_id, other in list(live.items()):
                if other["expires_at"] <= at:
                    del live[lease_id]  # lapsed: the store may grant over it
                    continue
                if other["table_name"] != table:
                    continue
                if lease_id in _awaits(e) and _gated_cleanly(other, e):
                    continue  # order-aware: its commit waits at its gate until this lease ends
                if lease_id in _awaits(e, "holds") and _gated_cleanly(e, other):
                    continue  # order-aware: this lease's commit waits for the grant's to end
                if Claim.of(other["profile"], other["operation"], other["keys"]).blocks(
                    Claim.of(e["profile"], e["operation"], mine)
                ):
                    violations.append(
                        Violation(
                            e["seq"],
                            f"{e['operation']} {sorted(mine or ['*'])} granted on {table} while "
                            f"{other['operation']} {sorted(other['keys'] or ['*'])} (lease {lease_id[:8]}, "
                            f"granted at seq {other['seq']}) was live",
                        )
                    )
            live[e["lease_id"]] = {**e, "keys": mine}
        elif kind in ENDS:
            live.pop(e["lease_id"], None)
        elif kind == "pass" and (found := _check_pass(e, live)) is not None:
            violations.append(found)
        elif kind == "heartbeat":
            held = live.get(e["lease_id"])
            if held is None or held["expires_at"] <= at:
                violations.append(Violation(e["seq"], f"heartbeat on lease {e['lease_id'][:8]} that was not live"))
            else:
                held["expires_at"] = e["expires_at"]
    return violations


def unreleased(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """Leases granted and neither released nor reclaimed."""
    open_: set[str] = set()
    for e in sorted(events, key=lambda ev: ev["seq"]):
        if e["kind"] == "grant":
            open_.add(e["lease_id"])
        elif e["kind"] in ENDS:
            open_.discard(e["lease_id"])
    return open_


# ----------------------------------------------------------------------------- durations (issue 38)

#: How many past leases of one task (or one operation) an estimate reads: the latest ones.
DURATION_SAMPLES = 20


@dataclass(frozen=True)
class PastDurations:
    """How long past leases on a table were held, grant to release, from its recorded history:
    the duration-aware rule's estimate of a write (``core.admission_rule.Durations``) is the
    median of the same task's latest leases with the same operation, else of the operation's,
    else unknown (the rule's default). Expired leases are left out: a lapse says how long a
    dead holder was waited for, not how long the write takes."""

    by_task: Mapping[tuple[str, str, str], tuple[float, ...]]
    by_operation: Mapping[str, tuple[float, ...]]

    @classmethod
    def of(cls, events: Iterable[Mapping[str, Any]]) -> PastDurations:
        granted: dict[str, Mapping[str, Any]] = {}
        by_task: dict[tuple[str, str, str], list[float]] = {}
        by_operation: dict[str, list[float]] = {}
        for e in sorted(events, key=lambda ev: ev["seq"]):
            if e["kind"] == "grant" and e.get("lease_id"):
                granted[e["lease_id"]] = e
            elif e["kind"] == "release" and (start := granted.pop(e.get("lease_id") or "", None)) is not None:
                seconds = e["at"] - start["at"]
                key = (start.get("dag_id") or "", start.get("task_id") or "", start["operation"])
                if key[0] and key[1]:
                    by_task.setdefault(key, []).append(seconds)
                by_operation.setdefault(start["operation"], []).append(seconds)
        return cls({k: tuple(v[-DURATION_SAMPLES:]) for k, v in by_task.items()},
                   {k: tuple(v[-DURATION_SAMPLES:]) for k, v in by_operation.items()})

    def estimate(self, dag_id: str | None, task_id: str | None, operation: str) -> float | None:
        """The median of the task's past leases of ``operation``, else of the operation's, else None."""
        found = self.by_task.get((dag_id or "", task_id or "", operation)) or self.by_operation.get(operation)
        return statistics.median(found) if found else None
