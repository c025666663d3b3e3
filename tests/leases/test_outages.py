"""A store that fails: errors that name it, keepers and triggers that ride out an outage for a
bounded time, on real failures (a garbage SQLite file, a closed port, a PostgreSQL restart)."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.leases import (
    Holder,
    LeaseKeeper,
    LeaseLostError,
    LeaseRequest,
    LeaseStore,
    LeaseStoreError,
    LeaseStoreUnavailable,
)
from occflow.triggers.lease import ConflictFreeTrigger, LeaseAdmissionTrigger


def req(table="db.t", op="update", parts=("ds=1",), **kw):
    return LeaseRequest.create(table, op, "maxcompute-standard", list(parts), **kw)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def garbage_sqlite(tmp_path) -> str:
    path = tmp_path / "garbage.db"
    path.write_bytes(b"not a database, just bytes\n" * 200)
    return f"sqlite:///{path}"


async def first_event(trigger):
    async for event in trigger.run():
        return event.payload
    return None


def test_a_garbage_sqlite_file_is_a_store_error_from_every_method_naming_the_file(tmp_path, sqlite_url):
    url = garbage_sqlite(tmp_path)
    with pytest.raises(LeaseStoreUnavailable, match=rf"{tmp_path}/garbage.db failed in create_schema: "
                                                    "DatabaseError: file is not a database"):
        LeaseStore.from_url(url)
    good = LeaseStore.from_url(sqlite_url)
    lease = good.try_acquire(req())
    store = LeaseStore.from_url(url, create=False)
    calls = {
        "decide": lambda: store.decide(req()), "try_acquire": lambda: store.try_acquire(req()),
        "heartbeat": lambda: store.heartbeat(lease), "confirm": lambda: store.confirm(lease),
        "release": lambda: store.release(lease), "cancel": lambda: store.cancel(req()),
        "leases": store.leases, "waiting": store.waiting, "history_events": store.history_events,
        "reclaim_expired": store.reclaim_expired, "now": store.now,
    }
    for name, call in calls.items():
        with pytest.raises(LeaseStoreUnavailable, match="file is not a database"):
            call()
        assert isinstance(LeaseStoreUnavailable("x"), LeaseStoreError), name


def test_an_unreachable_postgresql_is_a_store_error_with_the_password_masked():
    url = f"postgresql://occflow:s3cret@127.0.0.1:{closed_port()}/occflow"
    with pytest.raises(LeaseStoreUnavailable) as raised:
        LeaseStore.from_url(url)
    message = str(raised.value)
    assert "s3cret" not in message and "occflow:***@127.0.0.1" in message
    assert "Connection refused" in message


def test_control_characters_are_refused_before_any_sql(store_url):
    store = LeaseStore.from_url(store_url)
    with pytest.raises(InvalidDeclarationError, match="holder run_id"):
        req(holder=Holder("dag", "task", "run\x00 1", 1))
    with pytest.raises(InvalidDeclarationError, match="partition value"):
        req(parts=["ds=1\x00"])
    with pytest.raises(InvalidDeclarationError, match="table"):
        store.leases("db.t\x00")
    with pytest.raises(InvalidDeclarationError, match="lease id"):
        store.release("abc\x00")
    assert store.leases() == []
    store.dispose()


def logged(caplog, capsys) -> str:
    """What the triggers logged: Airflow's triggers log through structlog (stdout) or logging."""
    return caplog.text + capsys.readouterr().out


def test_the_trigger_gives_up_after_its_outage_budget_naming_the_outage(tmp_path, caplog, capsys):
    for url, cause in [(f"postgresql://u@127.0.0.1:{closed_port()}/db", "Connection refused"),
                       (garbage_sqlite(tmp_path), "file is not a database")]:
        trigger = LeaseAdmissionTrigger.for_request(req(), url, poll_interval=0.05, outage_budget=1.2)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(LeaseStoreError) as raised:
            asyncio.run(first_event(trigger))
        assert 1.2 <= time.monotonic() - started < 6
        assert re.search(r"unavailable for \ds \(outage budget 1.2s\) while waiting for update on db.t",
                         str(raised.value))
        assert cause in str(raised.value)
        assert "retry 1 in 0.5s, gives up after 1.2s" in logged(caplog, capsys)


def test_the_outage_budget_travels_with_the_serialized_trigger():
    for trigger in (LeaseAdmissionTrigger.for_request(req(), None, 1.0, outage_budget=42.0),
                    ConflictFreeTrigger(req().to_dict(), None, 2.0)):
        path, kwargs = trigger.serialize()
        assert kwargs["outage_budget"] == (42.0 if isinstance(trigger, LeaseAdmissionTrigger) else 300.0)
        assert type(trigger)(**kwargs).serialize() == (path, kwargs)


@pytest.mark.postgres
def test_the_admission_trigger_rides_out_a_postgresql_restart(restartable_pg, caplog, capsys):
    url = restartable_pg.create_database()
    store = LeaseStore.from_url(url)
    held = store.try_acquire(req(ttl=120))
    trigger = LeaseAdmissionTrigger.for_request(req(), url, poll_interval=0.1, outage_budget=60)

    async def scenario():
        waiting = asyncio.create_task(first_event(trigger))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        restartable_pg.stop("immediate")  # a crash, mid-wait
        await asyncio.sleep(2.5)
        assert not waiting.done()  # riding it out, not failed
        restartable_pg.start()
        store.release(held)
        return await asyncio.wait_for(waiting, 30)

    with caplog.at_level(logging.WARNING):
        event = asyncio.run(scenario())
    assert event["status"] == "free"  # the resumed task takes the lease itself
    assert "lease store unavailable for" in logged(caplog, capsys)
    store.dispose()
    restartable_pg.drop_database(url)


@pytest.mark.postgres
def test_while_postgresql_is_down_the_local_deadline_decides(restartable_pg):
    url = restartable_pg.create_database()
    store = LeaseStore.from_url(url, history=True)
    lease = store.try_acquire(req(ttl=3.0))
    with LeaseKeeper(store, lease, interval=1.0) as keeper:
        restartable_pg.stop("immediate")
        try:
            keeper.ensure_live()  # unconfirmed, but well within its validity: may commit
            time.sleep(keeper.deadline - time.monotonic() + 0.2)
            with pytest.raises(LeaseLostError, match="heartbeats failed|lapsed"):
                keeper.ensure_live()
        finally:
            restartable_pg.start()
    time.sleep(max(0.0, lease.valid_until - time.monotonic()) + 0.3)  # the store's TTL runs out
    rival = store.try_acquire(req())
    assert rival is not None and rival.fence == 2
    store.dispose()
    restartable_pg.drop_database(url)
