"""A gate the store recorded is held whatever the worker's own ``OCCFLOW_ORDER_AWARE_ADMISSION``,
and a gate wait that outlasts its timeout fails naming what it waited for.

The setting only governs whether the grants a worker makes are order-aware. During a rolling
change of it, an order-aware worker may grant a newcomer ahead of a lease that a worker with the
setting off holds: that holder must still wait at its gate, or its commit goes first and the
newcomer's write fails. Real stores: SQLite, and PostgreSQL on the server the tests start.
"""

from __future__ import annotations

import threading
import time

import pytest

from occflow.leases import GateTimeout, LeaseKeeper, LeaseRequest, LeaseStore
from occflow.leases.config import ORDER_AWARE_ENV, store_options
from occflow.leases.history import check_history

TABLE = "lake.gated"


def _stores(url: str) -> tuple[LeaseStore, LeaseStore]:
    """Two workers on one store: one with the setting on (the default), one with it off."""
    on = LeaseStore.from_url(url, **{**store_options({}), "history": True})
    off = LeaseStore.from_url(url, **{**store_options({ORDER_AWARE_ENV: "false"}), "history": True})
    assert on.order_aware and not off.order_aware
    return on, off


def _alter_held_by_an_append(on: LeaseStore, off: LeaseStore):
    """A schema change granted by the worker with the setting off, then an append granted ahead
    of its commit by the order-aware worker (only append-then-schema-change is clean on
    delta-rs): the store records that the schema change's commit awaits the append."""
    alter = off.decide(LeaseRequest.create(TABLE, "alter_metadata", "delta-rs", whole_table=True, commit_gate=True))
    assert alter.lease is not None and alter.lease.awaits == frozenset()
    append = on.decide(LeaseRequest.create(TABLE, "insert_into", "delta-rs", whole_table=True, commit_gate=True))
    assert append.lease is not None, append.blockers  # granted beside the schema change
    return alter.lease, append.lease


def test_the_holder_of_a_gated_lease_waits_at_its_gate_with_the_setting_off(store_url: str) -> None:
    on, off = _stores(store_url)
    try:
        alter, append = _alter_held_by_an_append(on, off)
        held: dict[str, float] = {}
        with LeaseKeeper(off, alter) as keeper:  # the schema change's worker: setting off

            def commit() -> None:
                held["seconds"] = keeper.wait_gate(timeout=60)

            worker = threading.Thread(target=commit)
            worker.start()
            time.sleep(1.5)
            assert worker.is_alive(), "the worker with the setting off went past the gate the store recorded"
            assert [lease.lease_id for lease in off.gate(alter)] == [append.lease_id]
            on.release(append)  # the append committed and let go: the gate opens
            worker.join(timeout=30)
            assert not worker.is_alive()
            assert 1.0 <= held["seconds"] < 20, held
            assert keeper.gate_seconds == held["seconds"]
        assert off.gate(alter) == []
        events = on.history_events()
        assert [e["kind"] for e in events if e["kind"] == "pass"] == ["pass"]
        assert check_history(events) == []  # no pass while the awaited lease was live
    finally:
        on.dispose()
        off.dispose()


def test_a_gate_wait_past_its_timeout_fails_naming_the_awaited_lease_table_and_time(store_url: str) -> None:
    on, off = _stores(store_url)
    try:
        alter, append = _alter_held_by_an_append(on, off)
        with LeaseKeeper(off, alter) as keeper:
            started = time.monotonic()
            with pytest.raises(GateTimeout) as raised:
                keeper.wait_gate(timeout=1.0)
            took = time.monotonic() - started
        assert 1.0 <= took < 10, took
        error = raised.value
        assert error.awaited == (append.lease_id,)
        assert error.table == TABLE and error.lease_id == alter.lease_id
        assert error.timeout == 1.0 and error.waited >= 1.0
        message = str(error)
        assert f"lease {append.lease_id[:8]}" in message and "insert_into" in message  # the awaited lease
        assert f"lease {alter.lease_id[:8]}" in message and f"on {TABLE}" in message
        assert "gate timeout 1.0s" in message and "did not commit" in message
        # Still closed, and still the append's to open: the timeout gave nothing away.
        assert [lease.lease_id for lease in off.gate(alter)] == [append.lease_id]
    finally:
        on.dispose()
        off.dispose()
