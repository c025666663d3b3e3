"""Admission decisions on both backends: the matrices, footprints, TTLs, release, queue order."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, get_profile
from occflow.leases import (
    AdmissionPriorities,
    AdmissionTimeout,
    Holder,
    LeaseKeeper,
    LeaseLostError,
    LeaseRequest,
    LeaseStore,
)
from occflow.leases.history import check_history


def req(table, op, profile, parts=None, **kw):
    return LeaseRequest.create(table, op, profile, parts, whole_table=parts is None, **kw)


@pytest.fixture
def store(store_url):
    s = LeaseStore.from_url(store_url, history=True)
    yield s
    s.dispose()


@pytest.mark.parametrize("profile_name", sorted(PROFILES))
def test_every_matrix_cell_decides_admission_on_the_same_partition(store, profile_name):
    """A second writer on the same partition is admitted exactly when the matrix says both succeed."""
    profile = get_profile(profile_name)
    for i, first in enumerate(profile.operations):
        for j, second in enumerate(profile.operations):
            table = f"db.t_{i}_{j}"
            held = store.try_acquire(req(table, first, profile_name, ["ds=2024-01-01"]))
            assert held is not None
            same = store.decide(req(table, second, profile_name, ["ds=2024-01-01"]))
            # the matrix: either commit order makes the later one fail, or both commit and corrupt
            # the data (delta-rs: two compactions duplicate rows)
            cells = (profile.cell(first, second), profile.cell(second, first))
            expected = not any(c.later_fails or c.effect.keeps_apart for c in cells)
            assert same.granted is expected, (first.value, second.value)
            if not expected:
                assert [b.ident for b in same.blockers] == [held.lease_id]
            # Another partition of the same table overlaps only where the engine validates an
            # operation against every file (delta-rs appends and OPTIMIZE: reads_whole_table) or
            # one of the two changes the table's metadata or protocol (one for every partition),
            # against the held lease or the second request (granted or waiting) on the first one.
            def across(a, b):
                fails = any(c.later_fails or c.effect.keeps_apart
                            for c in (profile.cell(a, b), profile.cell(b, a)))
                table_wide = {*profile.reads_whole_table, Operation.ALTER_METADATA, Operation.UPGRADE_PROTOCOL}
                return fails and (a in table_wide or b in table_wide)

            other = store.try_acquire(req(table, second, profile_name, ["ds=2024-01-02"]))
            blocked = across(first, second) or across(second, second)  # `same` holds or waits
            assert (other is None) is blocked, (first.value, second.value)
    assert check_history(store.history_events()) == []


def test_maxcompute_standard_lets_inserts_run_side_by_side(store):
    leases = [store.try_acquire(req("db.sales", "INSERT INTO", "maxcompute-standard", ["ds=1"])) for _ in range(5)]
    assert all(lease is not None for lease in leases)
    assert len(store.leases("db.sales")) == 5
    assert store.try_acquire(req("db.sales", "UPDATE", "maxcompute-standard", ["ds=1"])) is None


def test_maxcompute_transactional_admits_minor_compaction_beside_insert_into(store):
    assert store.try_acquire(req("db.events", "insert_into", "maxcompute-transactional", ["ds=1"]))
    assert store.try_acquire(req("db.events", "minor_compact", "maxcompute-transactional", ["ds=1"]))
    # ...but a major compaction conflicts with both (spec 001 rows 10 and 20).
    refused = store.decide(req("db.events", "major_compact", "maxcompute-transactional", ["ds=1"]))
    assert not refused.granted and {b.operation for b in refused.blockers} == {"insert_into", "minor_compact"}
    # Under transactional rules two INSERT INTOs on one partition conflict (spec 001 row 7).
    assert store.try_acquire(req("db.events", "insert_into", "maxcompute-transactional", ["ds=1"])) is None


def test_whole_table_lease_overlaps_every_partition_and_partial_specs_overlap(store):
    def admitted(table, op, parts):
        request = req(table, op, "maxcompute-standard", parts)
        granted = store.try_acquire(request) is not None
        store.cancel(request)  # a refused probe must not queue ahead of the next probe
        return granted

    assert admitted("db.t", "update", None)
    assert not admitted("db.t", "update", ["ds=9"])
    assert admitted("db.u", "update", ["ds=1/country=NL"])
    # ds=1 covers ds=1/country=NL, and so does country=NL; country=DE under ds=1 does not.
    assert not admitted("db.u", "delete", [{"ds": "1"}])
    assert not admitted("db.u", "delete", ["country=NL"])
    assert admitted("db.u", "delete", ["ds=1/country=DE"])
    assert admitted("db.u", "delete", ["ds=2"])


def test_asking_again_with_a_granted_request_returns_the_same_lease(store):
    request = req("db.t", "update", "maxcompute-standard", ["ds=1"])
    first = store.try_acquire(request)
    again = store.try_acquire(request)
    assert again is not None and again.lease_id == first.lease_id
    assert len(store.leases()) == 1
    store.release(first)
    assert store.try_acquire(request).lease_id != first.lease_id  # released: a new grant


def test_release_is_idempotent_and_frees_the_footprint(store):
    lease = store.try_acquire(req("db.t", "update", "maxcompute-standard", ["ds=1"]))
    waiter = req("db.t", "delete", "maxcompute-standard", ["ds=1"])
    assert store.try_acquire(waiter) is None
    assert store.release(lease) is True
    assert store.release(lease) is False
    assert store.release(lease.lease_id) is False
    assert store.release("no-such-lease") is False
    assert store.try_acquire(waiter) is not None
    kinds = [e["kind"] for e in store.history_events()]
    assert kinds == ["grant", "enqueue", "release", "grant"]


def test_expired_lease_is_reclaimed_and_a_late_heartbeat_is_refused(store):
    lease = store.try_acquire(req("db.t", "update", "maxcompute-standard", ["ds=1"], ttl=0.3))
    rival = req("db.t", "update", "maxcompute-standard", ["ds=1"])
    assert store.try_acquire(rival) is None
    time.sleep(0.45)
    assert store.try_acquire(rival) is not None
    with pytest.raises(LeaseLostError, match="expired or was released"):
        store.heartbeat(lease)
    assert [e["kind"] for e in store.history_events() if e["lease_id"] == lease.lease_id] == ["grant", "expire"]
    assert check_history(store.history_events()) == []


def test_heartbeats_keep_a_lease_alive_past_its_ttl(store):
    lease = store.try_acquire(req("db.t", "update", "maxcompute-standard", None, ttl=0.6))
    rival = req("db.t", "update", "maxcompute-standard", None)
    with LeaseKeeper(store, lease, interval=0.1) as keeper:
        time.sleep(1.5)
        assert store.try_acquire(rival) is None
        assert not keeper.lost.is_set()
    assert keeper.lease.expires > lease.expires
    assert store.release(keeper.lease)
    assert store.try_acquire(rival) is not None
    assert check_history(store.history_events()) == []


def test_waiting_requests_are_served_in_arrival_order(store):
    first = store.try_acquire(req("db.t", "insert_into", "maxcompute-standard", ["ds=1"]))
    update = req("db.t", "update", "maxcompute-standard", ["ds=1"])
    assert store.try_acquire(update) is None  # behind the live insert
    late_insert = req("db.t", "insert_into", "maxcompute-standard", ["ds=1"])
    blocked = store.decide(late_insert)
    # The insert is compatible with the live insert but must not jump the waiting update.
    assert not blocked.granted and [b.kind for b in blocked.blockers] == ["waiting"]
    # A request on another partition does not wait for them.
    assert store.try_acquire(req("db.t", "update", "maxcompute-standard", ["ds=2"]))
    store.release(first)
    update_lease = store.try_acquire(update)
    assert update_lease is not None
    assert store.try_acquire(late_insert) is None
    store.release(update_lease)
    assert store.try_acquire(late_insert) is not None
    assert store.waiting() == []


def test_data_writes_go_before_a_waiting_compaction_only_within_their_head_start(store_url):
    store = LeaseStore.from_url(store_url, priorities=AdmissionPriorities(data_write_head_start=0.5))
    insert = store.try_acquire(req("db.t", "insert_into", "maxcompute-transactional", ["ds=1"]))
    compaction = req("db.t", "major_compact", "maxcompute-transactional", ["ds=1"])
    assert store.try_acquire(compaction) is None
    store.release(insert)
    # A data write arriving just after the compaction goes first (its head start is 0.5 s)...
    early = store.try_acquire(req("db.t", "insert_into", "maxcompute-transactional", ["ds=1"]))
    assert early is not None
    assert store.try_acquire(compaction) is None
    time.sleep(0.6)
    # ...but once the compaction has waited longer than that, later data writes queue behind it.
    late = req("db.t", "insert_into", "maxcompute-transactional", ["ds=1"])
    assert [b.kind for b in store.decide(late).blockers] == ["lease", "waiting"]
    store.release(early)
    assert store.try_acquire(compaction) is not None
    assert store.try_acquire(late) is None
    store.dispose()


def test_queue_place_of_a_waiter_that_stopped_polling_expires(store):
    holder = store.try_acquire(req("db.t", "insert_into", "maxcompute-standard", ["ds=1"]))
    gone = req("db.t", "update", "maxcompute-standard", ["ds=1"], queue_ttl=0.3)
    assert store.try_acquire(gone) is None
    later = req("db.t", "insert_into", "maxcompute-standard", ["ds=1"])
    assert store.try_acquire(later) is None  # behind the update
    time.sleep(0.4)
    assert store.try_acquire(later) is not None  # the update's place lapsed
    assert [w["request_id"] for w in store.waiting()] == []
    assert "dequeue" in [e["kind"] for e in store.history_events()]
    store.release(holder)


def test_acquire_times_out_naming_the_holder_and_gives_up_its_place(store):
    store.try_acquire(req("db.t", "truncate", "maxcompute-standard", None, holder=Holder("etl", "wipe")))
    rival = req("db.t", "update", "maxcompute-standard", ["ds=1"])
    with pytest.raises(AdmissionTimeout, match=r"etl\.wipe"):
        store.acquire(rival, timeout=0.2, poll=0.05)
    assert store.waiting() == []


# An oracle for footprint overlap that shares no code with occflow: a small universe of
# concrete partitions, every combination of values over every column. A footprint is the set
# of concrete partitions it covers; two footprints overlap when those sets intersect.
UNIVERSE_COLUMNS = {"ds": ("1", "2"), "country": ("NL", "DE"), "hour": ("0", "1")}
UNIVERSE = [dict(zip(UNIVERSE_COLUMNS, values, strict=True))
            for values in itertools.product(*UNIVERSE_COLUMNS.values())]


def concrete_partitions(footprint):
    """The concrete partitions a footprint (a list of specs, or None = whole table) covers."""
    return {
        tuple(sorted(p.items()))
        for p in UNIVERSE
        if footprint is None or any(all(p[c] == v for c, v in spec.items()) for spec in footprint)
    }


def random_footprint(rnd):
    if rnd.random() < 0.1:
        return None
    specs = []
    for _ in range(rnd.randint(1, 3)):
        columns = rnd.sample(sorted(UNIVERSE_COLUMNS), rnd.randint(1, len(UNIVERSE_COLUMNS)))
        specs.append({c: rnd.choice(UNIVERSE_COLUMNS[c]) for c in columns})
    return specs


def test_merge_is_refused_exactly_when_a_held_merge_covers_one_of_its_concrete_partitions(store):
    # The reported case: ds=1 held; a MERGE on country=NL/ds=1 and ds=2 (two column sets) was granted.
    assert store.try_acquire(req("db.issue", "merge", "iceberg-serializable", ["ds=1"]))
    assert not store.decide(req("db.issue", "merge", "iceberg-serializable", ["country=NL/ds=1", "ds=2"])).granted
    rnd = random.Random(20240101)
    for i in range(150):
        held, asked = random_footprint(rnd), random_footprint(rnd)
        table = f"db.random_{i}"
        assert store.try_acquire(req(table, "merge", "iceberg-serializable", held)) is not None
        overlap = bool(concrete_partitions(held) & concrete_partitions(asked))
        decided = store.decide(req(table, "merge", "iceberg-serializable", asked))
        assert decided.granted is not overlap, (held, asked)
