"""Waking waiting requests the moment a lease (or a queue place) is let go.

A decision that frees part of a table's footprint (a release, a reclaimed or taken-over lease,
a cancelled, dropped or lapsed queue place) announces the table in the same transaction
(``announce``), so the announcement exists exactly when the change is committed:

- on PostgreSQL with ``pg_notify('occflow_lease_freed', <table>)``: the payload is a bound
  parameter, delivered to every session that listens once the transaction commits;
- on SQLite (no NOTIFY) by bumping the table's counter in ``occflow_lease_wakeups``.

Per process and store, one ``WakeupHub`` thread watches for them: a dedicated connection that
``LISTEN``s (PostgreSQL), or a poll of the counters (SQLite: every 0.05 s while a waiter
watches, so a release wakes it within about 0.05 s; backing off to 0.5 s while the hub lingers
with no watch). A poll is one SELECT of a few rows: about 20 a second, a fraction of a
millisecond each, only while a write waits. A waiter ``watch``es its table, clears the watch, asks
the store, and if not admitted waits on the watch with a timeout: the timeout is the safety
poll that covers a lost notification (a listener reconnecting also wakes everybody).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import sqlite3
import threading
import time

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from . import schema

_log = logging.getLogger(__name__)

#: The PostgreSQL channel; the payload is the table whose footprint was freed.
CHANNEL = "occflow_lease_freed"
#: SQLite's poll of the wake-up counters: its interval while any waiter watches, and the most it
#: backs off to while the hub lingers without one.
SQLITE_POLL_MIN = 0.05
SQLITE_POLL_MAX = 0.5
#: Seconds a new watcher waits for the hub's connection to be listening before it goes on
#: without (its safety poll then covers it).
READY_TIMEOUT = 10.0
#: Seconds the hub thread (and its connection) stays up after its last watch closed.
LINGER = 10.0


def announce(conn: Connection, dialect: str, table: str) -> None:
    """Inside the decision's transaction: tell waiters on ``table`` that something was freed."""
    if dialect == "postgresql":
        conn.execute(sa.select(sa.func.pg_notify(CHANNEL, table)))
        return
    W = schema.wakeups
    conn.execute(
        sqlite_insert(W).values(table_name=table, generation=1).on_conflict_do_update(
            index_elements=[W.c.table_name], set_={"generation": W.c.generation + 1}
        )
    )


class Watch:
    """One waiter's view of a table: set when the table is announced (or the hub reconnects)."""

    def __init__(self, hub: WakeupHub, table: str) -> None:
        self.hub = hub
        self.table = table
        self._fired = threading.Event()
        self._lock = threading.Lock()
        self._loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def clear(self) -> None:
        """Forget earlier wake-ups: call it right before asking the store again."""
        self._fired.clear()

    def fire(self) -> None:
        with self._lock:
            self._fired.set()
            loops = list(self._loops)
        for loop, event in loops:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(event.set)

    def wait(self, timeout: float) -> bool:
        """Block until woken (``True``) or ``timeout`` seconds passed (``False``)."""
        return self._fired.wait(timeout)

    async def wait_async(self, timeout: float) -> bool:
        """The same without blocking the event loop (a trigger's)."""
        event = asyncio.Event()
        entry = (asyncio.get_running_loop(), event)
        with self._lock:
            if self._fired.is_set():
                return True
            self._loops.append(entry)
        try:
            await asyncio.wait_for(event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            with self._lock:
                self._loops.remove(entry)

    def close(self) -> None:
        self.hub.unwatch(self)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class WakeupHub:
    """One listener per process and store, fanning announcements out to the watches."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._lock = threading.Lock()
        self._watches: dict[str, set[Watch]] = {}
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.listening = False  # whether the hub's connection is up (LISTEN / counters read)

    def watch(self, table: str) -> Watch:
        """A watch on ``table``; returns once the hub listens (or ``READY_TIMEOUT`` passed), so a
        release committed after this call wakes it."""
        watch = Watch(self, table)
        with self._lock:
            self._watches.setdefault(table, set()).add(watch)
            if self._thread is None:
                self._ready = threading.Event()
                self._thread = threading.Thread(target=self._run, name=f"occflow-wakeup-{self.dialect}", daemon=True)
                self._thread.start()
            ready = self._ready
        if not ready.wait(READY_TIMEOUT):
            _log.warning("lease wake-ups not listening after %gs; waiters fall back to their safety poll",
                         READY_TIMEOUT)
        return watch

    def unwatch(self, watch: Watch) -> None:
        with self._lock:
            watches = self._watches.get(watch.table)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del self._watches[watch.table]

    def fire(self, table: str | None) -> None:
        """Wake the watches on ``table`` (``None``: all of them)."""
        with self._lock:
            if table is None:
                targets = [w for ws in self._watches.values() for w in ws]
            else:
                targets = list(self._watches.get(table, ()))
        for watch in targets:
            watch.fire()

    def _idle_since(self, since: float | None) -> float | None:
        """When the hub last had no watch (``None`` while it has some)."""
        with self._lock:
            if self._watches:
                return None
        return time.monotonic() if since is None else since

    def _should_stop(self, idle: float | None) -> bool:
        """Past ``LINGER`` without a watch the thread leaves."""
        if idle is None or time.monotonic() - idle < LINGER:
            return False
        return self._stop_if_unwatched()

    def _stop_if_unwatched(self) -> bool:
        """Leave if no watch is left (under the lock, so a new watch either sees the thread
        gone and starts another, or keeps it)."""
        with self._lock:
            if self._watches:
                return False
            self._thread = None
            self.listening = False
            return True

    def _run(self) -> None:
        backoff = 0.5
        while True:
            try:
                if self.dialect == "postgresql":
                    self._listen_postgres()
                else:
                    self._poll_sqlite()
                return
            except Exception as exc:  # noqa: BLE001 - the store is down: wake everyone, retry
                self.listening = False
                self._ready.set()  # watchers go on with their safety poll meanwhile
                _log.warning("lease wake-up listener lost its connection (retrying in %.1fs): %s", backoff, exc)
                self.fire(None)
                if self._stop_if_unwatched():
                    return
                time.sleep(backoff)
                backoff = min(backoff * 2, 10.0)

    def _connected(self) -> None:
        self.listening = True
        self._ready.set()
        self.fire(None)  # anything freed while we were not listening

    def _listen_postgres(self) -> None:
        cargs, cparams = self.engine.dialect.create_connect_args(self.engine.url)
        cparams.setdefault("connect_timeout", 10)
        connection = self.engine.dialect.loaded_dbapi.connect(*cargs, **cparams)
        try:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(f"LISTEN {CHANNEL}")  # a constant identifier, no value in it
            self._connected()
            idle: float | None = None
            while not self._should_stop(idle := self._idle_since(idle)):
                readable, _, _ = select.select([connection], [], [], 1.0)
                if not readable:
                    continue
                connection.poll()
                tables = {n.payload for n in connection.notifies}
                connection.notifies.clear()
                for table in tables:
                    self.fire(table)
        finally:
            with contextlib.suppress(Exception):
                connection.close()

    def _poll_sqlite(self) -> None:
        path = self.engine.url.database or ""
        connection = sqlite3.connect(path, timeout=5, isolation_level=None, check_same_thread=False)
        try:
            query = f"SELECT table_name, generation FROM {schema.wakeups.name}"  # a constant name
            seen = dict(connection.execute(query).fetchall())
            self._connected()
            interval = SQLITE_POLL_MIN
            idle: float | None = None
            while not self._should_stop(idle := self._idle_since(idle)):
                time.sleep(interval)
                now = dict(connection.execute(query).fetchall())
                changed = [t for t, g in now.items() if seen.get(t) != g]
                seen = now
                for table in changed:
                    self.fire(table)
                # A waiting write pays the poll interval on each hand-off: keep it short while
                # anyone waits (sub-second commits), back off only while nobody does.
                interval = SQLITE_POLL_MIN if changed or idle is None else min(interval * 2, SQLITE_POLL_MAX)
        finally:
            connection.close()


_HUBS: dict[tuple[int, str], WakeupHub] = {}
_HUBS_LOCK = threading.Lock()


def hub_for(engine: Engine) -> WakeupHub:
    """The process's hub for the store on ``engine`` (a forked child gets its own)."""
    key = (os.getpid(), engine.url.render_as_string(hide_password=False))
    with _HUBS_LOCK:
        hub = _HUBS.get(key)
        if hub is None:
            hub = _HUBS[key] = WakeupHub(engine)
        return hub
