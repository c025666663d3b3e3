"""Workload files: what they draw, and errors that name the file, the job and the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from occflow.cli import main
from occflow.sim import WorkloadError, load_workload, parse_workload
from occflow.sim.workload import Fixed

WORKLOADS = Path(__file__).resolve().parents[2] / "bench" / "workloads"

GOOD: dict[str, Any] = {
    "slots": 2,
    "tables": [{"name": "t", "profile": "iceberg-serializable", "partitions": ["a", "b", "c"]}],
    "jobs": [
        {"table": "t", "operation": "MERGE INTO", "partitions": {"random": 2}, "count": 50,
         "duration": {"lognormal": {"median": 60, "sigma": 0.5}}, "arrival": {"uniform": [0, 100]}},
        {"table": "t", "operation": "optimize", "duration": {"uniform": [5, 10]}, "arrival": {"every": 30, "start": 7},
         "count": 3},
    ],
}


def test_a_workload_draws_its_jobs_from_the_distributions() -> None:
    jobs = parse_workload(GOOD).jobs(seed=1)
    merges, compactions = jobs[:50], jobs[50:]
    assert all(j.operation.value == "merge" and len(set(j.partitions or ())) == 2 for j in merges)
    assert all(0 <= j.arrival <= 100 and j.duration > 0 for j in merges)
    assert len({j.duration for j in merges}) == 50  # drawn per job
    assert [j.arrival for j in compactions] == [7, 37, 67]
    assert all(j.partitions is None and 5 <= j.duration <= 10 for j in compactions)


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    target = data
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "named", "says"),
    [
        (["slots"], 0, "slots", "must be >= 1"),
        (["slots"], _DELETE, "slots", "is required"),
        (["tables", 0, "profile"], "iceberg-bogus", "tables[0].profile", "unknown profile"),
        (["tables", 0, "partitions"], [], "tables[0].partitions", "non-empty list"),
        (["jobs", 0, "table"], "nope", "jobs[0].table", "unknown table 'nope'"),
        (["jobs", 1, "operation"], "minor_compact", "jobs[1].operation", "not in profile"),
        (["jobs", 1, "operation"], "frobnicate", "jobs[1].operation", "frobnicate"),
        (["jobs", 0, "duration", "lognormal", "sigma"], _DELETE, "jobs[0].duration.lognormal.sigma", "is required"),
        (["jobs", 0, "duration"], {"gamma": 3}, "jobs[0].duration", "lognormal"),
        (["jobs", 0, "duration"], 0, "jobs[0].duration", "must be > 0"),
        (["jobs", 0, "arrival", "uniform"], [10, 5], "jobs[0].arrival.uniform", "high 5 < low 10"),
        (["jobs", 0, "count"], -1, "jobs[0].count", "must be >= 1"),
        (["jobs", 0, "count"], "many", "jobs[0].count", "expected an integer"),
        (["jobs", 0, "partitions"], ["a", "z"], "jobs[0].partitions", "'z' is not a partition"),
        (["jobs", 0, "partitions"], {"random": 4}, "jobs[0].partitions.random", "cannot draw 4"),
        (["jobs", 1, "colour"], "red", "jobs[1].colour", "unknown field"),
        (["jobs", 1, "protocol_change"], "yes", "jobs[1].protocol_change", "true or false"),
        (["policies"], {"naive": {"retries": -1}}, "policies.naive.retries", "must be >= 0"),
        (["policies"], {"airflow": {"admission_latency": -0.5}}, "policies.airflow.admission_latency",
         "must be >= 0, got -0.5"),
        (["policies"], {"airflow": {"requeue_delay": "5s"}}, "policies.airflow.requeue_delay",
         "expected a number, got '5s'"),
        (["policies"], {"airflow": {"requeue_delay": 1e9}}, "policies.airflow.requeue_delay", "must be <= 31536000"),
        (["policies"], {"airflow": {"latency": 1}}, "policies.airflow.latency",
         "unknown field; expected one of: admission_latency, requeue_delay"),
        (["policies"], {"airflow": 5}, "policies.airflow", "expected a mapping"),
    ],
)
def test_a_malformed_workload_names_the_file_the_job_and_the_field(
    path: list[Any], value: Any, named: str, says: str
) -> None:
    with pytest.raises(WorkloadError) as error:
        parse_workload(_broken(path, value), "broken.yaml")
    message = str(error.value)
    assert message.startswith(f"broken.yaml: {named}:"), message
    assert says in message


def test_a_file_that_is_not_yaml_or_not_there_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("slots: [1,\n")
    with pytest.raises(WorkloadError, match="bad.yaml: not valid YAML"):
        load_workload(bad)
    with pytest.raises(WorkloadError, match="missing.yaml: cannot read"):
        load_workload(tmp_path / "missing.yaml")


def test_cli_json_has_one_object_per_policy_with_the_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(WORKLOADS / "backfill_burst.yaml"), "--policy", "naive", "--policy", "occflow",
                 "--policy", "oracle", "--seed", "2", "--format", "json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["workload"] == "backfill-burst" and out["seed"] == 2 and out["jobs"] == 120
    assert [p["policy"] for p in out["policies"]] == ["naive", "occflow", "oracle"]
    for row in out["policies"]:
        for key in ("makespan", "useful_fraction", "wasted_seconds", "failed_attempts", "latency_p50",
                    "latency_p95", "lower_bound"):
            assert key in row
        assert row["lower_bound"] == round(out["lower_bound"]["value"], 3)
        assert row["makespan"] >= row["lower_bound"]


def test_cli_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "runs.png"
    assert main(["simulate", str(WORKLOADS / "mixed_schema.yaml"), "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    for policy in ("naive", "table-pool", "partition-lock", "occflow-retry", "occflow", "oracle"):
        assert f"\n{policy} " in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 20_000


def test_cli_reports_a_malformed_workload_and_an_unknown_policy(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text("slots: 2\ntables: [{name: t, profile: delta-serializable, partitions: 2}]\n"
                   "jobs: [{table: t, operation: merge, duration: {lognormal: {median: 5}}}]\n")
    assert main(["simulate", str(bad)]) == 2
    assert "w.yaml: jobs[0].duration.lognormal.sigma: is required" in capsys.readouterr().err
    assert main(["simulate", str(WORKLOADS / "merge_heavy.yaml"), "--policy", "fifo"]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'fifo'; policies: naive, table-pool, partition-lock, occflow-retry, occflow, oracle" in err


def test_cli_accepts_pool_as_the_old_name_of_table_pool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(WORKLOADS / "merge_heavy.yaml"), "--policy", "pool", "--policy", "partition-lock",
                 "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in out["policies"]] == ["table-pool", "partition-lock"]


@pytest.mark.parametrize(
    ("path", "value", "named", "says"),
    [
        (["jobs", 0, "count"], 10_000_000, "jobs[0].count", "must be <= 100000, got 10000000"),
        (["jobs", 0, "count"], "1e12", "jobs[0].count", "write the number as 1.0e+12"),
        (["jobs", 0, "duration"], {"fixed": 1e12}, "jobs[0].duration.fixed", "must be <= 31536000"),
        (["jobs", 0, "arrival"], {"uniform": [0, float("inf")]}, "jobs[0].arrival.uniform[1]", "a finite number"),
        (["jobs", 0, "duration", "lognormal", "sigma"], 50, "jobs[0].duration.lognormal.sigma", "must be <= 5"),
        (["tables", 0, "partitions"], 10_000_000, "tables[0].partitions", "between 1 and 100000"),
        (["slots"], 10**9, "slots", "must be <= 10000"),
        (["policies"], {"naive": {"retry_delay": 1e9}}, "policies.naive.retry_delay", "must be <= 31536000"),
    ],
)
def test_a_runaway_value_is_refused_naming_the_bound(path: list[Any], value: Any, named: str, says: str) -> None:
    with pytest.raises(WorkloadError) as error:
        parse_workload(_broken(path, value), "huge.yaml")
    assert str(error.value).startswith(f"huge.yaml: {named}:"), str(error.value)
    assert says in str(error.value)


def test_the_jobs_of_a_workload_are_bounded_in_all() -> None:
    data = _broken(["jobs", 0, "count"], 60_000)
    data["jobs"].append(dict(data["jobs"][0]))
    with pytest.raises(WorkloadError, match=r"huge.yaml: jobs: 120003 jobs in all; a workload holds at most 100000"):
        parse_workload(data, "huge.yaml")


@pytest.mark.parametrize(("count", "per_job"), [(100_000, 100_000), (50_000, 41), (1_000, 2_001)])
def test_bounds_that_each_hold_are_refused_when_their_product_does_not(count: int, per_job: int) -> None:
    """Every bound one by one is kept (jobs <= 100,000, partitions <= 100,000), yet together the
    jobs would name count x per_job keys: refused at once with the product named, not a
    MemoryError minutes later (issue 24)."""
    data = {
        "slots": 4,
        "tables": [{"name": "t", "profile": "delta-rs", "partitions": 100_000}],
        "jobs": [{"table": "t", "operation": "insert_into", "duration": {"fixed": 1}, "count": count,
                  "partitions": {"random": per_job}}],
    }
    with pytest.raises(WorkloadError, match=rf"the jobs name {count * per_job} partition keys together"):
        parse_workload(data, "huge.yaml")
    data["jobs"][0]["count"] = 2_000_000 // per_job  # at the product bound: read
    assert parse_workload(data, "huge.yaml") is not None


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return path


SMALL = "slots: 2\ntables: [{name: t, profile: delta-serializable, partitions: 2}]\n"


def test_a_duplicate_key_is_named_with_its_lines(tmp_path: Path) -> None:
    path = _write(tmp_path, SMALL + "jobs:\n  - table: t\n    operation: merge\n    count: 3\n"
                  "    duration: 5\n    count: 3000\n")
    with pytest.raises(WorkloadError, match=r"w.yaml: duplicate key 'count' on line 8 \(first on line 6\)"):
        load_workload(path)


def test_a_merge_key_may_be_overridden(tmp_path: Path) -> None:
    path = _write(tmp_path, SMALL + "jobs:\n  - &base {table: t, operation: merge, duration: 5}\n"
                  "  - {<<: *base, duration: 7}\n")
    assert [spec.duration for spec in load_workload(path).specs] == [Fixed(5), Fixed(7)]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (SMALL + "jobs: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 32 levels"),
        (
            SMALL + "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True))
            + "jobs: *i\n",
            "more than 200000 values once aliases are expanded",
        ),
        (SMALL + "jobs: &j [*j]\n", "an alias refers to a value it is inside of"),
        ("slots: [1,\n", "not valid YAML: expected the node content, but found '<stream end>' (line 2, column 1)"),
    ],
    ids=["deep", "alias-bomb", "recursive-alias", "syntax"],
)
def test_a_pathological_yaml_file_is_one_clear_error(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(WorkloadError) as error:
        load_workload(_write(tmp_path, text))
    assert says in str(error.value) and "\n" not in str(error.value)


def test_a_huge_or_binary_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(SMALL + "# padding\n" * 200_000)
    with pytest.raises(WorkloadError, match="w.yaml: larger than 1000000 bytes"):
        load_workload(path)
    path.write_bytes(b"slots: \xff\xfe\n")
    with pytest.raises(WorkloadError, match="w.yaml: not UTF-8 text"):
        load_workload(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (SMALL + "jobs: [{table: t, operation: merge, duration: 5, count: 10000000}]\n",
         "jobs[0].count: must be <= 100000, got 10000000"),
        (SMALL + "jobs: [{table: t, operation: merge, duration: 1e12}]\n", "jobs[0].duration: expected a number"),
        (SMALL + "jobs: [{table: t, operation: merge, duration: 5, count: 2, count: 3}]\n", "duplicate key 'count'"),
        (SMALL + "jobs: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 32 levels"),
    ],
    ids=["count", "exponent", "duplicate", "deep"],
)
def test_cli_exits_2_with_one_line_for_a_bad_file(tmp_path: Path, text: str, says: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(_write(tmp_path, text))]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and says in captured.err and "Traceback" not in captured.err
