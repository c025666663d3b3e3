"""A killed holder frees its table soon: at most ``probation`` seconds when it dies before its
first heartbeat, at most its TTL afterwards (``GRANT_PROBATION``, docs/admission.md).

Each case kills a real process (SIGKILL, nothing runs after it) at one point between grant and
commit, then times, on the real store, how long a second writer of the same table waits to be
granted. A lease granted for 60 s that is freed in about 3 s shows the probation at work; the
old behaviour (a lease never heartbeated blocks its whole TTL) would fail the first case.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from occflow.leases import LeaseRequest, LeaseStore

HOLDER = Path(__file__).with_name("dead_holder.py")
SLACK = 4.0  # the waiter's poll, the store's reclaim, process start-up on a loaded machine


@pytest.mark.parametrize(
    ("point", "ttl", "probation", "bound"),
    [
        ("granted", 60.0, 2.0, 2.0),  # never heartbeated: the probation, not the 60 s TTL
        ("running", 4.0, 2.0, 4.0),  # heartbeated: its TTL
        ("at_commit", 4.0, 2.0, 4.0),
        ("committed", 4.0, 2.0, 4.0),
    ],
)
def test_a_holder_killed_at_any_point_blocks_its_table_for_a_bounded_time(
    tmp_path: Path, point: str, ttl: float, probation: float, bound: float
) -> None:
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    store = LeaseStore.from_url(url)
    ready = tmp_path / "killed"
    holder = subprocess.run(
        [sys.executable, str(HOLDER), url, point, str(ttl), str(probation), str(ready)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, timeout=120, check=False,
    )
    assert holder.returncode == -9, holder  # it really died by SIGKILL, at that point
    killed_at = float(ready.read_text())
    assert store.leases("lake.dead"), "the dead holder's lease should still be there"
    started = time.monotonic()
    lease = store.acquire(LeaseRequest.create("lake.dead", "optimize", "delta-rs", whole_table=True),
                          timeout=ttl + 10, poll=0.1)
    blocked = store.now() - killed_at
    assert lease is not None
    assert blocked <= bound + SLACK, f"killed {point}: the table was blocked {blocked:.1f}s (bound {bound}s)"
    assert time.monotonic() - started <= bound + SLACK
