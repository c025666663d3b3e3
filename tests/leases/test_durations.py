"""Each write's estimate for the duration-aware rule (issue 38), read from a real store's history:
the median of the same task's past leases (grant to release) with the same operation, else the
operation's, else unknown. The oracle is the wall clock measured around each lease."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest

from occflow.core.admission_rule import Durations
from occflow.leases import LeaseRequest, LeaseStore
from occflow.leases.model import Holder

TABLE = "db.durations"
PROFILE = "delta-write-serializable"


def _hold(store: LeaseStore, operation: str, task: str, seconds: float, day: str) -> float:
    request = LeaseRequest.create(TABLE, operation, PROFILE, [f"ds={day}"], holder=Holder("dag", task, f"run-{day}"))
    started = time.perf_counter()
    lease = store.decide(request).lease
    assert lease is not None
    time.sleep(seconds)
    store.release(lease)
    return time.perf_counter() - started


def _estimates(store: LeaseStore, request: LeaseRequest) -> dict[str, float]:
    with store._locked(TABLE) as tx:  # noqa: SLF001 - the decision's transaction, as ``_decide`` opens it
        live, waiting = tx.live_and_waiting(request)
        return dict(tx.estimates(request, live, waiting, Durations()).seconds)


def test_a_writes_estimate_is_the_median_of_its_tasks_past_leases_then_its_operations(tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}", history=True)
    merges = [_hold(store, "merge", "load", s, f"2024-01-0{i + 1}") for i, s in enumerate((0.05, 0.25, 0.12))]
    other = _hold(store, "merge", "backfill", 0.4, "2024-02-01")
    _hold(store, "delete", "load", 0.01, "2024-03-01")  # another operation of the task: not a merge's estimate
    same_task = LeaseRequest.create(TABLE, "merge", PROFILE, ["ds=2024-04-01"], holder=Holder("dag", "load", "r"))
    new_task = LeaseRequest.create(TABLE, "merge", PROFILE, ["ds=2024-04-02"], holder=Holder("dag", "fresh", "r"))
    never = LeaseRequest.create(TABLE, "optimize", PROFILE, ["ds=2024-04-03"], holder=Holder("dag", "load", "r"))
    found = _estimates(store, same_task)
    # Grant to release sits inside the measured span, which adds only the calls around it.
    assert statistics.median(merges) - 0.05 <= found[same_task.request_id] <= statistics.median(merges)
    found = _estimates(store, new_task)
    assert statistics.median([*merges, other]) - 0.05 <= found[new_task.request_id] <= statistics.median([*merges, other])
    assert never.request_id not in _estimates(store, never)  # unknown: the rule's default


def test_without_a_history_every_estimate_is_unknown(tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    _hold(store, "merge", "load", 0.01, "2024-01-01")
    request = LeaseRequest.create(TABLE, "merge", PROFILE, ["ds=2024-01-02"], holder=Holder("dag", "load", "r"))
    assert _estimates(store, request) == {}


@pytest.mark.parametrize("events", [
    [{"seq": 1, "at": 0.0, "kind": "grant", "lease_id": "a", "operation": "merge", "dag_id": "d", "task_id": "t"},
     {"seq": 2, "at": 9.0, "kind": "expire", "lease_id": "a", "operation": "merge"}],
])
def test_a_lapsed_lease_says_nothing_about_how_long_a_write_takes(events: list[dict[str, object]]) -> None:
    from occflow.leases.history import PastDurations

    assert PastDurations.of(events).estimate("d", "t", "merge") is None
