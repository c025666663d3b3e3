"""delta-rs appends and OPTIMIZE read every file: admission keeps them apart from removals in
*other* partitions too (``Profile.reads_whole_table``, ``footprint_reach``).

The oracle is real ``deltalake``: every ordered pair of the jobs below is raced on a real table
(both start from one snapshot, the earlier commits first). Whenever the later one fails, the
real lease store must refuse to let the two hold leases together, in either request order;
and where the store grants a pair together, delta-rs committed both in both orders.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from occflow.leases import LeaseRequest, LeaseStore

pa = pytest.importorskip("pyarrow")
deltalake = pytest.importorskip("deltalake")

Job = tuple[str, list[str] | None, Callable[[Any], object]]


def _rows(part: str, value: int) -> Any:
    return pa.table({"part": [part], "v": [value]})


JOBS: dict[str, Job] = {
    "append p": ("insert_into", ["part=p"], lambda t: deltalake.write_deltalake(t, _rows("p", 7), mode="append")),
    "append q": ("insert_into", ["part=q"], lambda t: deltalake.write_deltalake(t, _rows("q", 8), mode="append")),
    "update p": ("update", ["part=p"], lambda t: t.update(updates={"v": "v + 1"}, predicate="part = 'p'")),
    "delete q": ("delete", ["part=q"], lambda t: t.delete("part = 'q'")),
    "optimize q": ("optimize", ["part=q"], lambda t: t.optimize.compact(partition_filters=[("part", "=", "q")])),
}


def _later_fails(tmp: Path, earlier: Job, later: Job) -> bool:
    uri = str(tmp)
    for part, value in [("p", 1), ("q", 2), ("p", 3), ("q", 4)]:  # two files per partition
        deltalake.write_deltalake(uri, _rows(part, value), mode="append", partition_by=["part"])
    first, second = deltalake.DeltaTable(uri), deltalake.DeltaTable(uri)
    earlier[2](first)
    try:
        later[2](second)
    except deltalake.exceptions.CommitFailedError:
        return True
    return False


def _granted_together(url: str, a: Job, b: Job) -> bool:
    store = LeaseStore.from_url(url)
    try:
        first = store.decide(LeaseRequest.create("db.events", a[0], "delta-rs", partitions=a[1], ttl=60))
        assert first.lease is not None
        request = LeaseRequest.create("db.events", b[0], "delta-rs", partitions=b[1], ttl=60)
        second = store.decide(request)
        together = second.lease is not None
        store.release(first.lease)
        if second.lease is not None:
            store.release(second.lease)
        else:
            store.cancel(request)  # its place in the queue
        assert store.leases("db.events") == [] and store.waiting("db.events") == []
        return together
    finally:
        store.dispose()


PAIRS = list(itertools.combinations(JOBS, 2))


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{a} + {b}" for a, b in PAIRS])
def test_admission_refuses_every_pair_real_delta_rs_fails(tmp_path: Path, sqlite_url: str, a: str, b: str) -> None:
    real = {
        "a then b": _later_fails(tmp_path / "ab", JOBS[a], JOBS[b]),
        "b then a": _later_fails(tmp_path / "ba", JOBS[b], JOBS[a]),
    }
    grants = {
        "a first": _granted_together(sqlite_url, JOBS[a], JOBS[b]),
        "b first": _granted_together(sqlite_url, JOBS[b], JOBS[a]),
    }
    assert grants["a first"] == grants["b first"], f"admission is not symmetric for {a} / {b}: {grants}"
    if any(real.values()):
        assert not grants["a first"], f"real delta-rs fails {a} / {b} ({real}) but admission runs them together"


def test_the_cross_partition_case_is_really_exercised(tmp_path: Path, sqlite_url: str) -> None:
    """The pair issue 13 is about: an UPDATE of p makes a concurrent append to q fail on real
    delta-rs, and two appends to different partitions still run together."""
    assert _later_fails(tmp_path / "x", JOBS["update p"], JOBS["append q"])
    assert not _granted_together(sqlite_url, JOBS["update p"], JOBS["append q"])
    assert _granted_together(sqlite_url, JOBS["append p"], JOBS["append q"])
