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

The delta-rs tests (at the end) make the commit real: the workers write a partitioned delta-rs
table, the injector stops them inside the engine call, and the oracle reads the table's own
``_delta_log`` and rows; a control run without the commit fence shows the oracle failing.

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

    def __init__(self, url: str, directory: Path, seed: int, ttl: float = TTL) -> None:
        self.url = url
        self.directory = directory
        self.ttl = ttl
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
            "--ttl", str(self.ttl), *self.worker_args(worker),
        ]
        if retry:
            command.append("--retry")
        if os.environ.get("OCCFLOW_ADVERSARIAL_UNFENCED") == "1":
            command.append("--unfenced")
        self.workers[worker] = subprocess.Popen(command, env=self.env)

    def worker_args(self, worker: int) -> list[str]:
        """More arguments for a worker's command line (a mode of ``lease_worker.py``)."""
        return []

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


# -- real delta-rs commits, writers stalled inside the engine call ----------------------------
#
# The workers write a real partitioned delta-rs table (``lease_worker.py --delta``) through
# ``DeltaRsTarget.run_attempt``; the injector stops them (SIGSTOP) right after their last check,
# inside the engine call, past their TTL, and kills holders (``kill -9``, then their retry). The
# oracle reads the engine's own record: the commits in the table's ``_delta_log`` (each carries
# its lease's fencing token, ``occflow.fence``) against the grants and expiries in the store's
# history, and the rows delta-rs reads from the final table. The control run takes the commit
# fence away (``--no-commit-fence``): its stalled compactions commit late and double rows, so
# the oracle is seen failing where the fence is missing.

DELTA_WORKERS = 6
DELTA_TTL = 3.0
DELTA_STOP_FOR = DELTA_TTL + 1.0  # a writer stopped inside the engine sleeps past its TTL
DELTA_FAULT_PLAN = ["stall-optimize"] * 3 + ["stall"] * 3 + ["kill"] * 3
CONTROL_WORKERS = 4
CONTROL_FAULT_PLAN = ["stall-optimize"] * 3
FILES_PER_PARTITION = 3


def create_delta_table(path: Path) -> None:
    """The run's table: partitions ds=1..3, a few small files each (something to compact)."""
    import pyarrow as pa  # optional heavy dependency (delta-rs tests)

    from occflow.engines.deltars.table import DeltaRsTable

    table = DeltaRsTable(path)
    for n in range(FILES_PER_PARTITION):
        ids = [-(n * 100 + k) - 1 for k in range(3 * 4)]  # negative: no worker writes these
        data = pa.table({"id": pa.array(ids, pa.int64()),
                         "ds": pa.array([str(1 + k % 3) for k in range(len(ids))], pa.string()),
                         "writer": pa.array([-1] * len(ids), pa.int64())})
        done = table.create(data, partition_by=["ds"]) if n == 0 else table.append(data)
        assert done.committed, done


class DeltaRun(Run):
    """A run whose workers write the delta-rs table at ``table``."""

    def __init__(self, url: str, directory: Path, seed: int, table: Path, *, fenced: bool) -> None:
        super().__init__(url, directory, seed, ttl=DELTA_TTL)
        self.table = table
        self.fenced = fenced
        self.stalls: list[dict[str, Any]] = []  # the markers of the writers stopped inside the engine

    def worker_args(self, worker: int) -> list[str]:
        args = ["--delta", str(self.table), "--marker", str(self.marker(worker)), "--hold-max", "0.3"]
        return args if self.fenced else [*args, "--no-commit-fence", "--control"]

    def marker(self, worker: int) -> Path:
        return self.directory / f"engine-{worker}.json"

    def in_engine(self, worker: int) -> dict[str, Any] | None:
        """The worker's marker if it says the live process is inside its engine call."""
        try:
            marker = json.loads(self.marker(worker).read_text())
        except (OSError, json.JSONDecodeError):
            return None
        proc = self.workers[worker]
        if marker.get("state") != "in" or marker.get("pid") != proc.pid or proc.poll() is not None:
            return None
        return marker

    def stall_in_engine(self, optimize_only: bool, limit: float = 30.0) -> bool:
        """Stop a writer that is inside its engine call (its marker says so before and after
        the stop took hold) for longer than its TTL, then resume it. ``optimize_only``: a
        compaction with files to merge (the write whose late commit doubles rows)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            candidates = list(self.workers)
            self.rnd.shuffle(candidates)
            for worker in candidates:
                marker = self.in_engine(worker)
                if marker is None or (optimize_only and (marker["operation"] != "optimize" or marker["files"] < 2)):
                    continue
                pid = marker["pid"]
                os.kill(pid, signal.SIGSTOP)
                stopped = wait_stopped(pid)
                if stopped and self.in_engine(worker) == marker:  # stopped inside the engine call
                    self.stalls.append(marker)
                    try:
                        time.sleep(DELTA_STOP_FOR)
                    finally:
                        os.kill(pid, signal.SIGCONT)
                    return True
                os.kill(pid, signal.SIGCONT)  # it left the engine before the stop took hold
            time.sleep(0.01)
        return False


def wait_stopped(pid: int, limit: float = 2.0) -> bool:
    """Whether the process is in the stopped state (``T``) within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return False
        if state in ("T", "t"):
            return True
        time.sleep(0.002)
    return False


def inject_delta(run: DeltaRun, store: LeaseStore, plan: list[str]) -> None:
    plan = list(plan)
    run.rnd.shuffle(plan)
    for kind in plan:
        time.sleep(run.rnd.uniform(0.3, 1.0))
        if kind.startswith("stall"):
            if run.stall_in_engine(optimize_only=kind == "stall-optimize"):
                run.faults["stall in engine"] += 1
            continue
        for _ in range(50):
            holders = run.holders(store)
            if holders:
                run.kill(run.rnd.choice(holders))
                run.faults[kind] += 1
                break
            time.sleep(0.1)


def delta_log_commits(path: Path) -> list[dict[str, Any]]:
    """Every commit in the table's ``_delta_log``: version, operation, the lease's fencing token
    it carries (``None``: the table's setup), and when it happened: the later of its commit-info
    timestamp and its log file's modification time (it was visible by then)."""
    commits = []
    for file in sorted((path / "_delta_log").glob("*.json")):
        info: dict[str, Any] = {}
        for line in file.read_text().splitlines():
            action = json.loads(line)
            info = action.get("commitInfo", info)
        fence = info.get("occflow.fence")
        commits.append({
            "version": int(file.stem), "operation": info.get("operation"),
            "occflow": info.get("occflow.operation"), "fence": None if fence is None else int(fence),
            "t": max(float(info.get("timestamp", 0)) / 1000.0, file.stat().st_mtime),
        })
    return commits


def delta_partition(keys: str | None) -> frozenset[str] | None:
    """The ``ds`` values of a recorded footprint (``None``: the whole table)."""
    if keys is None:
        return None
    values = set()
    for key in json.loads(keys):
        for part in key.split("/"):
            column_name, _, value = part.partition("=")
            if column_name.strip() == "ds":
                values.add(value.strip().strip("'\""))
    return frozenset(values)


@dataclass
class DeltaFindings:
    commits: list[dict[str, Any]]
    # Commits by a lease that land after a commit of a conflicting lease granted after it lapsed:
    # the stalled writer committed after the write admitted in its place (must be 0).
    late: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    # Commits by a lease later (in time) than its own lapse and a conflicting grant after it,
    # whatever the log's order: the brief's count; one that landed before the admitted write's
    # first commit (its fence) is read by that write, as core.fencing says.
    after_lapse_and_grant: list[dict[str, Any]] = field(default_factory=list)
    after_own_lapse: list[dict[str, Any]] = field(default_factory=list)
    unknown_fences: list[dict[str, Any]] = field(default_factory=list)
    duplicated_ids: dict[int, int] = field(default_factory=dict)
    rows: int = 0


def check_delta(path: Path, events: list[dict[str, Any]]) -> DeltaFindings:
    from deltalake import DeltaTable  # optional heavy dependency (delta-rs tests)

    windows = lease_windows(events)
    grants = {e["lease_id"]: e for e in events if e["kind"] == "grant"}
    by_fence = {int(e["fence"]): e["lease_id"] for e in grants.values() if e["fence"] is not None}
    commits = delta_log_commits(path)
    found = DeltaFindings(commits)
    first_commit: dict[str, int] = {}
    for c in commits:
        if c["fence"] is None:
            continue
        lease = by_fence.get(c["fence"])
        if lease is None:
            found.unknown_fences.append(c)
            continue
        c["lease_id"] = lease
        first_commit.setdefault(lease, c["version"])

    def conflict(a: str, b: str) -> bool:
        ga, gb = grants[a], grants[b]
        pa_, pb = delta_partition(ga["partitions"]), delta_partition(gb["partitions"])
        if pa_ is not None and pb is not None and not pa_ & pb:
            return False
        profile = get_profile(ga["profile"])
        return profile.conflicts(ga["operation"], gb["operation"]) or profile.conflicts(gb["operation"], ga["operation"])

    for c in commits:
        lease = c.get("lease_id")
        if lease is None:
            continue
        lapsed = windows[lease][1]
        if c["t"] <= lapsed + SLACK:
            continue
        found.after_own_lapse.append(c)
        replacements = [m for m in grants if m != lease and windows[m][0] > lapsed - SLACK and conflict(lease, m)]
        if any(windows[m][0] < c["t"] for m in replacements):
            found.after_lapse_and_grant.append(c)
        for m in replacements:
            if m in first_commit and first_commit[m] < c["version"]:
                found.late.append((c, {"lease_id": m, "version": first_commit[m]}))
                break
    ids = DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    found.rows = len(ids)
    found.duplicated_ids = {i: n for i, n in Counter(ids).items() if n > 1}
    return found


def run_delta_adversarial(tmp_path: Path, *, fenced: bool) -> tuple[DeltaRun, DeltaFindings, Counter[str]]:
    started = time.monotonic()
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    table = tmp_path / "table"
    create_delta_table(table)
    store = LeaseStore.from_url(url, history=True)
    run = DeltaRun(url, tmp_path, seed=20250531 if fenced else 20250601, table=table, fenced=fenced)
    try:
        for worker in range(DELTA_WORKERS if fenced else CONTROL_WORKERS):
            run.spawn(worker)
        wait_until_started(run)
        inject_delta(run, store, DELTA_FAULT_PLAN if fenced else CONTROL_FAULT_PLAN)
        time.sleep(1.0)
    finally:
        run.finish()
        store.dispose()
    committed, ended = read_logs(tmp_path)  # the workers' own account: commits, every other end
    outcomes = Counter(r["kind"] for r in ended) + Counter(commit=len(committed))
    events = events_of(url)
    found = check_delta(table, events)
    kinds = Counter(e["kind"] for e in events)
    fences = sum(1 for c in found.commits if c["occflow"] == "fence")
    print(
        f"\nadversarial delta-rs ({'fenced' if fenced else 'control: no commit fence'}): "
        f"leases granted {kinds['grant']}, expiries {kinds['expire']}, commits in _delta_log "
        f"{sum(1 for c in found.commits if c['fence'] is not None)} (fence commits {fences}), "
        f"stalls inside engine {len(run.stalls)} ({', '.join(m['operation'] for m in run.stalls)}; "
        f"{sum('write_deltalake' in m['where'] for m in run.stalls)} inside write_deltalake), "
        f"kills {run.faults['kill']}, fenced-out refusals {outcomes['fenced_out']}, "
        f"aborted before the engine {outcomes['abort']}, lost conflicts {outcomes['lost']}, "
        f"engine errors {outcomes['error']}, "
        f"late commits {len(found.late)}, commits after own lapse {len(found.after_own_lapse)} "
        f"(after a conflicting grant too {len(found.after_lapse_and_grant)}), "
        f"duplicated ids {len(found.duplicated_ids)} (rows {found.rows}), "
        f"{time.monotonic() - started:.0f} s"
    )
    ends = {r["lease_id"]: r for r in [*committed, *ended]}  # the last end logged for each lease
    for m in run.stalls:
        end = ends.get(m["lease_id"], {})
        print(f"  stalled {m['operation']} ds={m['ds']} ({m['where']}): {end.get('kind', 'no end logged')} "
              f"{end.get('why', end.get('version', ''))}"[:200])
    for c, m in found.late[:5]:
        print(f"  late: version {c['version']} {c['operation']} fence {c['fence']} after version {m['version']} "
              f"of lease {m['lease_id'][:8]} granted after it lapsed")
    return run, found, outcomes


def test_deltars_writers_stalled_inside_the_engine_never_commit_after_a_lapse(tmp_path):
    """Real delta-rs commits, writers stopped inside their engine call past their TTL and killed:
    no commit lands after one of a conflicting write admitted once its lease lapsed, no id is in
    the final table twice, and the stalled writers were refused by delta-rs (``FencedOut``)."""
    pytest.importorskip("deltalake", reason="the delta-rs adversarial run needs deltalake")
    run, found, outcomes = run_delta_adversarial(tmp_path, fenced=True)
    assert run.faults["kill"] == DELTA_FAULT_PLAN.count("kill")
    assert len(run.stalls) == sum(k.startswith("stall") for k in DELTA_FAULT_PLAN), "too few stalls in engine"
    assert outcomes["commit"] > 20 and outcomes["error"] == 0 and found.unknown_fences == []
    assert outcomes["fenced_out"] > 0, "no stalled writer was ever fenced out: the fence went unexercised"
    assert (len(found.late), len(found.duplicated_ids)) == (0, 0)


def test_deltars_control_without_the_commit_fence_shows_late_commits_and_doubled_rows(tmp_path):
    """The planted fault: the same writers with the commit fence taken away. The oracle must see
    what the fence prevents: a stalled compaction committing after one admitted in its place."""
    pytest.importorskip("deltalake", reason="the delta-rs adversarial run needs deltalake")
    run, found, outcomes = run_delta_adversarial(tmp_path, fenced=False)
    assert len(run.stalls) >= 1, "no compaction was stopped inside the engine"
    assert outcomes["error"] == 0
    assert outcomes["fenced_out"] == 0
    assert found.late and found.duplicated_ids, "the oracle did not see the missing fence"
