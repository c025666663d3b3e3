"""In-process delta-spark writes under a lease, run as a process of their own
(tests/engines/test_delta_spark_lease_fence.py): this process's JVM is a Delta session, which the
test run's Iceberg session cannot be (SQL extensions and log stores are fixed when a JVM starts).

``python delta_spark_fence_writer.py HOME SCENARIO [SCENARIO ...]`` runs each scenario on a fresh
Delta table (its location under ``HOME``) and prints one line ``RESULT {json}``:

- ``lapse``: an ``INSERT INTO`` partition 'a' runs as ``SparkWriteOperator`` runs it (a
  ``WriteFlow`` over a ``SparkTarget``, its lease from a real SQLite lease store kept by a
  ``LeaseKeeper``). A Python UDF in its source holds the statement's only task inside the engine
  call, after the flow's own check before the statement. The keeper stops (a stalled task), the
  lease lapses, a ``DELETE`` of partition 'a' (which the append must not follow: the matrix keeps
  the pair one at a time) is admitted and commits, and the stalled append resumes and reaches its
  commit;
- ``control``: the same stall, longer than two TTLs, with the keeper beating.

The result holds what the flows reported and the engine's own record: each commit file
``_delta_log/<version>.json`` written since the table was made (its ``commitInfo``: operation,
timestamp), the table's ``DESCRIBE HISTORY`` versions and its rows.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from occflow.core.declaration import WriteDeclaration
from occflow.core.policy import derive_policy
from occflow.engines.spark.attempt_fence import in_session
from occflow.engines.spark.config import SparkConfig
from occflow.engines.spark.target import SparkTarget, spark_engine
from occflow.leases import Lease, LeaseKeeper, LeaseRequest, LeaseStore
from occflow.operators.flow import WriteFlow
from occflow.operators.history import WriteHistory

PROFILE = "delta-serializable"
TTL = 3.0  # the stalled writer's lease: lapses 3 s after its last heartbeat
CONTROL_TTL = 6.0  # the control's lease, kept live by its keeper
WAIT = 90.0  # a bound on every wait, for a loaded 2-core machine


def _wait_for(what: str, done: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Stall:
    """A Python UDF that holds the statement's only task inside the engine call: it marks that it
    is running, then waits until the scenario lets it go."""

    def __init__(self, spark: Any, home: Path) -> None:
        from pyspark.sql.types import IntegerType  # optional heavy dependency

        self.name = f"occflow_stall_{uuid.uuid4().hex[:8]}"
        self.reached, self.release = home / f"{self.name}.reached", home / f"{self.name}.release"
        reached, release = str(self.reached), str(self.release)

        def hold(value: int) -> int:
            import pathlib
            import time

            pathlib.Path(reached).touch()
            give_up = time.time() + 180
            while not pathlib.Path(release).exists() and time.time() < give_up:
                time.sleep(0.05)
            return value

        spark.udf.register(self.name, hold, IntegerType())

    def go(self) -> None:
        self.release.touch()


class Running:
    """A flow run on a thread of its own (so on a JVM thread of its own): its report or error."""

    def __init__(self, flow: WriteFlow) -> None:
        self.flow = flow
        self.report: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="occflow-stalled-writer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.report = self.flow.run()
        except BaseException as exc:  # noqa: BLE001 - the scenario reports it
            self.error = exc

    def join(self) -> None:
        self.thread.join(timeout=WAIT)
        if self.thread.is_alive():
            raise TimeoutError("the stalled writer did not finish")


def _flow(config: dict[str, Any], table: str, operation: str, sql: str, keeper: LeaseKeeper) -> WriteFlow:
    """The write as ``SparkWriteOperator.write`` runs it: its flow over a ``SparkTarget``."""
    declaration = WriteDeclaration.create(table, operation, PROFILE, partitions={"ds": "a"})
    return WriteFlow(
        declaration=declaration,
        policy=derive_policy(PROFILE, operation, None, replans_from_fresh_snapshot=True, partitions=1),
        target=SparkTarget(config, table, job_for=lambda _: sql),
        context=None,
        log=logging.getLogger("occflow.test.delta_inprocess_fence"),
        history=WriteHistory(),
        keeper=keeper,
    )


def _append(table: str, value: int, through: str) -> str:
    """Append one row ``(value, 'a', value)`` to partition 'a', through a UDF that stalls it."""
    return f"INSERT INTO {table} PARTITION (ds = 'a') SELECT {value}L AS id, {through}({value}) AS v"


def _commits(location: Path) -> list[dict[str, Any]]:
    """Every commit file of the table's log, in version order: Delta's own record."""
    out = []
    for path in sorted((location / "_delta_log").glob("*.json")):
        if not (path.stem.isdigit() and len(path.stem) == 20):
            continue
        info: dict[str, Any] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            if "commitInfo" in action:
                info = action["commitInfo"]
        out.append({"version": int(path.stem), "operation": info.get("operation"),
                    "timestamp": info.get("timestamp", 0) / 1000, "mtime": path.stat().st_mtime})
    return out


def _record(spark: Any, table: str, location: Path) -> dict[str, Any]:
    history = spark.sql(f"DESCRIBE HISTORY {table}").collect()
    rows = spark.sql(f"SELECT id, ds, v FROM {table}").collect()
    return {
        "commits": _commits(location),
        "history": sorted((int(r["version"]), str(r["operation"])) for r in history),
        "rows": sorted([int(r["id"]), str(r["ds"]), int(r["v"])] for r in rows),
    }


def _report(report: Any) -> dict[str, Any] | None:
    if report is None:
        return None
    return {"status": report.status.value, "version": report.version, "tag": dict(report.tag),
            "attempts": report.attempts, "error": report.error}


def _writer(running: Running) -> dict[str, Any]:
    history = running.flow.history
    return {
        "report": _report(running.report),
        "error_class": None if running.error is None else type(running.error).__name__,
        "error": None if running.error is None else str(running.error),
        "attempts": history.attempts,
        "lost": len(history.lost),
        "lease_losses": [{"fence": loss.fence, "reason": loss.reason} for loss in history.lease_losses],
    }


def _table(spark: Any, home: Path, name: str) -> tuple[str, Path]:
    table = f"default.fence_{name}"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, ds STRING, v INT) USING delta PARTITIONED BY (ds) "
              f"LOCATION '{home / name}'")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a', 1), (2, 'a', 2), (3, 'a', 3), (4, 'b', 4)")
    return table, home / name


def lapse(config: dict[str, Any], store: LeaseStore, home: Path) -> dict[str, Any]:
    spark = spark_engine(config).session()
    table, location = _table(spark, home, "lapse")
    stall = Stall(spark, home)
    start = _record(spark, table, location)
    first = store.decide(LeaseRequest.create(table, "insert_into", PROFILE, [{"ds": "a"}], ttl=TTL)).lease
    assert first is not None
    # A DELETE of the partition fails if the append commits first (the matrix): one at a time.
    second_request = LeaseRequest.create(table, "delete", PROFILE, [{"ds": "a"}], ttl=60)
    blocked_while_live = store.decide(second_request).lease is None

    keeper = LeaseKeeper(store, first).__enter__()
    stalled = Running(_flow(config, table, "insert_into", _append(table, 10, stall.name), keeper))
    _wait_for("the first writer's statement to run", lambda: stall.reached.exists() or not stalled.thread.is_alive())
    if stalled.error is not None:
        raise stalled.error
    keeper.__exit__(None, None, None)  # the task stalls: no more heartbeats; the lease lapses after its TTL
    admitted: list[Lease] = []

    def second_admitted() -> bool:
        lease = store.decide(second_request).lease
        admitted.extend([] if lease is None else [lease])
        return bool(admitted)

    _wait_for("the second writer's admission", second_admitted)
    lapsed_by = time.time()
    (second,) = admitted
    with LeaseKeeper(store, second) as second_keeper:
        second_run = Running(_flow(config, table, "delete", f"DELETE FROM {table} WHERE ds = 'a'", second_keeper))
        second_run.join()
    store.release(second)
    resumed_at = time.time()
    stall.go()  # the first writer resumes and reaches its commit
    stalled.join()
    return {"fence": first.fence, "second_fence": second.fence, "blocked_while_live": blocked_while_live,
            "lapsed_by": lapsed_by, "resumed_at": resumed_at, "start": start, "second": _writer(second_run),
            "stalled": _writer(stalled), "after": _record(spark, table, location)}


def control(config: dict[str, Any], store: LeaseStore, home: Path) -> dict[str, Any]:
    """The same stall, longer than two TTLs, with the keeper beating: the commit goes through."""
    spark = spark_engine(config).session()
    table, location = _table(spark, home, "control")
    stall = Stall(spark, home)
    start = _record(spark, table, location)
    # A longer lease and a faster beat than the stalled writer's: on a loaded 2-core machine a 3 s
    # lease beaten each second leaves a quarter second for a late beat before the commit's margin,
    # and the control must not fail for a late beat (CI did): its point is the beating keeper.
    lease = store.decide(LeaseRequest.create(table, "insert_into", PROFILE, [{"ds": "a"}], ttl=CONTROL_TTL)).lease
    assert lease is not None
    with LeaseKeeper(store, lease, interval=0.5) as keeper:
        writer = Running(_flow(config, table, "insert_into", _append(table, 10, stall.name), keeper))
        _wait_for("the writer's statement to run", lambda: stall.reached.exists() or not writer.thread.is_alive())
        time.sleep(2.5 * CONTROL_TTL)  # stalled past two TTLs; the heartbeats keep the lease live
        stall.go()
        writer.join()
    store.release(lease)
    return {"fence": lease.fence, "start": start, "writer": _writer(writer), "after": _record(spark, table, location)}


SCENARIOS = {"lapse": lapse, "control": control}


def main(home: str, scenarios: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    base = Path(home)
    config: dict[str, Any] = {"table_format": "delta", "home": str(base / "spark"),
                              "app_name": "occflow-delta-fence-test",
                              "conf": {"spark.driver.memory": "768m", "spark.sql.warehouse.dir": str(base / "warehouse")}}
    spark = spark_engine(config).session()
    found = in_session(spark, SparkConfig.from_dict(config))
    result: dict[str, Any] = {"checked_at": found.checked_at, "describe": found.describe()}
    store = LeaseStore.from_url(f"sqlite:///{base / 'leases.db'}")
    try:
        for name in scenarios:
            result[name] = SCENARIOS[name](config, store, base)
    finally:
        store.dispose()
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
