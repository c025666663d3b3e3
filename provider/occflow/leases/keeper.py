"""Keeping a lease alive while a job runs, and knowing, just before the commit, that it still is.

A lease is fenced by time: the store reckons its expiry from the database's clock, read after
each grant or heartbeat was sent, so the lease cannot lapse (and nobody else can be granted its
footprint) before ``send time + TTL`` on this machine's monotonic clock (``Lease.valid_until``).
``LeaseKeeper`` keeps that local deadline, less a safety margin, moving forward with each
heartbeat that reaches the store. When heartbeats fail (the database is down, the file locked,
the process was stopped) it retries them until the deadline; past it the lease counts as lost,
whatever the store says later. ``ensure_live()`` is the check a write makes right before it
commits: it raises ``LeaseLostError`` if the lease is lost or may be.
"""

from __future__ import annotations

import logging
import threading
import time

from .config import announce_store
from .model import Lease, LeaseLostError, LeaseStoreError, checked_seconds
from .store import LeaseStore

_log = logging.getLogger(__name__)


class LeaseKeeper:
    """Heartbeats a lease from a background thread while a job runs.

    ``with LeaseKeeper(store, lease) as keeper: ...; keeper.ensure_live(); commit(fence=keeper.fence)``.
    ``lost`` is set (and ``why`` says why) once the lease lapsed, a heartbeat was refused, the
    heartbeats failed until its validity ran out, or the heartbeat thread died.
    """

    def __init__(
        self, store: LeaseStore, lease: Lease, interval: float | None = None, margin: float | None = None
    ) -> None:
        self.store = store
        self.lease = lease
        # A third of the TTL: two heartbeats may fail (a slow database) before the lease lapses.
        self.interval = checked_seconds("interval", interval) if interval is not None else max(lease.ttl / 3.0, 0.05)
        # Room for the commit after the check, and for clock rates that differ a little.
        self.margin = (
            checked_seconds("margin", margin, zero_ok=True) if margin is not None else min(2.0, lease.ttl / 4.0)
        )
        self.lost = threading.Event()
        self.why: str | None = None
        #: Seconds the commit was held at the lease's gate (order-aware admission).
        self.gate_seconds = 0.0
        self._guard = threading.Lock()
        self._deadline: float | None = None
        self._extend(lease)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"occflow-lease-{lease.lease_id[:8]}", daemon=True)

    @property
    def fence(self) -> int:
        """The lease's fencing token, to stamp into the commit where the table format allows."""
        return self.lease.fence

    @property
    def deadline(self) -> float | None:
        """Monotonic time until which the lease is certainly live (``None``: not known yet)."""
        return self._deadline

    def _extend(self, lease: Lease) -> None:
        with self._guard:
            self.lease = lease
            if lease.valid_until is not None and not self.lost.is_set():
                self._deadline = max(self._deadline or 0.0, lease.valid_until - self.margin)

    def _lose(self, why: str) -> None:
        with self._guard:
            if self.lost.is_set():
                return
            self.why = why
            self.lost.set()
        _log.warning("%s is lost: %s", self.lease.name(), why)

    def _past_deadline(self) -> bool:
        # Not anchored yet (a lease read from elsewhere): the first heartbeat that gets through
        # anchors it or finds it lapsed; until then ``ensure_live`` refuses.
        deadline = self._deadline
        return deadline is not None and time.monotonic() >= deadline

    def _run(self) -> None:
        try:
            self._beat_until_stopped()
        except BaseException as exc:  # noqa: BLE001 - a dead keeper must not pass for a live one
            self._lose(f"the heartbeat thread died: {type(exc).__name__}: {exc}")

    def _beat_until_stopped(self) -> None:
        # A lease read from elsewhere has no local deadline yet, and a fresh grant is on
        # probation (GRANT_PROBATION) until its first heartbeat: beat at once.
        on_probation = (self.lease.expires - self.lease.heartbeat).total_seconds() < self.lease.ttl
        wait = 0.0 if self._deadline is None or on_probation else self.interval
        failures = 0
        while not self._stop.wait(wait):
            try:
                self._extend(self.store.heartbeat(self.lease))
            except LeaseLostError as exc:
                self._lose(f"a heartbeat was refused: {exc}")
                return
            except LeaseStoreError as exc:
                failures += 1
                if self._past_deadline():
                    self._lose(f"heartbeats failed until its validity ran out ({failures} tries); last: {exc}")
                    return
                _log.warning("heartbeat %d for %s failed, retrying: %s", failures, self.lease.name(), exc)
                wait = min(self.interval, 0.1 * 2**failures)
                continue
            failures = 0
            wait = self.interval

    def ensure_live(self) -> None:
        """Raise ``LeaseLostError`` unless the lease is certainly live now: call it right before
        the commit. Past the local deadline the lease counts as lost for good; before it, one
        round trip confirms the store still holds it with our fence (if the store cannot be
        reached, the local deadline alone decides)."""
        self._check_local()
        try:
            self._extend(self.store.confirm(self.lease))
        except LeaseLostError as exc:
            self._lose(str(exc))
        except LeaseStoreError as exc:
            if self._deadline is None:
                self._lose(f"it cannot be confirmed and was never anchored here: {exc}")
            else:
                _log.warning("cannot confirm %s, relying on its local deadline: %s", self.lease.name(), exc)
        # The round trip may have been slow (a locked SQLite file): look at the clock again.
        self._check_local()

    def wait_gate(self, timeout: float | None = None) -> float:
        """Hold the commit until the leases it must follow have ended (order-aware admission:
        ``LeaseStore.wait_gate``); the seconds held, ``GateTimeout`` past ``timeout``. Asking
        marks the writer as at its gate, so no newcomer holds it back from then on: one round
        trip per commit. Asked whatever this worker's ``order_aware`` says: that setting only
        governs the grants this worker makes, and a worker that is order-aware may have granted a
        newcomer ahead of this commit (a rolling change of the setting: a gate the store recorded
        is held by every worker). The lease keeps beating meanwhile; call ``ensure_live`` after it."""
        waited = self.store.wait_gate(self.lease, timeout)
        self.gate_seconds += waited
        if waited >= 0.5:
            _log.info("%s held its commit %.1fs at its gate for the leases it had to commit after",
                      self.lease.name(), waited)
        return waited

    def _check_local(self) -> None:
        deadline = self._deadline
        if not self.lost.is_set() and deadline is not None and time.monotonic() >= deadline:
            self._lose(
                f"lapsed: its validity ran out {time.monotonic() - deadline:.1f}s ago "
                "(no heartbeat reached the store in time)"
            )
        if self.lost.is_set():
            raise LeaseLostError(f"{self.lease.name()} is not live, the write must not commit: {self.why}")

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        # The lease's worker says which store granted it, and hears of peers that use another.
        url = self.store.engine.url.render_as_string(hide_password=False)
        announce_store(url, self.lease.holder, _log)  # a warning, if any, goes to the task log
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        # A beat stuck on a locked database must not hold the task up; the thread is a daemon.
        self._thread.join(timeout=max(1.0, self.interval))
