"""An in-process Spark write to Iceberg commits only while its lease is live, checked inside the
commit (issue 31; ``engines/spark/attempt_fence.py``).

The write runs as an operator runs it: a ``WriteFlow`` over a ``SparkTarget``, its lease from a
real lease store (SQLite) kept by a ``LeaseKeeper``. Its statement stalls inside the engine call
(a Python UDF in the INSERT OVERWRITE's source holds the only task) after the flow's own check
before the statement passed. Then its keeper stops beating (a stalled task), the lease lapses,
a conflicting UPDATE of the same partition is admitted and commits, and the stalled write
resumes: the lease-fenced catalog refuses its commit, and the flow takes the lease-loss path
(reschedule, not a conflict to retry). The control run stalls as long, with its lease kept live,
and commits. The oracle is Iceberg's own record: the ``snapshots`` metadata table and the rows.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException

from occflow.core.declaration import WriteDeclaration
from occflow.core.policy import derive_policy
from occflow.core.report import WriteStatus
from occflow.engines.spark import SparkConfig, SparkEngine
from occflow.engines.spark.attempt_fence import in_session, session_conf
from occflow.engines.spark.submit_fence import (
    AT_COMMIT,
    AT_STATEMENT_START,
    FENCED_CATALOG,
    JAR_ENV,
    LEASE_CHECKED_AT,
    SCOPE_KEY,
    THREAD_SCOPE,
    built_jar,
)
from occflow.engines.spark.target import SparkTarget, spark_engine
from occflow.leases import Lease, LeaseKeeper, LeaseRequest, LeaseStore
from occflow.operators.flow import WriteFlow
from occflow.operators.history import WriteHistory

pytestmark = pytest.mark.spark

PROFILE = "iceberg-serializable"
TTL = 3.0  # the stalled writer's lease: lapses 3 s after its last heartbeat
#: The control's lease, beaten every 0.5 s: a 3 s lease beaten each second leaves a quarter second
#: for a late beat before the commit's margin, and on a loaded 2-core CI machine a beat was late
#: (the fence then refuses, rightly); the control is about a beating keeper, not a late one.
CONTROL_TTL = 6.0
WAIT = 90.0  # a bound on every wait, for a loaded 2-core machine


def _snapshots(spark: Any, table: str) -> list[tuple[int, int | None, str, float]]:
    """(snapshot id, parent id, operation, committed at) in commit order, from Iceberg's metadata table."""
    rows = spark.sql(
        f"SELECT snapshot_id, parent_id, operation, unix_millis(committed_at) AS at FROM {table}.snapshots "
        "ORDER BY committed_at"
    ).collect()
    return [(int(r["snapshot_id"]), None if r["parent_id"] is None else int(r["parent_id"]), r["operation"],
             r["at"] / 1000) for r in rows]


def _rows(spark: Any, table: str) -> list[tuple[int, str, int]]:
    return sorted((r["id"], r["ds"], r["v"]) for r in spark.sql(f"SELECT id, ds, v FROM {table}").collect())


def _wait_for(what: str, done: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


class Stall:
    """A Python UDF that holds the statement's only task inside the engine call: it marks that it
    is running, then waits until the test lets it go."""

    def __init__(self, spark: Any, home: Path) -> None:
        from pyspark.sql.types import IntegerType

        self.name = f"occflow_stall_{uuid.uuid4().hex[:8]}"
        self.reached, self.release = home / "reached", home / "release"
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


def _flow(config: dict[str, Any], table: str, operation: str, sql: str, keeper: LeaseKeeper) -> WriteFlow:
    """The write as ``SparkWriteOperator.write`` runs it: its flow over a ``SparkTarget``."""
    declaration = WriteDeclaration.create(table, operation, PROFILE, partitions={"ds": "a"})
    return WriteFlow(
        declaration=declaration,
        policy=derive_policy(PROFILE, operation, None, replans_from_fresh_snapshot=True, partitions=1),
        target=SparkTarget(config, table, job_for=lambda _: sql),
        context=None,
        log=logging.getLogger("occflow.test.inprocess_fence"),
        history=WriteHistory(),
        keeper=keeper,
    )


def _overwrite(table: str, value: int, through: str | None = None) -> str:
    """Replace partition 'a' with one row ``(value, 'a', value)``; ``through`` a UDF that stalls it."""
    v = str(value) if through is None else f"{through}({value})"
    return f"INSERT OVERWRITE {table} PARTITION (ds = 'a') SELECT {value}L AS id, {v} AS v"


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
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc

    def join(self) -> None:
        self.thread.join(timeout=WAIT)
        assert not self.thread.is_alive(), "the stalled writer did not finish"


@pytest.fixture
def setup(iceberg_engine: SparkEngine, spark_home: Path, tmp_path: Path) -> Iterator[tuple[dict[str, Any], LeaseStore]]:
    assert built_jar()[0] is not None, built_jar()[1]  # scripts/bootstrap.sh builds it
    # The config of the run's one session (tests/conftest.py): the target's engine is that session.
    config: dict[str, Any] = {"home": str(spark_home), "app_name": "occflow-tests"}
    found = in_session(spark_engine(config).session(), iceberg_engine.config)
    assert found.at_commit, found.describe()
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    yield config, store
    store.dispose()


def test_a_writer_stalled_past_its_lease_does_not_commit_after_the_next_holder(
    setup: tuple[dict[str, Any], LeaseStore], iceberg_table: str, tmp_path: Path
) -> None:
    config, store = setup
    table = iceberg_table
    spark = spark_engine(config).session()
    stall = Stall(spark, tmp_path)
    start = _snapshots(spark, table)
    first = store.decide(LeaseRequest.create(table, "insert_overwrite", PROFILE, [{"ds": "a"}], ttl=TTL)).lease
    assert first is not None
    # An UPDATE of the partition fails if the overwrite commits first (the matrix): one at a time.
    second_request = LeaseRequest.create(table, "update", PROFILE, [{"ds": "a"}], ttl=60)
    assert store.decide(second_request).lease is None

    keeper = LeaseKeeper(store, first).__enter__()
    stalled = Running(_flow(config, table, "insert_overwrite", _overwrite(table, 10, through=stall.name), keeper))
    _wait_for("the first writer's statement to run", lambda: stall.reached.exists() or not stalled.thread.is_alive())
    assert stalled.error is None, stalled.error
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
        report = _flow(config, table, "update", f"UPDATE {table} SET v = v + 100 WHERE ds = 'a'",
                       second_keeper).run()
    store.release(second)
    assert report.status is WriteStatus.COMMITTED, report
    assert report.tag[LEASE_CHECKED_AT] == AT_COMMIT

    stall.go()  # the first writer resumes and reaches its commit
    stalled.join()
    # Refused inside its commit, not before: the flow's lease-loss path (reschedule), no retry.
    assert isinstance(stalled.error, AirflowRescheduleException), repr(stalled.error)
    history = stalled.flow.history
    assert history.attempts == 1 and not history.lost, history
    (loss,) = history.lease_losses
    assert loss.fence == first.fence
    assert "refused inside its commit" in loss.reason and "lease not live at the commit of" in loss.reason, loss
    assert f"(fence {first.fence}) is not certainly live" in loss.reason, loss

    # Iceberg's record: one snapshot since the start, the second writer's, on the snapshot both
    # started from; nothing by the first writer after its lease lapsed. Iceberg does not validate
    # a static overwrite, so without the fence the first writer's commit would have gone through
    # and replaced the UPDATE's rows: here partition 'a' holds them, updated once, and 'b' is untouched.
    after = _snapshots(spark, table)
    assert after[: len(start)] == start
    (new,) = after[len(start):]
    assert new[0] == report.snapshot_id and new[1] == start[-1][0]
    assert new[3] >= lapsed_by - 1.0  # committed once the first lease had lapsed (ms resolution)
    assert _rows(spark, table) == [(1, "a", 101), (2, "a", 102), (3, "a", 103), (4, "b", 4)]


def test_a_writer_stalled_under_a_live_lease_commits(
    setup: tuple[dict[str, Any], LeaseStore], iceberg_table: str, tmp_path: Path
) -> None:
    """Control: the same stall, longer than two TTLs, with the keeper beating: the commit goes
    through (so the refusal above is the lapsed lease's, not the stall's)."""
    config, store = setup
    table = iceberg_table
    spark = spark_engine(config).session()
    stall = Stall(spark, tmp_path)
    start = _snapshots(spark, table)
    lease = store.decide(LeaseRequest.create(table, "insert_overwrite", PROFILE, [{"ds": "a"}], ttl=CONTROL_TTL)).lease
    assert lease is not None
    with LeaseKeeper(store, lease, interval=0.5) as keeper:
        writer = Running(_flow(config, table, "insert_overwrite", _overwrite(table, 10, through=stall.name), keeper))
        _wait_for("the writer's statement to run", lambda: stall.reached.exists() or not writer.thread.is_alive())
        time.sleep(2.5 * CONTROL_TTL)  # stalled past two TTLs; the heartbeats keep the lease live
        stall.go()
        writer.join()
    store.release(lease)
    assert writer.error is None, repr(writer.error)
    report = writer.report
    assert report.status is WriteStatus.COMMITTED and report.tag[LEASE_CHECKED_AT] == AT_COMMIT, report
    assert not writer.flow.history.lease_losses
    after = _snapshots(spark, table)
    (new,) = after[len(start):]
    assert new[0] == report.snapshot_id and new[1] == start[-1][0] and new[2] == "overwrite"
    assert _rows(spark, table) == [(4, "b", 4), (10, "a", 10)]


def test_the_session_conf_wraps_the_catalog_for_attempts(spark_home: Path) -> None:
    config = SparkConfig(home=str(spark_home))
    assert built_jar()[0] is not None, built_jar()[1]
    conf = session_conf(config.spark_conf(), config)
    assert conf["spark.sql.catalog.lake.catalog-impl"] == FENCED_CATALOG
    assert conf["spark.sql.catalog.lake.occflow.delegate.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf[f"spark.sql.catalog.lake.{SCOPE_KEY}"] == THREAD_SCOPE
    assert "spark.sql.catalog.lake.occflow.lease.window" not in conf  # each attempt names its own
    assert str(built_jar()[0]) in conf["spark.jars"].split(",")


def test_without_the_jar_an_in_process_attempt_says_its_check_stops_at_the_statement_start(
    iceberg_engine: SparkEngine, spark_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No silent fallback: without the jar the session keeps its plain catalog, and what an
    attempt is told (and the task log says) names where its check stops and why."""
    monkeypatch.setenv(JAR_ENV, str(tmp_path / "not-built.jar"))
    config = SparkConfig(home=str(spark_home), catalog={"name": "plain"})
    conf = session_conf(config.spark_conf(), config)
    assert conf == config.spark_conf()
    # The running session has no catalog 'plain' of its own: as if it started without the jar.
    found = in_session(iceberg_engine.session(), config)
    assert found.checked_at == AT_STATEMENT_START
    said = found.describe()
    assert "checked only right before the write statement starts, not at its commit" in said
    assert "not-built.jar is not built" in said, said
