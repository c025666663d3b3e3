"""Two live tries of one task instance write one logical append: it must land exactly once.

Airflow starts try 2 of a task instance while try 1 may still run (a worker that stopped
heart-beating to Airflow, a stuck process). Both tries run the real write operators, in threads
of this process, against one real table: delta-rs (``DeltaWriteOperator``) and Spark + Iceberg
(``SparkWriteOperator``, one Spark session). Each pair is one logical write (its own DAG run)
of ``ROWS`` rows; random delays, drawn around a few shapes, decide the interleaving:

- a try plans on a snapshot that already holds the other's commit, and never verified (try 1's
  first attempt does not look): before the fix it committed a second time;
- both plan on one snapshot and the second commit loses with delta-rs's ``ConcurrentTransaction``
  on the write's own app id: before the fix that try failed for good although its data landed;
- with admission: try 2 waits for try 1's live lease; try 1 is frozen (no heartbeats, no
  progress) until its lease lapses and try 2 takes the table, then wakes up before its commit.

Delays are injected around the real engine calls only: after the snapshot is read (the data
callable, a ``SET`` statement before the SQL write), between the before-commit check and the
delta-rs call (``deltalake.write_deltalake``), and in the lease heartbeats of a frozen try.
At the end the test reads the table and counts each write's rows.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException, TaskDeferred

from occflow.core.causes import causes
from occflow.leases import LeaseLostError, LeaseRequest, LeaseStore, TaskAdmission

ROWS = 3
SEED = 11
STALL_KEY = "occflow.adversarial.stall"


@dataclass(frozen=True)
class Try:
    """One try of a pair; times in seconds from the pair's start."""

    number: int
    start: float = 0.0
    stall_before_check: float = 0.0  # after its snapshot is read: a slow job
    stall_after_check: float = 0.0  # between the before-commit check and the delta-rs call
    freeze: float = 0.0  # the process is stuck from its start: no heartbeats, no progress


@dataclass(frozen=True)
class TryEnd:
    number: int
    state: str  # committed / settled / rescheduled / stale / failed
    detail: str = ""
    waited: bool = False


class Harness:
    """Runs pairs of tries and injects the delays; one per engine and table."""

    def __init__(self, make_operator: Callable[[Try, int, Harness], Any], lease_url: str | None) -> None:
        self.make_operator = make_operator
        self.lease_url = lease_url
        self.stalls: dict[str, Try] = {}  # thread name -> its try's delays
        self.frozen: dict[tuple[str, int], float] = {}  # (run id, try) -> monotonic end of freeze
        self.ends: dict[int, list[TryEnd]] = {}

    def stall(self, which: str) -> None:
        spec = self.stalls.get(threading.current_thread().name)
        if spec is not None:
            time.sleep(max(getattr(spec, which), spec.freeze if which == "stall_before_check" else 0.0))

    def heartbeat_of(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def heartbeat(store: Any, lease: Any, *args: Any, **kwargs: Any) -> Any:
            until = self.frozen.get((lease.holder.run_id, lease.holder.try_number))
            if until is not None:
                time.sleep(max(0.0, until - time.monotonic()))
            return real(store, lease, *args, **kwargs)

        return heartbeat

    def run_pair(self, write_no: int, tries: tuple[Try, Try]) -> None:
        threads = [threading.Thread(target=self._run_try, args=(write_no, spec), name=f"w{write_no}-try{spec.number}")
                   for spec in tries]
        for spec, thread in zip(tries, threads, strict=True):
            self.stalls[thread.name] = spec
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
            assert not thread.is_alive(), f"write {write_no}: a try did not finish"

    def _run_try(self, write_no: int, spec: Try) -> None:
        time.sleep(spec.start)
        if spec.freeze:
            self.frozen[(run_id(write_no), spec.number)] = time.monotonic() + spec.freeze
        end = None
        for _ in range(3):  # a rescheduled latest try runs again, as Airflow would run it
            end = self._execute(write_no, spec)
            if end.state != "rescheduled" or spec.number == 1:  # try 1 was superseded by try 2
                break
            time.sleep(0.5)
        assert end is not None
        self.ends.setdefault(write_no, []).append(end)

    def _execute(self, write_no: int, spec: Try) -> TryEnd:
        operator = self.make_operator(spec, write_no, self)
        context = {"ti": SimpleNamespace(dag_id="adversarial", task_id="append", run_id=run_id(write_no),
                                         map_index=-1, try_number=spec.number),
                   "logical_date": "2024-01-01T00:00:00+00:00"}
        waited = False
        try:
            try:
                report = operator.execute(context)
            except TaskDeferred as deferred:  # what the triggerer does: poll until admitted
                waited = True
                report = operator.execute_admitted(context, self._admitted(deferred.trigger))
        except AirflowRescheduleException as exc:
            return TryEnd(spec.number, "rescheduled", str(exc.__cause__ or exc), waited)
        except Exception as exc:  # noqa: BLE001 - every other end of a try is a failure to count
            if any(isinstance(c, LeaseLostError) for c in causes(exc)):  # refused at admission
                return TryEnd(spec.number, "stale", str(exc), waited)
            return TryEnd(spec.number, "failed", f"{type(exc).__name__}: {exc}"[:400], waited)
        if report["committed_by"] is None:  # this try's own commit
            return TryEnd(spec.number, "committed", "", waited)
        # Found in the table, another try's commit: how it was found is the tag's text (a label only).
        return TryEnd(spec.number, "settled", report["tag"].get("exactly_once", ""), waited)

    def _admitted(self, trigger: Any) -> dict[str, Any]:
        admission, request = TaskAdmission(self.lease_url), LeaseRequest.from_dict(trigger.request)
        while (event := trigger.check(admission, request)) is None:
            time.sleep(0.1)
        return event


def run_id(write_no: int) -> str:
    return f"pair-{write_no:02d}"


def ids_of(write_no: int) -> list[int]:
    return [write_no * 100 + i for i in range(ROWS)]


def labels(ends: list[TryEnd]) -> list[str]:
    """What happened in a pair, in the words of the issue."""
    out = []
    if sum(e.state == "committed" for e in ends) > 1:
        out.append("committed twice")
    for e in ends:
        if e.state == "settled":
            out.append("settled: " + ("concurrent_transaction" if "concurrent_transaction" in e.detail
                                      else "verified first" if "earlier attempt" in e.detail
                                      else "before-commit check"))
        elif e.state == "failed":
            out.append("failed: " + ("concurrent_transaction" if "concurrent_transaction" in e.detail else e.detail[:80]))
        elif e.state in ("rescheduled", "stale"):
            out.append({"rescheduled": "aborted: lease not live at the commit", "stale": "stale try refused"}[e.state])
        if e.waited:
            out.append("waited for the other try's lease")
    return out


def tally(engine: str, harness: Harness, rows: list[int]) -> dict[str, Any]:
    per_write = {n: rows.count(n) for n in harness.ends}
    ends = [e for pair in harness.ends.values() for e in pair]
    summary = {
        "engine": engine,
        "pairs": len(harness.ends),
        "interleavings": dict(Counter(label for pair in harness.ends.values() for label in labels(pair))),
        "duplicated_rows": sum(max(c - ROWS, 0) for c in per_write.values()),
        "lost_rows": sum(max(ROWS - c, 0) for c in per_write.values()),
        "failed_tries": [f"write {n} try {e.number}: {e.detail}" for n, pair in harness.ends.items()
                         for e in pair if e.state == "failed"],
        "committing_tries": sum(e.state == "committed" for e in ends),
        "stray_rows": sorted(set(rows) - set(per_write)),
    }
    print("ADVERSARIAL " + json.dumps(summary, sort_keys=True))
    return summary


def assert_exactly_once(summary: dict[str, Any]) -> None:
    assert summary["duplicated_rows"] == 0, summary
    assert summary["lost_rows"] == 0, summary
    assert summary["failed_tries"] == [], summary
    assert summary["committing_tries"] == summary["pairs"], summary  # one commit per write
    assert summary["stray_rows"] == [], summary


def jitter(rng: random.Random, spec: Try, spread: float = 0.1) -> Try:
    return replace(spec, start=spec.start + rng.uniform(0.0, spread))


# ---------------------------------------------------------------------------------------------
# delta-rs


def delta_shapes(rng: random.Random, pairs: int) -> Iterator[tuple[Try, Try]]:
    """Three shapes in turn, each with random delays around it."""
    for n in range(pairs):
        shape = n % 3
        if shape == 0:  # try 2 commits; try 1 starts later and plans on a snapshot holding it
            yield (Try(2, start=rng.uniform(0.0, 0.05)), Try(1, start=0.3 + rng.uniform(0.0, 0.2)))
        elif shape == 1:  # one snapshot: one try checks and waits, the other commits meanwhile
            slow, quick = (1, 2) if n % 2 else (2, 1)
            yield (Try(slow, stall_after_check=0.5 + rng.uniform(0.0, 0.2)),
                   Try(quick, stall_before_check=0.15 + rng.uniform(0.0, 0.1)))
        else:
            yield tuple(Try(k, start=rng.uniform(0, 0.3), stall_before_check=rng.uniform(0, 0.3),  # type: ignore[misc]
                            stall_after_check=rng.uniform(0, 0.3)) for k in (1, 2))


def delta_admission_shapes(rng: random.Random) -> Iterator[tuple[Try, Try]]:
    """With leases (TTL 1.5 s): waiting, frozen tries whose lease lapses, a stale try."""
    yield (jitter(rng, Try(1, stall_before_check=0.8)), jitter(rng, Try(2, start=0.2)))  # try 2 waits
    yield (Try(1, freeze=3.5), jitter(rng, Try(2, start=0.2)))  # try 2 takes over and commits first
    yield (Try(1, freeze=2.5), jitter(rng, Try(2, start=0.2, stall_before_check=2.5)))  # try 1 wakes first
    yield (jitter(rng, Try(2, stall_before_check=0.6)), jitter(rng, Try(1, start=0.2)))  # try 1 is stale
    yield (jitter(rng, Try(2)), jitter(rng, Try(1, start=1.0)))  # try 1 starts after try 2 is done


@pytest.fixture
def delta_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, Harness]]]:
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")
    from occflow.engines.deltars import DeltaRsTable

    path = str(tmp_path / "events")
    schema = {"id": pa.array([], pa.int64()), "w": pa.array([], pa.int64())}
    assert DeltaRsTable(path).create(pa.table(schema)).committed
    current: dict[str, Harness] = {}
    real_write = deltalake.write_deltalake

    def write_deltalake(*args: Any, **kwargs: Any) -> Any:
        if "harness" in current:
            current["harness"].stall("stall_after_check")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(deltalake, "write_deltalake", write_deltalake)
    yield path, current


def delta_operator(path: str, lease_url: str | None) -> Callable[[Try, int, Harness], Any]:
    import pyarrow as pa

    from occflow.operators.delta import DeltaWriteOperator

    def make(spec: Try, write_no: int, harness: Harness) -> Any:
        rows = pa.table({"id": pa.array(ids_of(write_no), pa.int64()), "w": pa.array([write_no] * ROWS, pa.int64())})

        def data(context: Any, snapshot: Any) -> Any:
            harness.stall("stall_before_check")
            return rows

        return DeltaWriteOperator(task_id="append", table="events", path=path, operation="insert_into", data=data,
                                  admission=lease_url is not None, lease_store_url=lease_url, lease_ttl=1.5,
                                  admission_poll_interval=0.2, admission_wait_seconds=0)

    return make


def delta_rows(path: str) -> list[int]:
    from deltalake import DeltaTable

    return [int(r["w"]) for r in DeltaTable(path).to_pyarrow_table(columns=["w"]).to_pylist()]


def test_two_live_tries_on_deltars_without_admission_commit_each_write_once(
    delta_table: tuple[str, dict[str, Harness]],
) -> None:
    path, current = delta_table
    harness = current["harness"] = Harness(delta_operator(path, None), None)
    for write_no, pair in enumerate(delta_shapes(random.Random(SEED), 15), start=1):
        harness.run_pair(write_no, pair)
    summary = tally("delta-rs, no admission", harness, delta_rows(path))
    assert_exactly_once(summary)
    # Both interleavings of the issue happened, and each was settled, not committed or failed.
    assert summary["interleavings"].get("settled: concurrent_transaction", 0) >= 1, summary
    assert summary["interleavings"].get("settled: before-commit check", 0) >= 1, summary


def test_two_live_tries_on_deltars_with_admission_and_a_frozen_try_commit_each_write_once(
    delta_table: tuple[str, dict[str, Harness]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    path, current = delta_table
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    harness = current["harness"] = Harness(delta_operator(path, url), url)
    monkeypatch.setattr(LeaseStore, "heartbeat", harness.heartbeat_of(LeaseStore.heartbeat))
    for write_no, pair in enumerate(delta_admission_shapes(random.Random(SEED)), start=1):
        harness.run_pair(write_no, pair)
    summary = tally("delta-rs, admission", harness, delta_rows(path))
    assert_exactly_once(summary)
    seen = summary["interleavings"]
    assert seen.get("waited for the other try's lease", 0) >= 2, summary
    assert seen.get("aborted: lease not live at the commit", 0) >= 1, summary
    assert seen.get("settled: before-commit check", 0) >= 1, summary


# ---------------------------------------------------------------------------------------------
# Spark + Iceberg: one session, tries in threads; the lease and the before-commit check guard


def iceberg_shapes(rng: random.Random) -> Iterator[tuple[Try, Try]]:
    """With leases (TTL 4 s); Spark statements take a second or two on a busy machine."""
    yield (jitter(rng, Try(1, stall_before_check=2.0)), jitter(rng, Try(2, start=0.5)))  # try 2 waits
    yield (Try(1, freeze=10.0), jitter(rng, Try(2, start=0.5)))  # try 2 takes over and commits first
    yield (Try(1, freeze=6.0), jitter(rng, Try(2, start=0.5, stall_before_check=6.0)))  # try 1 wakes first
    yield (jitter(rng, Try(2)), jitter(rng, Try(1, start=7.0)))  # try 1 starts after try 2 is done


@pytest.fixture(scope="module")
def spark_engine_for_tries(iceberg_engine: Any) -> tuple[Any, dict[str, Any]]:
    """The run's one Spark session (tests/conftest.py) and the config a driver process needs."""
    engine = iceberg_engine
    spark = engine.session()
    conf = spark.sparkContext.getConf()
    config = {"app_name": conf.get("spark.app.name"), "catalog": {
        "name": "lake", "uri": conf.get("spark.sql.catalog.lake.uri", None),
        "warehouse": conf.get("spark.sql.catalog.lake.warehouse", None)}}
    return engine, config


@pytest.mark.spark
@pytest.mark.slow
def test_two_live_tries_on_spark_iceberg_commit_each_write_once(
    spark_engine_for_tries: tuple[Any, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql import SparkSession

    from occflow.operators.spark import SparkWriteOperator

    engine, config = spark_engine_for_tries
    spark = engine.session()
    table = f"lake.adversarial.t{int(time.time() * 1000) % 10**9}"
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.adversarial")
    spark.sql(f"CREATE TABLE {table} (id BIGINT, w BIGINT) USING iceberg TBLPROPERTIES ('format-version'='2')")
    url = f"sqlite:///{tmp_path / 'leases.db'}"

    def make(spec: Try, write_no: int, harness: Harness) -> Any:
        values = ", ".join(f"({i}, {write_no})" for i in ids_of(write_no))
        sql = [f"SET {STALL_KEY} = w{write_no}", f"INSERT INTO {table} VALUES {values}"]
        return SparkWriteOperator(task_id="append", table=table, operation="insert_into", table_format="iceberg",
                                  job=sql, spark_config=config, lease_store_url=url, lease_ttl=4.0,
                                  admission_poll_interval=0.2, admission_wait_seconds=0)

    harness = Harness(make, url)
    real_sql = SparkSession.sql

    def sql(session: Any, statement: str, *args: Any, **kwargs: Any) -> Any:
        if statement.startswith(f"SET {STALL_KEY}"):  # after the snapshot is read, before the write
            harness.stall("stall_before_check")
        return real_sql(session, statement, *args, **kwargs)

    monkeypatch.setattr(SparkSession, "sql", sql)
    monkeypatch.setattr(LeaseStore, "heartbeat", harness.heartbeat_of(LeaseStore.heartbeat))
    for write_no, pair in enumerate(iceberg_shapes(random.Random(SEED)), start=1):
        harness.run_pair(write_no, pair)
    rows = [int(r[0]) for r in real_sql(spark, f"SELECT w FROM {table}").collect()]
    summary = tally("spark-iceberg, admission", harness, rows)
    assert_exactly_once(summary)
    assert summary["interleavings"].get("waited for the other try's lease", 0) >= 2, summary
