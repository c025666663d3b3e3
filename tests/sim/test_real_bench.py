"""bench/real_bench.py on real delta-rs (small), and its hand-built partition lock.

The Iceberg-on-Spark variant of the benchmark takes minutes and is run by hand (its figures are
in bench/results/real_bench.json); this runs the delta-rs variant small: all three policies,
two repeats, the tables read back independently of the bench's own check.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # as when it runs as a script: its own directory (benchlib, real_bench_sched) is importable
    monkeypatch.syspath_prepend(str(BENCH))
    return load("real_bench")


@pytest.fixture()
def sched(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return load("real_bench_sched")


def test_partition_lock_is_exclusive_per_partition_whole_table_locks_all_and_fifo_fair(sched: ModuleType) -> None:
    rng = random.Random(3)
    for _ in range(300):
        locks = sched.PartitionLocks("t")
        held: list[tuple[str, str | None]] = []
        for step in range(12):
            if held and rng.random() < 0.4:  # let one go
                key = held.pop(rng.randrange(len(held)))
                locks.release(key)
                continue
            ready = [sched.BenchJob(i, "merge", rng.choice(["a", "b", "c", None]), 0, 1, 1)
                     for i in range(rng.randrange(0, 5))]
            picked = locks.pick(ready)

            # brute force: a job may start iff no held lock and no earlier ready job (which waits
            # ahead of it) shares its partition, and whole-table jobs share with everything
            def clash(p: str | None, q: str | None) -> bool:
                return p is None or q is None or p == q

            admissible = [
                j for n, j in enumerate(ready)
                if not any(clash(j.partition, h[1]) for h in held)
                and not any(clash(j.partition, e.partition) for e in ready[:n])
            ]
            if not admissible:
                assert picked is None, (step, ready, held)
                continue
            assert picked is not None and picked[0] is admissible[0], (ready, held, picked)
            held.append(picked[1])
            assert picked[1] == ("t", admissible[0].partition)


def test_policy_order_rotates_so_no_policy_always_runs_first(sched: ModuleType) -> None:
    orders = [sched.policy_order(r) for r in range(3)]
    assert {o[0] for o in orders} == set(sched.POLICIES)
    assert all(sorted(o) == sorted(sched.POLICIES) for o in orders)


def test_table_check_reports_every_figure_that_differs(bench: ModuleType) -> None:
    assert bench.check_table({"rows": 5, "commits": 2}, {"rows": 5, "commits": 2}) == "ok: rows 5, commits 2"
    assert bench.check_table({"rows": 5, "commits": 3}, {"rows": 5, "commits": 2}) == "MISMATCH: commits 3 != 2"


def overlapping(log: list[list[object]], jobs: dict[int, dict[str, object]], same: object) -> list[tuple[int, int]]:
    """Pairs of attempts that ran at the same time on one partition and satisfy ``same``."""
    pairs = []
    for i, a in enumerate(log):
        for b in log[i + 1:]:
            ja, jb = jobs[a[0]], jobs[b[0]]  # type: ignore[index]
            if ja["partition"] == jb["partition"] and a[2] < b[3] and b[2] < a[3] and same(ja, jb):  # type: ignore[operator]
                pairs.append((a[0], b[0]))
    return pairs


def test_real_bench_runs_three_policies_on_real_delta_rs_and_the_tables_hold_every_commit_once(
    bench: ModuleType, tmp_path: Path
) -> None:
    pytest.importorskip("deltalake", reason="the delta-rs variant needs the deltalake package (extra 'delta')")
    import deltalake

    out = tmp_path / "real.json"
    report = bench.main(["--variant", "delta", "--repeats", "2", "--jobs", "8", "--merge-jobs", "5", "--partitions", "2",
                         "--delta-rows", "3000", "--delta-seed-rows", "6000", "--retry-delay", "0.2",
                         "--workdir", str(tmp_path / "w"), "--out", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["machine"]["cores"] and len(report["loadavg_before"]) == len(report["loadavg_after"]) == 3
    assert [r["order"][0] for r in report["repeats"]] == ["naive", "partition-lock"]
    assert [r["seed"] for r in report["repeats"]] == [7, 8]  # each repeat its own draw
    for rep in report["repeats"]:
        assert set(rep["jobs"]) == {"merge", "mixed"}  # both workloads by default
        assert {j["kind"] for j in rep["jobs"]["merge"]["delta"]} == {"merge"}
    for rep, workload in ((rep, w) for rep in report["repeats"] for w in ("merge", "mixed")):
        jobs = {j["index"]: j for j in rep["jobs"][workload]["delta"]}
        for policy, row in rep["workloads"][workload]["delta"].items():
            assert row["jobs_committed"] == len(jobs) and "MISMATCH" not in row["table_check"]
            # Every committed job has exactly one committed attempt; every other attempt lost.
            assert row["attempts"] == row["jobs_committed"] + row["failed_attempts"] == len(row["attempt_log"])
            # Read the table back: every seeded, merged and appended key once, nothing else.
            table = deltalake.DeltaTable(str(tmp_path / "w" / f"delta-r{rep['repeat']}_{workload}-{policy}"))
            data = table.to_pyarrow_table().to_pylist()
            keys = {(p, i) for p in ("p0", "p1") for i in range(6000)}
            for j in jobs.values():
                keys |= {(j["partition"], i) for i in range(j["first_id"], j["first_id"] + j["rows"])}
            assert sorted((r["part"], r["id"]) for r in data) == sorted(keys)
            assert table.version() == len(jobs)  # one commit per job
            log = row["attempt_log"]
            if policy == "partition-lock":  # never two jobs on one partition at once
                assert overlapping(log, jobs, lambda a, b: True) == []
            if policy == "occflow":  # never a merge beside another job of its partition
                assert overlapping(log, jobs, lambda a, b: "merge" in (a["kind"], b["kind"])) == []
    assert [(s["workload"], s["variant"]) for s in report["summary"]] == [("merge", "delta"), ("mixed", "delta")]
    for summary in report["summary"]:
        assert set(summary["policies"]) == {"naive", "partition-lock", "occflow"}
        runs = [rep["workloads"][summary["workload"]]["delta"] for rep in report["repeats"]]
        for policy, figures in summary["policies"].items():
            wall = figures["wall_seconds"]
            assert wall["min"] <= wall["median"] <= wall["max"] and len(wall["runs"]) == 2
            assert wall["runs"] == [run[policy]["wall_seconds"] for run in runs]
            assert figures["table_checks_ok"] is True
        ratio = summary["ratios"]["naive_over_occflow_wall"]
        naive = summary["policies"]["naive"]["wall_seconds"]["runs"]
        occ = summary["policies"]["occflow"]["wall_seconds"]["runs"]
        assert ratio["runs"] == [round(n / o, 3) for n, o in zip(naive, occ, strict=True)]


def test_merge_workload_is_merges_only_and_mixed_has_appends_same_seeded_draw(bench: ModuleType) -> None:
    args = bench.parser().parse_args(["--merge-jobs", "11", "--jobs", "12", "--partitions", "3"])
    sets = bench.job_sets(args, [bench.DeltaVariant(args, Path("/nonexistent"))], 0)
    merge, mixed = sets["merge"]["delta"], sets["mixed"]["delta"]
    assert len(merge) == 11 and {j.kind for j in merge} == {"merge"}
    assert len(mixed) == 12 and {j.kind for j in mixed} == {"merge", "append"}
    assert {j.partition for j in merge} <= {"p0", "p1", "p2"}
    assert sets == bench.job_sets(args, [bench.DeltaVariant(args, Path("/nonexistent"))], 0)  # seeded
    assert sets != bench.job_sets(args, [bench.DeltaVariant(args, Path("/nonexistent"))], 1)  # per repeat
    only = bench.job_sets(bench.parser().parse_args(["--workload", "merge"]), [bench.DeltaVariant(args, Path("/x"))], 0)
    assert set(only) == {"merge"}
