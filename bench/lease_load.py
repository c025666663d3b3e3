"""A load generator for the lease store: many processes acquiring and releasing leases on
overlapping footprints with a mix of operations. Used by the load tests
(``tests/leases/test_load.py``, with bench/ on ``sys.path``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from occflow.core.operations import Operation
from occflow.core.profiles import get_profile
from occflow.leases import AdmissionPriorities, Holder, LeaseRequest, LeaseStore


@dataclass(frozen=True)
class LoadShape:
    """What each worker does: ``cycles`` acquire/hold/release rounds on ``tables``."""

    tables: Sequence[tuple[str, str]]  # (table, profile)
    partitions: Sequence[str] = ("ds=1", "ds=2", "ds=3")
    cycles: int = 100
    whole_table_share: float = 0.1
    append_share: float = 0.5  # the rest is spread evenly over the profile's other operations
    hold_max: float = 0.003
    poll: float = 0.002  # first re-poll; doubles up to poll_max while the request waits
    poll_max: float = 0.05
    give_up_after: float = 600.0
    ttl: float = 60.0
    # Head start of data writes over compactions (AdmissionPriorities); short so that a
    # compaction is not held back a minute in a run that lasts a few minutes.
    data_write_head_start: float = 0.5


@dataclass
class WorkerReport:
    worker: int
    requests: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    polls: int = 0


def run_worker(url: str, worker: int, shape: LoadShape, seed: int) -> WorkerReport:
    """One worker process: its own store connection, ``shape.cycles`` rounds."""
    store = LeaseStore.from_url(
        url, history=True, create=False,
        priorities=AdmissionPriorities(data_write_head_start=shape.data_write_head_start),
    )
    rnd = random.Random(seed)
    report = WorkerReport(worker)
    try:
        for cycle in range(shape.cycles):
            table, profile_name = rnd.choice(list(shape.tables))
            profile = get_profile(profile_name)
            others = [op for op in profile.operations if op is not Operation.INSERT_INTO]
            op = Operation.INSERT_INTO if rnd.random() < shape.append_share else rnd.choice(others)
            whole = rnd.random() < shape.whole_table_share
            parts = None if whole else rnd.sample(list(shape.partitions), rnd.choice([1, 1, 2]))
            request = LeaseRequest.create(
                table, op, profile, parts, whole_table=whole,
                holder=Holder("load", f"worker_{worker}", f"cycle_{cycle}"),
                ttl=shape.ttl, queue_ttl=shape.give_up_after,
            )
            report.requests.append(request.request_id)
            started = time.monotonic()
            pause = shape.poll
            while True:
                report.polls += 1
                lease = store.try_acquire(request)
                if lease is not None:
                    break
                if time.monotonic() - started > shape.give_up_after:
                    store.cancel(request)
                    report.given_up.append(request.request_id)
                    break
                time.sleep(pause * (0.5 + rnd.random()))
                pause = min(pause * 2, shape.poll_max)
            if lease is None:
                continue
            report.waits.append(time.monotonic() - started)
            time.sleep(rnd.random() * shape.hold_max)
            store.release(lease)
    finally:
        store.dispose()
    return report
