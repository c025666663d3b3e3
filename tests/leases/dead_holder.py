"""A lease holder that is killed -9 at one point between its grant and its commit (a script).

``python dead_holder.py STORE_URL POINT TTL PROBATION READY_FILE``: takes a whole-table lease on
``lake.dead``, goes on as a write does (a ``LeaseKeeper`` heartbeats it, the check before the
commit, the commit, the release) and SIGKILLs itself at ``POINT``:

- ``granted``: right after the grant, before its keeper's first heartbeat (a worker, scheduler
  or triggerer killed while the task starts);
- ``running``: while the job runs, after the keeper's first heartbeats;
- ``at_commit``: right after the last check before the commit (``ensure_live``);
- ``committed``: after the commit, before the release.

It writes ``READY_FILE`` (the store's clock at the kill) just before dying.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from occflow.leases import LeaseKeeper, LeaseRequest, LeaseStore


def die(store: LeaseStore, ready: str) -> None:
    Path(ready).write_text(repr(store.now()))
    os.kill(os.getpid(), signal.SIGKILL)


def main(url: str, point: str, ttl: float, probation: float, ready: str) -> None:
    store = LeaseStore.from_url(url)
    lease = store.acquire(LeaseRequest.create("lake.dead", "optimize", "delta-rs", whole_table=True, ttl=ttl,
                                              probation=probation), timeout=30)
    if point == "granted":
        die(store, ready)
    with LeaseKeeper(store, lease) as keeper:
        time.sleep(min(ttl / 2, 2.0))  # the job runs; the keeper beats
        if point == "running":
            die(store, ready)
        keeper.ensure_live()
        if point == "at_commit":
            die(store, ready)
        time.sleep(0.1)  # the commit
        die(store, ready)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
