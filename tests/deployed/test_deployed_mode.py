"""The deployed mode end to end: PostgreSQL, Redis, Airflow on two Celery workers, a Spark
standalone cluster, spark-submit MERGEs on one Iceberg table (``scripts/run_deployed.py``).

Everything is real and local (no stand-in). The script runs as a user runs it and leaves a JSON
report of raw evidence (task instances, the Spark master's and workers' status, the lease
history, the drivers' outcomes); the test draws its own conclusions from that evidence and from
the table's Iceberg metadata files, which it reads itself (not through occflow):

- tasks ran on both Celery workers (their host names in the task instances);
- every committed write ran on the cluster: its driver's application is one the master ran, and
  a cluster worker ran an executor for it;
- no two conflicting writes (MERGEs of the same partition) held leases at the same time;
- the table holds what a serial run gives, and each logical write committed exactly once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]
BATCHES = 4  # two MERGEs per partition: enough to conflict, few enough for CI's time budget
ROWS = 100  # dags_deployed/deployed_spread.py: ids batch*ROWS .. batch*ROWS+ROWS-1
WRITE_ID = "occflow.write-id"


def _needs(binary: str) -> None:
    if shutil.which(binary) is None and not list(Path("/usr/lib/postgresql").glob(f"*/bin/{binary}")):
        pytest.skip(f"the deployed mode needs {binary} (Debian packages in scripts/apt-packages.txt)")


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _needs("redis-server")
    _needs("initdb")
    home = tmp_path_factory.mktemp("deployed")
    report = home / "report.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "run_deployed.py"), "--dags", "occflow_deployed_spread",
         "--batches", str(BATCHES), "--home", str(home / "run"), "--report", str(report)],
        capture_output=True, text=True, timeout=1500, cwd=REPO,
    )
    assert done.returncode == 0, f"run_deployed.py failed:\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    data = json.loads(report.read_text())
    data["stdout"] = done.stdout
    return data


def _merges(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [ti for ti in report["task_instances"] if ti["task_id"].startswith("merge_")]


def test_tasks_ran_on_both_celery_workers(deployed: dict[str, Any]) -> None:
    hosts = {ti["hostname"] for ti in deployed["task_instances"] if ti["state"] == "success"}
    assert {"occflow-worker-1", "occflow-worker-2"} <= hosts, hosts
    assert all(ti["state"] == "success" for ti in _merges(deployed)), _merges(deployed)


def test_writes_ran_on_the_spark_clusters_executors(deployed: dict[str, Any]) -> None:
    committed = [d for d in deployed["drivers"] if d["committed"]]
    assert len(committed) >= BATCHES, deployed["drivers"]
    master = deployed["spark"]["master"]
    ran = {app["id"] for app in master.get("completedapps", []) + master.get("activeapps", [])}
    executors_of = set()
    for worker in deployed["spark"]["workers"]:
        for ex in worker.get("finishedexecutors", []) + worker.get("executors", []):
            executors_of.add(ex["appid"])
    for driver in committed:
        app = driver["driver"]["application_id"]
        assert driver["driver"]["master"].startswith("spark://"), driver
        assert app in ran, f"{app} is not an application the master ran: {sorted(ran)}"
        assert app in executors_of, f"no cluster worker ran an executor for {app}"


def _intervals(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(partitions, granted at, ended at) of every lease on the deployed table."""
    granted: dict[str, tuple[str, float]] = {}
    ended: dict[str, float] = {}
    for e in events:
        if not str(e["table_name"]).endswith("deployed_spread"):
            continue
        if e["kind"] == "grant":
            granted[e["lease_id"]] = (str(e["partitions"]), float(e["at"]))
        elif e["kind"] in ("release", "expire", "takeover") and e.get("lease_id"):
            ended.setdefault(e["lease_id"], float(e["at"]))
    return [(parts, at, ended.get(lease, float("inf"))) for lease, (parts, at) in granted.items()]


def test_no_two_conflicting_writes_held_leases_at_once(deployed: dict[str, Any]) -> None:
    leases = _intervals(deployed["lease_history"])
    assert len(leases) >= BATCHES, leases  # every MERGE wrote under a lease
    # MERGEs of one partition conflict (Iceberg serializable): their leases must not overlap.
    for i, (parts, start, end) in enumerate(leases):
        for other, ostart, oend in leases[i + 1:]:
            if parts == other:
                assert end <= ostart or oend <= start, f"two leases on {parts} overlap: {start}-{end}, {ostart}-{oend}"


def _table_metadata(home: Path) -> dict[str, Any]:
    """The table's newest Iceberg metadata file, read as JSON (Iceberg's own format, not occflow)."""
    files = sorted((home / "run" / "occflow" / "warehouse").rglob("deployed_spread/metadata/*.metadata.json"))
    assert files, "no Iceberg metadata for deployed_spread"
    newest = max(files, key=lambda p: json.loads(p.read_text()).get("last-sequence-number", 0))
    return json.loads(newest.read_text())


def test_serial_row_count_and_each_write_committed_once(deployed: dict[str, Any]) -> None:
    meta = _table_metadata(Path(deployed["home"]).parent)
    current = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    assert int(current["summary"]["total-records"]) == BATCHES * ROWS
    write_ids = [s["summary"][WRITE_ID] for s in meta["snapshots"] if WRITE_ID in s.get("summary", {})]
    assert len(write_ids) == BATCHES, write_ids  # one tagged commit per MERGE task ...
    assert len(set(write_ids)) == BATCHES  # ... and no write committed twice
    assert "correct" in deployed["stdout"] and "all DAGs ended with correct data" in deployed["stdout"]
