"""Commit-order gates, every interleaving: an explicit-state exploration of a few writers on the
real lease store (SQLite), with crashes and lapses, judged by the reference MVCC/OCC engine.

Each writer asks for its lease (``decide``), starts its transaction on the reference table when
granted (its snapshot is the table at that moment), reaches its gate (``LeaseStore.gate``: from
then on no newcomer may hold it back) and commits once the store says it is open; it may also
fail (release without committing) or crash (its lease lapses) before it commits. Every reachable state is expanded by replaying the path that
reached it on a fresh store, then taking one more step.

The oracle shares no code with admission: the reference engine (``core.reference``) validates
each commit against the commits made since its snapshot with the format's own rules; a
``CommitConflict`` there is work the admitted schedule lost. Deadlock freedom: from every
reachable state, all writers can finish without any further crash (a gate opens when the
writer it waits for commits, fails, is killed or lets its lease lapse). A planted fault (a
writer that commits without asking its gate) must be caught by the same oracle, so the oracle
is shown able to fail.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import sqlalchemy as sa

from occflow.core.errors import CommitConflict
from occflow.core.profiles import get_profile
from occflow.core.reference import ReferenceTable, Transaction
from occflow.leases import Holder, Lease, LeaseRequest, LeaseStore, make_engine, schema
from occflow.leases.history import check_history

TABLE = "lake.gates"
PARTITIONS = ("p=1", "p=2")

# (profile, writers' operations): each has a pair that is clean in one commit order only.
SCENARIOS = [
    ("delta-rs", ("insert_into", "alter_metadata", "optimize")),
    ("iceberg-serializable", ("update", "insert_into", "delete")),
    ("maxcompute-transactional", ("minor_compact", "major_compact", "insert_into")),
    ("maxcompute-standard", ("update", "insert_overwrite", "insert_into")),
    ("delta-serializable", ("merge", "insert_into", "alter_metadata")),
]

State = tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]  # phases, commit log, queue order


@dataclass
class Run:
    """One state being expanded: a copy of the store as that state left it, the reference table
    rebuilt from the state's script, and each writer's request, lease and transaction."""

    store: LeaseStore
    profile: str
    ops: tuple[str, ...]
    phases: list[str]
    leases: list[Lease | None]
    log: list[str]
    queue: list[int]
    script: list[tuple[str, int]]  # ("begin", i) at a grant, ("commit", i): the reference table's steps
    lost: list[str] = field(default_factory=list)
    gated: int = 0

    def __post_init__(self) -> None:
        self.ref = ReferenceTable(self.profile, partitions=PARTITIONS)
        self.ref.run("insert_into")  # something to update, delete and compact
        self.txns: list[Transaction | None] = [None] * len(self.ops)
        for verb, i in self.script:
            if verb == "begin":
                self.txns[i] = self.ref.begin(self.ops[i])
            else:
                with contextlib.suppress(CommitConflict):  # recorded when it happened
                    self.txns[i].commit()  # type: ignore[union-attr]
        self.requests = [
            LeaseRequest.create(TABLE, op, self.profile, whole_table=True, commit_gate=True,
                                holder=Holder("dag", f"w{i}", "run", 1), request_id=f"req{i}")
            for i, op in enumerate(self.ops)
        ]

    def state(self) -> State:
        return tuple(self.phases), tuple(self.log), tuple(self.queue)

    def saved(self) -> Saved:
        return Saved(tuple(self.phases), tuple(self.leases), tuple(self.log), tuple(self.queue), tuple(self.script))

    def actions(self) -> Iterator[str]:
        for i, phase in enumerate(self.phases):
            if phase in ("idle", "queued"):
                yield f"ask{i}"
            if phase in ("running", "at_gate"):
                yield f"commit{i}"
                yield f"fail{i}"
                yield f"crash{i}"
            if phase == "committed":
                yield f"release{i}"

    def step(self, action: str, *, ignore_gate: bool = False) -> bool:
        """Take ``action``; False if it changes nothing (a poll still queued, a closed gate)."""
        verb, i = action.rstrip("0123456789"), int(action[-1])
        if verb == "ask":
            admission = self.store.decide(self.requests[i])
            if admission.lease is None:
                if self.phases[i] == "queued":
                    return False
                self.phases[i] = "queued"
                self.queue.append(i)
                return True
            if i in self.queue:
                self.queue.remove(i)
            self.leases[i] = admission.lease
            self.gated += bool(admission.lease.awaits)
            self.txns[i] = self.ref.begin(self.ops[i])  # its snapshot: the table now
            self.script.append(("begin", i))
            self.phases[i] = "running"
            return True
        lease = self.leases[i]
        assert lease is not None
        if verb == "commit":
            if not ignore_gate and self.store.gate(lease):
                if self.phases[i] == "at_gate":
                    return False  # still closed
                self.phases[i] = "at_gate"  # reached it: waits there, and nobody may hold it back now
                return True
            txn = self.txns[i]
            assert txn is not None
            try:
                txn.commit()
            except CommitConflict as exc:
                self.lost.append(f"w{i} {self.ops[i]} lost after {self.log}: {exc}")
            self.script.append(("commit", i))
            self.log.append(f"w{i}")
            self.phases[i] = "committed"
        elif verb in ("fail", "release"):
            self.store.release(lease)
            self.phases[i] = "done"
        elif verb == "crash":
            with self.store.engine.begin() as conn:  # the holder died: its lease lapses ...
                conn.execute(schema.leases.update().where(schema.leases.c.lease_id == lease.lease_id)
                             .values(expires_at=0.0))
            self.store.reclaim_expired()  # ... and the store's sweep records its expiry
            self.phases[i] = "dead"
        return True


@dataclass(frozen=True)
class Saved:
    """What a reached state keeps beside its copy of the store, to expand it later."""

    phases: tuple[str, ...]
    leases: tuple[Lease | None, ...]
    log: tuple[str, ...]
    queue: tuple[int, ...]
    script: tuple[tuple[str, int], ...]


@dataclass
class Exploration:
    states: dict[State, tuple[str, ...]]
    edges: dict[State, set[tuple[str, State]]]
    lost: list[str]
    history_violations: list[str]
    gated_grants: int
    holding_grants: int = 0  # grants that held a running writer's commit for theirs


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


def _open(db: Path, profile: str, ops: tuple[str, ...], saved: Saved) -> Run:
    store = LeaseStore(make_engine(f"sqlite:///{db}"), history=True, create=False)
    return Run(store, profile, ops, list(saved.phases), list(saved.leases), list(saved.log),
               list(saved.queue), list(saved.script))


def explore(tmp: Path, profile: str, ops: tuple[str, ...], *, ignore_gate: bool = False,
            stop_at_loss: bool = False) -> Exploration:
    """Every state reachable from the start. Each reached state keeps a copy of its store; to
    expand it, each possible step is taken on a fresh copy of that copy."""
    start_db = tmp / "state0.db"
    LeaseStore.from_url(f"sqlite:///{start_db}").dispose()
    n = len(ops)
    start = Saved(("idle",) * n, (None,) * n, (), (), ())
    start_state: State = (start.phases, (), ())
    saved: dict[State, tuple[Path, Saved]] = {start_state: (start_db, start)}
    states: dict[State, tuple[str, ...]] = {start_state: ()}
    edges: dict[State, set[tuple[str, State]]] = {}
    frontier, lost, violations, gated, holding = [start_state], [], [], 0, 0
    work = tmp / "work.db"
    while frontier and not (stop_at_loss and lost):
        state = frontier.pop()
        db, here = saved[state]
        edges[state] = set()
        for action in list(_open(db, profile, ops, here).actions()):
            shutil.copyfile(db, work)
            run = _open(work, profile, ops, here)
            try:
                if not run.step(action, ignore_gate=ignore_gate):
                    continue
                nxt = run.state()
                lost += run.lost
                gated += run.gated
                if nxt not in states:
                    events = run.store.history_events()
                    violations += [v.message for v in check_history(events)]
                    holding += action.startswith("ask") and any(e["kind"] == "grant" and e["holds"] for e in events[-3:])
            finally:
                run.store.dispose()
            edges[state].add((action, nxt))
            if nxt not in states:
                states[nxt] = (*states[state], action)
                kept = tmp / f"state{len(states)}.db"
                work.rename(kept)
                saved[nxt] = (kept, run.saved())
                frontier.append(nxt)
    return Exploration(states, edges, lost, violations, gated, holding)


def _finished(state: State) -> bool:
    return all(p in ("done", "dead") for p in state[0])


def stuck_states(found: Exploration) -> list[State]:
    """States from which no crash-free sequence of steps finishes every writer."""
    can_finish = {s for s in found.states if _finished(s)}
    changed = True
    while changed:
        changed = False
        for state, out in found.edges.items():
            if state not in can_finish and any(
                not action.startswith("crash") and nxt in can_finish for action, nxt in out
            ):
                can_finish.add(state)
                changed = True
    return [s for s in found.states if s not in can_finish]


@pytest.mark.parametrize(
    ("profile", "ops"),
    # One scenario in the default run (~10 s); all of them under CI's slow pass.
    [SCENARIOS[0], *(pytest.param(*s, marks=pytest.mark.slow) for s in SCENARIOS[1:])],
    ids=[s[0] for s in SCENARIOS],
)
def test_no_interleaving_loses_work_or_deadlocks(tmp: Path, profile: str, ops: tuple[str, ...]) -> None:
    found = explore(tmp, profile, ops)
    print(f"{profile}: {len(found.states)} states, {found.gated_grants} grants awaiting, "
          f"{found.holding_grants} holding a running writer")
    assert found.lost == [], found.lost[:3]
    assert found.history_violations == [], found.history_violations[:3]
    assert stuck_states(found) == []
    # Not vacuous: the gates were used both ways, and writers ran side by side under them.
    assert found.gated_grants > 0 and found.holding_grants > 0
    assert any(state[0].count("running") >= 2 for state in found.states), "no two writers ever overlapped"


@pytest.mark.parametrize(("profile", "ops"), SCENARIOS[:2], ids=[s[0] for s in SCENARIOS[:2]])
def test_the_oracle_catches_a_writer_that_commits_past_its_gate(
    tmp: Path, profile: str, ops: tuple[str, ...]
) -> None:
    """Planted fault: writers commit without asking their gate; the reference engine sees the
    lost work. Shows the exploration can fail."""
    found = explore(tmp, profile, ops, ignore_gate=True, stop_at_loss=True)
    assert found.lost, "committing past the gate should lose work in some interleaving"


def test_gate_rows_go_with_their_lease(tmp: Path) -> None:
    """Nothing of a gate outlives its waiter (released or lapsed)."""
    db = tmp / "one.db"
    LeaseStore.from_url(f"sqlite:///{db}").dispose()
    run = _open(db, "delta-rs", ("insert_into", "alter_metadata"), Saved(("idle", "idle"), (None, None), (), (), ()))
    for action in ("ask0", "ask1", "crash1"):
        assert run.step(action)
    assert run.leases[1] is not None and run.leases[1].awaits == {run.leases[0].lease_id}  # type: ignore[union-attr]
    run.store.decide(LeaseRequest.create(TABLE, "insert_into", "delta-rs", whole_table=True))  # reclaims
    with run.store.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(schema.gates)).scalar() == 0
    assert get_profile("delta-rs").commit_is_clean("insert_into", "alter_metadata")


def test_a_gate_opens_when_the_lease_it_awaits_lapses_unreclaimed(tmp_path: Path) -> None:
    """A holder that dies stops beating: its lease lapses by the store's clock, with nobody
    deciding on the table meanwhile, and the waiter's gate opens then, not before."""
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'lapse.db'}", history=True)
    first = store.decide(LeaseRequest.create(TABLE, "insert_into", "delta-rs", whole_table=True, ttl=1.5)).lease
    assert first is not None
    later = store.decide(LeaseRequest.create(TABLE, "alter_metadata", "delta-rs", whole_table=True,
                                             commit_gate=True)).lease
    assert later is not None and later.awaits == {first.lease_id}
    assert [lease.lease_id for lease in store.gate(later)] == [first.lease_id]
    waited = store.wait_gate(later, timeout=30)  # woken by the lapse, no release, no decision
    assert 0.5 < waited < 10, waited
    assert store.gate(later) == []
    assert check_history(store.history_events()) == []


def test_a_writer_that_cannot_hold_its_commit_is_not_gated(tmp_path: Path) -> None:
    """Without ``commit_gate`` (a caller of the bare store) the pair waits as before; with
    ``order_aware=False`` every blocking pair waits."""
    for order_aware, commit_gate, granted in ((True, False, False), (False, True, False), (True, True, True)):
        store = LeaseStore.from_url(f"sqlite:///{tmp_path / f'{order_aware}{commit_gate}.db'}", order_aware=order_aware)
        assert store.decide(LeaseRequest.create(TABLE, "insert_into", "delta-rs", whole_table=True)).granted
        later = LeaseRequest.create(TABLE, "alter_metadata", "delta-rs", whole_table=True, commit_gate=commit_gate)
        assert store.decide(later).granted is granted
        # The other order is never gated: an insert_into beside a live alter_metadata would fail.
        store2 = LeaseStore.from_url(f"sqlite:///{tmp_path / f'r{order_aware}{commit_gate}.db'}", order_aware=order_aware)
        assert store2.decide(LeaseRequest.create(TABLE, "alter_metadata", "delta-rs", whole_table=True)).granted
        assert not store2.decide(LeaseRequest.create(TABLE, "insert_into", "delta-rs", whole_table=True,
                                                     commit_gate=commit_gate)).granted
