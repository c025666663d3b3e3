"""Fenced leases under attack, on both backends: 16 worker processes (``lease_worker.py``)
write random footprints over mixed partition column sets with every operation of two profiles,
while the test kills holders (``kill -9``, then starts their retry), stops them past their TTL
(``SIGSTOP`` ... ``SIGCONT``) and takes the store away past the TTL (PostgreSQL stopped like a
crash and restarted; the SQLite file held under an exclusive lock).

The oracle shares no code with occflow's admission: a footprint is the set of concrete
partitions of a small universe it covers (enumerated by brute force), two writes conflict when
those sets intersect and the profile's matrix (the spec's data, ``Profile.conflicts``) says so.
From the workers' commit logs and the store's recorded grants, heartbeats, expiries and
takeovers it counts conflicting commits whose leases were live together (from grant to commit)
and commits made after their own lease had lapsed. Both must be zero. Workers hold their commit
at the lease's gate (order-aware admission): a pair live together is allowed only where the
later grant committed after the earlier one and, by the spec's cells read here, only that
commit order is clean.

``OCCFLOW_ADVERSARIAL_WORKER_PYTHONPATH`` runs the workers on another occflow tree (e.g. one
from before fenced leases, to see this suite fail there); ``OCCFLOW_ADVERSARIAL_UNFENCED=1``
has them commit without ``ensure_live`` (to see what the check is worth on its own).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from lease_worker import DOMAINS

from occflow.core.profiles import get_profile
from occflow.leases import LeaseStore

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("lease_worker.py")
WORKERS = 16
TTL = 3.0
STOP_FOR = TTL + 1.5  # a stopped holder sleeps past its TTL
OUTAGE_FOR = 2 * TTL + 1.0  # the store is gone for more than two TTLs
FAULT_PLAN = ["outage"] * 2 + ["stop"] * 5 + ["kill"] * 5
SLACK = 0.002  # the store clock's resolution (SQLite: milliseconds)

# -- the oracle ---------------------------------------------------------------------------

UNIVERSE = [dict(zip(DOMAINS, values, strict=True)) for values in itertools.product(*DOMAINS.values())]


def concrete(footprint: list[dict[str, str]] | None) -> frozenset[int]:
    """The concrete partitions (indexes into ``UNIVERSE``) a footprint covers."""
    return frozenset(
        i for i, p in enumerate(UNIVERSE)
        if footprint is None or any(all(p[c] == v for c, v in spec.items()) for spec in footprint)
    )


def lease_windows(events: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Per lease: (granted at, the moment it stopped being live: lapsed, reclaimed or taken
    over), from the store's events on the store's clock."""
    granted: dict[str, float] = {}
    expiry: dict[str, float] = {}
    ended: dict[str, float] = {}
    for e in sorted(events, key=lambda ev: ev["seq"]):
        lease = e["lease_id"]
        if e["kind"] == "grant":
            granted[lease], expiry[lease] = e["at"], e["expires_at"]
        elif e["kind"] == "heartbeat" and lease in expiry and e["at"] < expiry[lease]:
            expiry[lease] = e["expires_at"]
        elif e["kind"] in ("expire", "takeover") and lease in granted:
            ended.setdefault(lease, e["at"])
    return {lease: (at, min(expiry[lease], ended.get(lease, float("inf")))) for lease, at in granted.items()}


def _clean(profile: str, earlier: str, later: str) -> bool:
    """Two writes from one snapshot, ``earlier`` committed first: the later commits and the data
    is right (the spec's cell, read here)."""
    cell = get_profile(profile).cell(earlier, later)
    return not cell.later_fails and not cell.effect.corrupts_data


def gated_in_a_clean_order(a: dict[str, Any], b: dict[str, Any], windows: dict[str, tuple[float, float]]) -> bool:
    """Order-aware admission's allowed overlap: ``a`` committed first, and of the two commit
    orders only that one is clean, on one profile (whichever was granted first: a newcomer may
    follow a running writer, or hold one that has not reached its gate)."""
    return (
        a["profile"] == b["profile"]
        and _clean(a["profile"], a["operation"], b["operation"])
        and not _clean(a["profile"], b["operation"], a["operation"])
    )


@dataclass
class Findings:
    conflicting_live: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    # Of those, the pairs whose later lease was granted while the earlier was still live (an
    # admission error); in the rest, one of the two committed after its lease had lapsed.
    granted_over_live: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    after_lapse: list[dict[str, Any]] = field(default_factory=list)
    fence_inversions: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    unknown_leases: list[dict[str, Any]] = field(default_factory=list)
    # Conflicting pairs run together under a commit gate, committed in their clean order.
    gated_overlaps: int = 0


def check(commits: list[dict[str, Any]], events: list[dict[str, Any]]) -> Findings:
    windows = lease_windows(events)
    found = Findings()
    for c in commits:
        if c["lease_id"] not in windows:
            found.unknown_leases.append(c)
        elif c["t_commit"] > windows[c["lease_id"]][1] + SLACK:
            found.after_lapse.append(c)
    known = sorted((c for c in commits if c["lease_id"] in windows), key=lambda c: c["t_commit"])
    for a, b in itertools.combinations(known, 2):  # a committed first
        if a["table"] != b["table"] or not concrete(a["footprint"]) & concrete(b["footprint"]):
            continue
        if not get_profile(a["profile"]).conflicts(a["operation"], b["operation"]):
            continue
        if gated_in_a_clean_order(a, b, windows):
            if windows[b["lease_id"]][0] < a["t_commit"] - SLACK:
                found.gated_overlaps += 1  # granted beside a, held at its gate, committed after it
            continue
        if windows[b["lease_id"]][0] < a["t_commit"] - SLACK:  # b's lease was live before a committed
            found.conflicting_live.append((a, b))
            first, second = sorted((windows[a["lease_id"]], windows[b["lease_id"]]))
            if second[0] < first[1] - SLACK:  # the store granted the second over the first's live lease
                found.granted_over_live.append((a, b))
        if a["fence"] is not None and b["fence"] is not None and b["fence"] <= a["fence"]:
            found.fence_inversions.append((a, b))
    return found


# -- the run ------------------------------------------------------------------------------


class Run:
    """The workers of one backend's run, and the faults done to them."""

    def __init__(self, url: str, directory: Path, seed: int) -> None:
        self.url = url
        self.directory = directory
        self.stop_file = directory / "stop"
        self.rnd = random.Random(seed)
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.generation: Counter[int] = Counter()
        self.faults: Counter[str] = Counter()
        self.env = dict(os.environ)
        if os.environ.get("OCCFLOW_ADVERSARIAL_WORKER_PYTHONPATH"):
            self.env["PYTHONPATH"] = os.environ["OCCFLOW_ADVERSARIAL_WORKER_PYTHONPATH"]

    def spawn(self, worker: int, retry: bool = False) -> None:
        generation = self.generation[worker]
        self.generation[worker] += 1
        command = [
            sys.executable, str(WORKER), self.url, str(worker), "--seed", str(worker * 1000 + generation),
            "--log", str(self.directory / f"worker-{worker}-{generation}.jsonl"),
            "--intent", str(self.directory / f"intent-{worker}.json"), "--stop", str(self.stop_file),
            "--ttl", str(TTL),
        ]
        if retry:
            command.append("--retry")
        if os.environ.get("OCCFLOW_ADVERSARIAL_UNFENCED") == "1":
            command.append("--unfenced")
        self.workers[worker] = subprocess.Popen(command, env=self.env)

    def holders(self, store: LeaseStore) -> list[int]:
        """Workers that hold a live lease now."""
        try:
            pids = {lease.holder.pid for lease in store.leases()}
        except Exception:  # noqa: BLE001 - the store is down: nobody to pick
            return []
        return [w for w, proc in self.workers.items() if proc.pid in pids and proc.poll() is None]

    def kill(self, worker: int) -> None:
        os.kill(self.workers[worker].pid, signal.SIGKILL)
        self.workers[worker].wait()
        self.spawn(worker, retry=True)  # Airflow runs the task instance's next try

    def stop(self, worker: int) -> None:
        pid = self.workers[worker].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(STOP_FOR)
        finally:
            os.kill(pid, signal.SIGCONT)

    def finish(self) -> None:
        self.stop_file.touch()
        deadline = time.monotonic() + 90
        for proc in self.workers.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sqlite_outage(url: str) -> None:
    """Hold the SQLite file's write lock (another connection, BEGIN EXCLUSIVE) past the TTL."""
    other = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=60, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    time.sleep(OUTAGE_FOR)
    other.execute("COMMIT")
    other.close()


def inject(run: Run, store: LeaseStore, outage: Any) -> None:
    """Do the fault plan (shuffled), a few seconds apart, each to a worker holding a lease."""
    plan = list(FAULT_PLAN)
    run.rnd.shuffle(plan)
    for kind in plan:
        time.sleep(run.rnd.uniform(1.5, 3.0))
        if kind == "outage":
            outage()
            run.faults[kind] += 1
            continue
        for _ in range(50):  # someone holds a lease most of the time
            holders = run.holders(store)
            if holders:
                (run.kill if kind == "kill" else run.stop)(run.rnd.choice(holders))
                run.faults[kind] += 1
                break
            time.sleep(0.1)


def wait_until_started(run: Run, limit: float = 120.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if all((run.directory / f"intent-{w}.json").exists() for w in run.workers):
            return
        time.sleep(0.2)
    pytest.fail("the workers did not start")


def read_logs(directory: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    commits, aborts = [], []
    for path in sorted(directory.glob("worker-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a process killed while writing it
            (commits if record["kind"] == "commit" else aborts).append(record)
    return commits, aborts


def events_of(url: str) -> list[dict[str, Any]]:
    """The store's history, read with plain SQL."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1))
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(sa.text("SELECT * FROM occflow_lease_events ORDER BY seq"))]
    engine.dispose()
    return rows


def brief(commit: dict[str, Any]) -> str:
    return (f"{commit['operation']} {commit['table']} {commit['footprint'] or 'whole table'} "
            f"lease {commit['lease_id'][:8]} fence {commit['fence']} {commit['task_id']}.{commit['run_id']} "
            f"try {commit['try_number']} at {commit['t_commit']:.3f}")


def run_adversarial(backend: str, url: str, directory: Path, outage: Any) -> None:
    started = time.monotonic()
    store = LeaseStore.from_url(url, history=True)  # the schema, before the workers
    run = Run(url, directory, seed=20241123)
    try:
        for worker in range(WORKERS):
            run.spawn(worker)
        wait_until_started(run)
        inject(run, store, outage)
        time.sleep(2.0)
    finally:
        run.finish()
        store.dispose()
    commits, aborts = read_logs(directory)
    events = events_of(url)
    found = check(commits, events)
    kinds = Counter(e["kind"] for e in events)
    print(
        f"\nadversarial {backend}: leases granted {kinds['grant']}, commits {len(commits)}, "
        f"aborted by ensure_live {len(aborts)}, conflicting pairs live {len(found.conflicting_live)} "
        f"({len(found.granted_over_live)} granted over a live lease), "
        f"commits after a lapsed lease {len(found.after_lapse)}, fence inversions {len(found.fence_inversions)}, "
        f"faults {dict(run.faults)}, takeovers {kinds['takeover']}, expiries {kinds['expire']}, "
        f"gated overlaps {found.gated_overlaps} (gates passed {kinds['pass']}), "
        f"{time.monotonic() - started:.0f} s"
    )
    for a, b in found.conflicting_live[:5]:
        print(f"  live together: {brief(a)} | {brief(b)}")
    for c in found.after_lapse[:5]:
        print(f"  after lapse: {brief(c)}")
    assert kinds["grant"] > 100 and len(commits) > 100 and sum(run.faults.values()) == len(FAULT_PLAN)
    assert kinds["pass"] > 0, "no commit was ever held at a gate: order-aware admission went unexercised"
    assert found.unknown_leases == []
    assert (len(found.conflicting_live), len(found.after_lapse), len(found.fence_inversions)) == (0, 0, 0)


def test_sqlite_leases_stay_fenced_under_kills_stops_and_a_locked_file(tmp_path):
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    run_adversarial("sqlite", url, tmp_path, lambda: sqlite_outage(url))


@pytest.mark.postgres
def test_postgresql_leases_stay_fenced_under_kills_stops_and_a_server_crash(restartable_pg, tmp_path):
    url = restartable_pg.create_database()

    def crash_and_restart() -> None:
        restartable_pg.stop("immediate")
        try:
            time.sleep(OUTAGE_FOR)
        finally:
            restartable_pg.start()

    run_adversarial("postgresql", url, tmp_path, crash_and_restart)
