"""Lint and pool planning over declared writes (pure logic; the DAG-folder tests are in test_cli)."""

from __future__ import annotations

import random

from occflow.core.declaration import WriteDeclaration
from occflow.core.profiles import get_profile
from occflow.lint.planning import DeclaredTask, collisions, plan_pools

DAILY_2AM = tuple(7200.0 + 86400 * d for d in range(35))
DAILY_4AM = tuple(14400.0 + 86400 * d for d in range(35))


def task(dag, tid, op, table="db.t", profile="iceberg-serializable", parts=None, **kw):
    write = WriteDeclaration.create(table, op, profile, partitions=parts, allow_templates=True)
    kw.setdefault("firings", DAILY_2AM)
    return DeclaredTask(dag, tid, write, **kw)


def pairs(found):
    return {(c.first.ident, c.second.ident) for c in found}


def test_independent_tasks_in_one_dag_collide_and_dependent_ones_do_not():
    load = task("d", "load", "insert_into")
    merge = task("d", "merge", "merge", upstream=frozenset({"load"}))
    update = task("d", "update", "update")
    found = collisions([load, merge, update])
    assert pairs(found) == {("d.load", "d.update"), ("d.merge", "d.update")}
    cell_pairs = {(c.earlier.value, c.later.value) for f in found for c in f.cells}
    profile = get_profile("iceberg-serializable")
    assert all(profile.cell(e, later).later_fails for e, later in cell_pairs)


def test_partitions_templates_and_schedules_decide_overlap():
    a = task("a", "t", "update", parts={"ds": "2024-01-01"})
    b = task("b", "t", "update", parts={"ds": "2024-01-02"})
    c = task("c", "t", "update", parts={"ds": "{{ ds }}"})
    far = task("e", "t", "update", parts={"ds": "2024-01-01"}, firings=DAILY_4AM)
    manual = task("m", "t", "update", parts={"ds": "2024-01-02"}, firings=None, schedule="manual")
    found = pairs(collisions([a, b, c, far, manual], window=3600))
    # Literal partitions differ: no overlap. A template may be any partition.
    assert ("a.t", "b.t") not in found
    assert ("a.t", "c.t") in found and ("b.t", "c.t") in found
    # Same partition, but runs start two hours apart with a one-hour window.
    assert ("a.t", "e.t") not in found
    assert ("a.t", "e.t") in pairs(collisions([a, far], window=3 * 3600))
    # A manual DAG may run at any time.
    assert ("b.t", "m.t") in found


def test_a_task_collides_with_itself_only_across_concurrent_runs_on_a_fixed_footprint():
    fixed = task("d", "fixed", "update", max_active_runs=2)
    per_run = task("p", "per_run", "update", parts={"ds": "{{ ds }}"}, max_active_runs=2)
    single = task("s", "single", "update", max_active_runs=1, table="db.other")
    assert pairs(collisions([fixed, per_run, single])) == {("d.fixed", "d.fixed"), ("d.fixed", "p.per_run")}


def test_planned_pools_keep_every_colliding_pair_apart_and_let_compatible_tasks_share():
    rnd = random.Random(7)
    profiles = ["iceberg-serializable", "maxcompute-standard", "maxcompute-transactional", "delta-serializable"]
    for _ in range(30):
        tasks = []
        for i in range(rnd.randint(2, 12)):
            profile = get_profile(rnd.choice(profiles))
            table = f"db.{profile.name.replace('-', '_')}_{rnd.randint(0, 1)}"
            parts = rnd.choice([None, {"ds": "1"}, {"ds": "2"}, {"ds": "{{ ds }}"}])
            up = frozenset(f"t{j}" for j in range(i) if rnd.random() < 0.2)
            tasks.append(DeclaredTask(f"dag{rnd.randint(0, 2)}", f"t{i}", WriteDeclaration.create(
                table, rnd.choice(profile.operations), profile, partitions=parts, allow_templates=True),
                upstream=up, max_active_runs=rnd.choice([1, 2]), firings=rnd.choice([DAILY_2AM, DAILY_4AM])))
        found = collisions(tasks)
        pools = plan_pools(tasks)
        where = {t: (p, slots) for p in pools for t, slots in p.task_slots}
        for c in found:
            (pa, sa), (pb, sb) = where[c.first.ident], where[c.second.ident]
            assert pa is pb, "colliding tasks must share a pool"
            # Two runs of the same task also must not fit together.
            assert sa + sb > pa.slots, (c.first.ident, c.second.ident, sa, sb, pa.slots)
        colliding = {c.first.ident for c in found} | {c.second.ident for c in found}
        assert set(where) == colliding  # tasks that collide with nothing need no pool
        for p in pools:
            if p.slots == 1:
                continue  # a mutex: every task takes the one slot
            shared = {t for t, s in p.task_slots if s == 1}
            assert len(shared) == p.slots
            # Tasks that take one slot each may run together, so none of them collide.
            assert not any({c.first.ident, c.second.ident} <= shared for c in found)
