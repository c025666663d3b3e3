"""Lint and pool planning over declared writes (pure logic; the DAG-folder tests are in test_cli)."""

from __future__ import annotations

import random

from occflow.core.declaration import WriteDeclaration
from occflow.core.profiles import get_profile
from occflow.lint.planning import (
    DeclaredTask,
    FindingKind,
    collisions,
    footprint_overlap,
    plan_pools,
    why_together,
)

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


def test_two_delta_rs_compactions_of_one_partition_are_reported_as_corrupting_data_first():
    # Declared under the documented Delta profile, but both run on delta-rs, whose two OPTIMIZEs
    # of the same files both commit and duplicate the rows: the engine's matrix decides.
    declared = "delta-write-serializable"
    first = task("d", "compact_a", "optimize", profile=declared, parts={"ds": "1"}, engine="delta-rs")
    second = task("d", "compact_b", "optimize", profile=declared, parts={"ds": "1"}, engine="delta-rs")
    update = task("d", "update", "update", profile=declared, parts={"ds": "1"}, upstream=frozenset({"compact_a"}))
    found = collisions([update, first, second])
    assert found[0].kind is FindingKind.CORRUPTS_DATA
    assert (found[0].first.ident, found[0].second.ident) == ("d.compact_a", "d.compact_b")
    assert all(c.kind is FindingKind.CONFLICT for c in found[1:])
    report = found[0].to_dict()
    assert report["kind"] == "corrupts_data" and "duplicates_rows" in report["effects"]
    corrupting = [c for c in report["cells"] if c["effect"] == "duplicates_rows"]
    assert [(c["profile"], c["earlier"], c["later"], c["later_fails"]) for c in corrupting] == [
        ("delta-rs", "optimize", "optimize", False)]
    assert "delta-io/delta-rs#3982" in corrupting[0]["source"]
    assert any("does not describe that engine" in n and "delta-write-serializable" in n for n in report["notes"])


def test_compactions_on_an_engine_without_its_own_matrix_stay_plain_conflicts():
    a = task("d", "a", "optimize", profile="delta-write-serializable", parts={"ds": "1"}, engine="spark-delta")
    b = task("d", "b", "optimize", profile="delta-write-serializable", parts={"ds": "1"}, engine="spark-delta")
    other = task("d", "c", "optimize", profile="delta-rs", parts={"ds": "2"}, engine="delta-rs")
    found = collisions([a, b, other])
    assert pairs(found) == {("d.a", "d.b")}
    assert found[0].kind is FindingKind.CONFLICT and found[0].notes == ()


def test_lint_finds_exactly_the_pairs_admission_refuses_under_every_matrix_that_applies():
    # Admission's rule (Profile.conflicts: the later one fails, or both commit and corrupt the
    # data) under each task's declared profile and its engine's own, against lint's findings.
    rnd = random.Random(11)
    for _ in range(40):
        tasks = []
        for i in range(rnd.randint(2, 10)):
            profile = rnd.choice(["delta-write-serializable", "delta-serializable", "delta-rs"])
            tasks.append(task(f"dag{rnd.randint(0, 1)}", f"t{i}", rnd.choice(["optimize", "optimize", "insert_into",
                              "merge", "update"]), table="db.t", profile=profile,
                              parts=rnd.choice([None, {"ds": "1"}, {"ds": "2"}]),
                              engine=rnd.choice([None, "delta-rs", "spark-delta"]),
                              max_active_runs=rnd.choice([1, 2])))
        found = {(c.first.ident, c.second.ident): c for c in collisions(tasks)}
        for i, a in enumerate(tasks):
            for b in tasks[i:]:
                matrices = {a.write.profile, b.write.profile} | {p for p in (a.engine_profile, b.engine_profile) if p}
                ops = (a.write.operation, b.write.operation)
                refused = any(p.conflicts(*ops) for p in matrices)
                corrupts = any(p.cell(*ops).effect.corrupts_data or p.cell(*ops[::-1]).effect.corrupts_data
                               for p in matrices)
                reported = found.get((a.ident, b.ident))
                can_meet = footprint_overlap(a.write, b.write) and why_together(a, b, 3600.0)
                assert (reported is not None) == bool(refused and can_meet), (a.ident, b.ident)
                if reported is not None:
                    assert (reported.kind is FindingKind.CORRUPTS_DATA) == corrupts
        kinds = [c.kind for c in collisions(tasks)]
        assert kinds == sorted(kinds, key=list(FindingKind).index)


def test_planned_pools_serialise_tasks_that_would_corrupt_data_together():
    declared = "delta-write-serializable"
    tasks = [
        task("d", "compact_a", "optimize", profile=declared, parts={"ds": "1"}, engine="delta-rs"),
        task("d", "compact_b", "optimize", profile=declared, parts={"ds": "1"}, engine="delta-rs"),
        # a third one on the whole table, two runs at once: it collides with itself too
        task("e", "compact_all", "optimize", profile=declared, engine="delta-rs", max_active_runs=2),
        task("e", "append", "insert_into", profile=declared, parts={"ds": "1"}, engine="delta-rs"),
    ]
    pools = plan_pools(tasks)
    assert len(pools) == 1
    pool = pools[0]
    slots = dict(pool.task_slots)
    corrupting = {frozenset(p) for p in pool.corrupting}
    assert corrupting == {frozenset({"d.compact_a", "d.compact_b"}), frozenset({"d.compact_a", "e.compact_all"}),
                          frozenset({"d.compact_b", "e.compact_all"}), frozenset({"e.compact_all"})}
    for pair in corrupting:
        a, b = min(pair), max(pair)  # a task with itself: two runs of it
        assert slots[a] + slots[b] > pool.slots, (pair, slots, pool.slots)
    assert "would corrupt data" in pool.description
    assert pool.to_dict()["corrupts_data"]
