"""One admission rule: the lease store, the simulator and ``occflow explain --against`` give the
same ruling for every pair of operations of every profile, with commit gates on and off (issue
32: ``explain --against`` kept the rule from before the commit gates and called an Iceberg MERGE
and an INSERT INTO a conflict while the store granted the insert, its commit held at the gate).

Each is asked as a user asks it: a real ``LeaseStore`` on SQLite takes the running write's lease
and decides the newcomer (its gates read back through ``LeaseStore.gate``); the simulator runs
the two jobs and the ruling is read from what happened (when the newcomer started, whose commit
was held); ``occflow explain NEWCOMER --against RUNNING --format json`` is run through the CLI's
``main``. The oracle none of them shares: the ruling spelled out from the profile's raw matrix
cells (both commit orders: does the later fail, is the data wrong), and in the simulator, that
no attempt of an admitted pair ever loses a commit.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from occflow.cli import main
from occflow.cli.explain import explain_job
from occflow.core.admission_rule import Claim, Running, rule
from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES, Profile
from occflow.core.tablefacts import TableFacts
from occflow.leases import LeaseRequest, LeaseStore
from occflow.sim.policies import MatrixAdmission, build_policy
from occflow.sim.simulator import simulate
from occflow.sim.workload import parse_workload

DAY, OTHER_DAY = "ds=2024-01-01", "ds=2024-01-02"
#: The running write's partitions and the newcomer's: one partition, or two different ones.
FOOTPRINTS = {"same partition": (DAY, DAY), "disjoint partitions": (DAY, OTHER_DAY)}
GATES = (True, False)


# ----------------------------------------------------------------------------- the oracle


def expected(profile: Profile, running: Operation, newcomer: Operation, *, overlap: bool, gate: bool) -> str:
    """The ruling read from the raw cells: a commit order is clean when the later write commits
    and the data is right. Disjoint partitions never meet, unless a write's commit is validated
    against the whole table (a metadata change; an operation the profile says reads every file)."""
    whole = {op for op in (running, newcomer) if op.changes_table_metadata or op in profile.reads_whole_table}
    if not overlap and not whole:
        return "granted"

    def clean(earlier: Operation, later: Operation) -> bool:
        return profile.commit_is_clean(earlier, later)

    running_first, newcomer_first = clean(running, newcomer), clean(newcomer, running)
    if running_first and newcomer_first:
        return "granted"
    if gate and running_first:
        return "awaits"
    if gate and newcomer_first:
        return "holds"
    return "blocked"


def test_the_oracle_reads_the_cells_the_way_the_spec_rows_say() -> None:
    # Spec rows read by hand, so the oracle itself is checked against something it does not compute.
    iceberg = PROFILES["iceberg-serializable"]
    merge, insert = Operation.MERGE, Operation.INSERT_INTO
    # Iceberg serializable: a MERGE fails on rows appended meanwhile; an append after a MERGE commits.
    assert iceberg.cell(insert, merge).later_fails and not iceberg.cell(merge, insert).later_fails
    # So an insert beside a running MERGE commits after it; a MERGE beside a running insert first.
    assert expected(iceberg, merge, insert, overlap=True, gate=True) == "awaits"
    assert expected(iceberg, insert, merge, overlap=True, gate=True) == "holds"
    assert expected(iceberg, merge, insert, overlap=True, gate=False) == "blocked"
    # Two MERGEs on one partition fail in both orders; on two partitions they never meet.
    assert expected(iceberg, merge, merge, overlap=True, gate=True) == "blocked"
    assert expected(iceberg, merge, merge, overlap=False, gate=True) == "granted"


# ----------------------------------------------------------------------------- the three rooms


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> LeaseStore:
    return LeaseStore.from_url(f"sqlite:///{tmp_path_factory.mktemp('admission') / 'leases.db'}")


_tables = itertools.count()


def store_ruling(store: LeaseStore, running: Claim, newcomer: Claim, gate: bool) -> str:
    """Take the running write's lease, decide the newcomer, read the gates back."""
    table = f"db.agreement_{next(_tables)}"  # a fresh table: nothing else on it

    def request(claim: Claim) -> LeaseRequest:
        parts = None if claim.partitions is None else sorted(claim.partitions)
        return LeaseRequest.create(table, claim.operation, claim.profile, parts, whole_table=parts is None,
                                   commit_gate=gate)

    held = store.decide(request(running)).lease
    assert held is not None, "the first write on a fresh table is always granted"
    ask = request(newcomer)
    # What the conflict-free sensor reads: the leases that keep the pair apart without a gate.
    sensed = [lease.lease_id for lease in store.blocking_leases(ask)]
    assert sensed == ([held.lease_id] if newcomer.blocks(running) else []), (running, newcomer)
    decided = store.decide(ask)
    if decided.lease is None:
        assert [b.ident for b in decided.blockers] == [held.lease_id]
        store.release(held)
        return "blocked"
    mine = decided.lease
    awaits = held.lease_id in {lease.lease_id for lease in store.gate(mine)}
    holds = mine.lease_id in {lease.lease_id for lease in store.gate(held)}
    store.release(mine)
    store.release(held)
    return {(False, False): "granted", (True, False): "awaits", (False, True): "holds"}[(awaits, holds)]


def sim_ruling(profile: Profile, running: Claim, newcomer: Claim, gate: bool) -> str:
    """Run the two jobs (the running one first, 10 s; the newcomer a second later) and read the
    ruling from what happened: it started at once or not; its commit or the other's was held.
    A short newcomer shows whether its commit waits; a long one, whether it holds the other's."""
    short = _simulated(profile, running, newcomer, gate, newcomer_seconds=1.0)
    long = _simulated(profile, running, newcomer, gate, newcomer_seconds=20.0)
    for run in (short, long):
        # The oracle the simulator's commit validator gives: an admitted pair never loses a commit.
        assert run.metrics.failed_attempts == 0, (profile.name, running, newcomer, gate)
    first = {a.job: a for a in reversed(short.attempts)}
    if first[1].start > 1.0:
        return "blocked"
    if first[1].held > 0:
        return "awaits"
    if {a.job: a for a in reversed(long.attempts)}[0].held > 0:
        return "holds"
    return "granted"


def _simulated(profile: Profile, running: Claim, newcomer: Claim, gate: bool, newcomer_seconds: float) -> Any:
    def job(name: str, claim: Claim, seconds: float, arrival: float) -> dict[str, Any]:
        parts = "all" if claim.partitions is None else sorted(claim.partitions)
        return {"name": name, "table": "t", "operation": claim.operation.value, "partitions": parts,
                "duration": seconds, "arrival": arrival}

    workload = parse_workload({
        "slots": 4,
        "tables": [{"name": "t", "profile": profile.name, "partitions": [DAY, OTHER_DAY]}],
        "jobs": [job("running", running, 10.0, 0.0), job("newcomer", newcomer, newcomer_seconds, 1.0)],
        "policies": {"airflow": {"admission_latency": 0, "requeue_delay": 0}},
    }, "agreement.yaml")
    policy = build_policy("occflow", workload)
    return simulate(workload, replace(policy, admission=MatrixAdmission(order_aware=gate)))


def core_ruling(running: Claim, newcomer: Claim, gate: bool) -> str:
    return rule(newcomer, [Running("running", running, gate)], commit_gate=gate).verdict.value


def _pairs() -> list[tuple[str, Operation, Operation, str]]:
    return [(name, a, b, where) for name, profile in PROFILES.items()
            for a, b in itertools.product(profile.operations, repeat=2) for where in FOOTPRINTS]


@pytest.mark.parametrize("gate", GATES, ids=lambda g: "gates" if g else "no-gates")
def test_store_simulator_and_rule_agree_with_the_cells_on_every_pair_of_every_profile(
        store: LeaseStore, gate: bool) -> None:
    disagreements = []
    seen = set()
    for name, a, b, where in _pairs():
        profile = PROFILES[name]
        run_keys, new_keys = FOOTPRINTS[where]
        running, newcomer = Claim(profile, a, frozenset({run_keys})), Claim(profile, b, frozenset({new_keys}))
        want = expected(profile, a, b, overlap=run_keys == new_keys, gate=gate)
        found = {"store": store_ruling(store, running, newcomer, gate),
                 "simulator": sim_ruling(profile, running, newcomer, gate),
                 "rule": core_ruling(running, newcomer, gate)}
        seen.add(want)
        if set(found.values()) != {want}:
            disagreements.append(f"{name}: {a.value} running, {b.value} new, {where}: cells say {want}, {found}")
    assert not disagreements, "\n".join(disagreements[:20])
    # Every ruling occurs: the pairs exercise each branch of the rule.
    assert seen == ({"granted", "awaits", "holds", "blocked"} if gate else {"granted", "blocked"})


# ----------------------------------------------------------------------------- explain --against

#: One statement per operation (``{d}``: the day). ``explain`` reads each as a user's SQL job.
SQL = [
    "INSERT OVERWRITE TABLE db.t PARTITION (ds = '{d}') SELECT v FROM s",
    "TRUNCATE TABLE db.t PARTITION (ds = '{d}')",
    "TRUNCATE TABLE db.t",
    "INSERT INTO db.t PARTITION (ds = '{d}') SELECT v FROM s",
    "INSERT INTO db.t SELECT * FROM s",
    "UPDATE db.t SET v = 1 WHERE ds = '{d}'",
    "DELETE FROM db.t WHERE ds = '{d}'",
    "DELETE FROM db.t",
    "MERGE INTO db.t t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *",
    "OPTIMIZE db.t WHERE ds = '{d}'",
    "ALTER TABLE db.t ADD COLUMNS (c STRING)",
    "REORG TABLE db.t APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION = 2))",
    "ALTER TABLE db.t PARTITION (ds = '{d}') MERGE SMALLFILES",
    "ALTER TABLE db.t PARTITION (ds = '{d}') COMPACT MINOR",
    "ALTER TABLE db.t PARTITION (ds = '{d}') COMPACT MAJOR",
    "VACUUM db.t RETAIN 168 HOURS",
    "CALL system.expire_snapshots(table => 'db.t', retain_last => 5)",
    "CALL system.remove_orphan_files(table => 'db.t')",
    "CALL system.rewrite_manifests(table => 'db.t')",
    "CALL system.rewrite_position_delete_files(table => 'db.t')",
]
SNAPSHOT = [f"write.{kind}.isolation-level=snapshot" for kind in ("delete", "update", "merge")]
DV = "delta.enableDeletionVectors=true"
#: The table as a user names it to ``explain`` (format, partition columns, properties), per profile.
TABLES: dict[str, tuple[str, str, list[str]]] = {
    "maxcompute-standard": ("maxcompute", "ds", []),
    "maxcompute-transactional": ("maxcompute-transactional", "ds", []),
    "delta-serializable": ("delta", "ds", ["delta.isolationLevel=Serializable"]),
    "delta-write-serializable": ("delta", "ds", []),
    "delta-serializable-rlc": ("delta", "", ["delta.isolationLevel=Serializable", DV]),
    "delta-write-serializable-rlc": ("delta", "", [DV]),
    "delta-rs": ("delta-rs", "ds", []),
    "iceberg-serializable": ("iceberg", "ds", []),
    "iceberg-snapshot": ("iceberg", "ds", SNAPSHOT),
}
#: What no table's facts or SQL reach through ``explain``: the ``-validated`` Iceberg profiles
#: follow a write option, not the table; MaxCompute's clustering has no SQL statement here; on a
#: row-level-concurrency Delta table an OPTIMIZE (maybe ZORDER BY) follows the plain matrix, so
#: its pairs with the table's other writes are pairs of two profiles. The test above covers these
#: in the store, the simulator and the rule.
UNREACHED = {"iceberg-serializable-validated": None, "iceberg-snapshot-validated": None,
             "maxcompute-standard": {Operation.CLUSTERING}, "maxcompute-transactional": {Operation.CLUSTERING},
             "delta-serializable-rlc": {Operation.OPTIMIZE}, "delta-write-serializable-rlc": {Operation.OPTIMIZE}}


def _facts(name: str) -> TableFacts:
    """The facts ``explain`` builds from ``TABLES[name]`` (checked against its output below)."""
    table_format, columns, properties = TABLES[name]
    fmt, engine, implied = {
        "maxcompute": ("maxcompute", None, {}), "maxcompute-transactional": ("maxcompute", None, {"transactional": "true"}),
        "delta": ("delta", None, {}), "delta-rs": ("delta", "delta-rs", {}), "iceberg": ("iceberg", None, {}),
    }[table_format]
    props = {**implied, **dict(p.split("=", 1) for p in properties)}
    return TableFacts("db.t", fmt, engine, tuple(c for c in columns.split(",") if c), props)


def _jobs(name: str) -> dict[str, Claim]:
    """Every statement, on each day, that ``explain`` reads on this table as an operation its
    profile knows: the claim its lease would make."""
    facts, found = _facts(name), {}
    for template in SQL:
        for day in ("2024-01-01", "2024-01-02"):
            sql = template.format(d=day)
            try:
                job = explain_job(sql, facts)
            except Exception:  # noqa: BLE001 - a statement this table's reader refuses is not its job
                continue
            if job.derived.operation in job.profile.operations:
                found[sql] = job.claim
    return found


def explain_rulings(capsys: pytest.CaptureFixture[str], name: str, newcomer: str, running: list[str],
                    gate: bool) -> list[dict[str, Any]]:
    """``occflow explain NEWCOMER --against RUNNING ... --format json``, as a user runs it."""
    table_format, columns, properties = TABLES[name]
    args = ["explain", newcomer, "--table-format", table_format, "--format", "json"]
    args += ["--partition-columns", columns] if columns else []
    args += [x for p in properties for x in ("--property", p)]
    args += [x for sql in running for x in ("--against", sql)]
    args += [] if gate else ["--no-commit-gate"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    return list(out["against"])


@pytest.mark.parametrize("name", sorted(TABLES))
def test_explain_against_agrees_with_the_store_on_every_pair(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> None:
    jobs = _jobs(name)
    profiles = {claim.profile.name for claim in jobs.values()}
    assert name in profiles
    # Every operation of the profile is met (but what no SQL reaches: UNREACHED).
    ops = {claim.operation for claim in jobs.values() if claim.profile.name == name}
    assert set(PROFILES[name].operations) - ops == (UNREACHED.get(name) or set()), name
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    running = [sql for sql in jobs if "2024-01-02" not in sql]
    disagreements, rulings = [], set()
    for gate in GATES:
        for newcomer, claim in jobs.items():
            for sql, found in zip(running, explain_rulings(capsys, name, newcomer, running, gate), strict=True):
                other = jobs[sql]
                assert found["operation"] == other.operation.value and found["profile"] == other.profile.name
                stored = store_ruling(store, other, claim, gate)
                rulings.add(stored)
                if found["conflict"] != (stored == "blocked") or found.get("admission") != stored:
                    disagreements.append(f"gates {gate}: {newcomer!r} against {sql!r}: explain says "
                                         f"{found.get('admission')} (conflict {found['conflict']}), the store {stored}")
                if other.profile == claim.profile:  # the cells' oracle (one table, one matrix)
                    overlap = bool(other.reach is None or claim.reach is None or other.reach & claim.reach)
                    want = expected(claim.profile, other.operation, claim.operation, overlap=overlap, gate=gate)
                    assert stored == want, f"{newcomer!r} against {sql!r}, gates {gate}: store {stored}, cells {want}"
    assert not disagreements, "\n".join(disagreements[:20])
    assert {"granted", "blocked"} <= rulings


def test_an_iceberg_insert_beside_a_running_merge_is_granted_its_commit_held_until_the_merges(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # Issue 32's case, end to end: what explain prints is what the store does.
    merge = "MERGE INTO db.t t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET *"
    insert = "INSERT INTO db.t SELECT * FROM s"
    [found] = explain_rulings(capsys, "iceberg-serializable", insert, [merge], gate=True)
    assert (found["admission"], found["conflict"]) == ("awaits", False)
    assert "this job's commit waits at its gate until the other's lease ends" in found["reason"]
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    facts = _facts("iceberg-serializable")
    assert store_ruling(store, explain_job(merge, facts).claim, explain_job(insert, facts).claim, True) == "awaits"
    [blind] = explain_rulings(capsys, "iceberg-serializable", insert, [merge], gate=False)
    assert (blind["admission"], blind["conflict"]) == ("blocked", True)


# ----------------------------------------------------------------------------- durations (issue 38)

#: The running write takes 10 s; the newcomer asks 1 s later (the simulator) or at once (the store,
#: whose running lease was just granted). Newcomer lengths chosen so that each side of ``k`` = 1 is
#: met: an AFTER newcomer of 1 s would wait 8-9 s at its gate (refused), one of 6 s 3-4 s (granted);
#: a BEFORE newcomer of 15 s holds the running write 5-6 s (granted), one of 25 s 15-16 s (refused).
RUNNING_SECONDS = 10.0
NEWCOMER_SECONDS = {"after": (1.0, 6.0), "before": (15.0, 25.0)}


def expected_with_durations(profile: Profile, running: Operation, newcomer: Operation, seconds: float,
                            remaining: float) -> str:
    """The cells' ruling, then the gate bound worked out from the timeline (k = 1)."""
    found = expected(profile, running, newcomer, overlap=True, gate=True)
    if found == "awaits" and remaining - seconds > seconds:
        return "blocked"  # its commit would wait longer at the gate than it works
    if found == "holds" and seconds - remaining > RUNNING_SECONDS:
        return "blocked"  # it would hold the running write's commit longer than that write works
    return found


def store_ruling_with_durations(store: LeaseStore, running: Claim, newcomer: Claim, seconds: float) -> str:
    """The store's transaction path (``live_and_waiting``, ``blockers_of`` with ``Estimates``,
    ``without_cycles``) on real lease rows, the estimates given per lease and request id."""
    from occflow.core.admission_rule import Durations
    from occflow.leases.transaction import Estimates, blockers_of

    table = f"db.durations_{next(_tables)}"

    def request(claim: Claim) -> LeaseRequest:
        return LeaseRequest.create(table, claim.operation, claim.profile, sorted(claim.partitions or ()),
                                   commit_gate=True)

    held = store.decide(request(running)).lease
    assert held is not None
    ask = request(newcomer)
    with store._locked(table) as tx:  # noqa: SLF001 - the decision's own transaction, as ``_decide`` opens it
        live, waiting = tx.live_and_waiting(ask)
        estimates = Estimates(Durations(), tx.now, {held.lease_id: RUNNING_SECONDS, ask.request_id: seconds})
        ruling = tx.without_cycles(
            blockers_of(ask, live, waiting, (tx.now, tx.now, ask.request_id), order_aware=True, estimates=estimates),
            live)
    store.release(held)
    if ruling.blockers:
        assert [b.ident for b in ruling.blockers] == [held.lease_id]
        return "blocked"
    return "awaits" if ruling.awaits else "holds" if ruling.holds else "granted"


def _exclusive(profile: Profile) -> Operation:
    """An operation two of which on one partition never run together (by the cells)."""
    return next(op for op in profile.operations if expected(profile, op, op, overlap=True, gate=True) == "blocked")


def sim_ruling_with_durations(profile: Profile, running: Claim, newcomer: Claim, seconds: float) -> str:
    """Three slots; on another table a write runs and a second one waits for it: a slot is wanted
    besides the newcomer's (the gate bound applies), and the one left is free for the newcomer."""
    def job(name: str, table: str, operation: Operation, duration: float, arrival: float) -> dict[str, Any]:
        return {"name": name, "table": table, "operation": operation.value, "partitions": [DAY],
                "duration": duration, "arrival": arrival}

    other = _exclusive(profile)
    workload = parse_workload({
        "slots": 3,
        "tables": [{"name": "t", "profile": profile.name, "partitions": [DAY]},
                   {"name": "other", "profile": profile.name, "partitions": [DAY]}],
        "jobs": [job("running", "t", running.operation, RUNNING_SECONDS, 0.0),
                 job("newcomer", "t", newcomer.operation, seconds, 1.0),
                 job("holding", "other", other, 30.0, 0.0), job("wanting", "other", other, 1.0, 1.0)],
        "policies": {"airflow": {"admission_latency": 0, "requeue_delay": 0}},
    }, "durations.yaml")
    run = simulate(workload, build_policy("occflow", workload))
    assert run.metrics.failed_attempts == 0, (profile.name, running, newcomer, seconds)
    first = {a.job: a for a in reversed(run.attempts)}
    if first[1].start > 1.0:
        return "blocked"
    if first[1].held > 0:
        return "awaits"
    return "holds" if first[0].held > 0 else "granted"


def test_store_simulator_and_rule_agree_on_the_gate_bound_from_durations(store: LeaseStore) -> None:
    from occflow.core.admission_rule import Durations

    disagreements, seen = [], set()
    for name, a, b, where in _pairs():
        if where != "same partition":
            continue
        profile = PROFILES[name]
        running, newcomer = Claim(profile, a, frozenset({DAY})), Claim(profile, b, frozenset({DAY}))
        blind = expected(profile, a, b, overlap=True, gate=True)
        if blind not in ("awaits", "holds") or core_ruling(running, newcomer, True) != blind:
            continue  # the bound is about gates; pairs the blind rule gets wrong fail the test above
        for seconds in NEWCOMER_SECONDS["after" if blind == "awaits" else "before"]:
            found = {
                "store": store_ruling_with_durations(store, running, newcomer, seconds),
                "simulator": sim_ruling_with_durations(profile, running, newcomer, seconds),
                "rule": rule(newcomer, [Running("r", running, True, False, RUNNING_SECONDS - 1.0, RUNNING_SECONDS)],
                             commit_gate=True, durations=Durations(), estimate=seconds).verdict.value,
            }
            # The store decides at once (10 s left), the simulator a second later (9 s): same side of k.
            want = expected_with_durations(profile, a, b, seconds, RUNNING_SECONDS - 1.0)
            assert want == expected_with_durations(profile, a, b, seconds, RUNNING_SECONDS)
            seen.add((blind, want))
            if set(found.values()) != {want}:
                disagreements.append(f"{name}: {a.value} running, {b.value} new ({seconds:g} s): cells and "
                                     f"timeline say {want}, {found}")
    assert not disagreements, "\n".join(disagreements[:20])
    assert seen == {("awaits", "blocked"), ("awaits", "awaits"), ("holds", "holds"), ("holds", "blocked")}
