"""A spark-submit driver commits only while its write's lease is certainly live
(``engines/spark/lease_window.py``, ``engines/spark/submit_fence.py``): the task keeps a window
file fresh, the driver reads it right before its write statement and, on Iceberg, the lease-fenced
catalog reads it again inside the commit; a stale, lost or other-fence window is refused.

The oracle is the table's own record: Iceberg's ``snapshots`` metadata table and the rows, read
from this process's session (the drivers share its SQLite catalog and warehouse). The Java check
is held against the Python one on the same window files.
"""

from __future__ import annotations

import json
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

from occflow.core.operations import parse_operation
from occflow.engines.ledger import LeaseNotLive
from occflow.engines.spark import SparkConfig, SparkEngine
from occflow.engines.spark.lease_window import (
    WindowPublisher,
    check_window,
    window_path,
    write_window,
)
from occflow.engines.spark.submit import _driver_command, _driver_conf, submit_job
from occflow.engines.spark.submit_fence import (
    AT_COMMIT,
    AT_STATEMENT_START,
    FENCED_CATALOG,
    JAR_ENV,
    LEASE_CHECKED_AT,
    built_jar,
    in_session,
    plan,
)

DRIVER_TIMEOUT = 600  # a driver starts a JVM; on a loaded 2-core machine that takes a while
FENCE = 7


def _config(spark_home: Path) -> SparkConfig:
    return SparkConfig(home=str(spark_home), app_name="occflow-lease-window-test",
                       conf={"spark.driver.memory": "768m"})


def _merge(table: str) -> str:
    """Two statements: a staging view, then the MERGE (the check runs right before the MERGE)."""
    return (
        "CREATE OR REPLACE TEMP VIEW incoming AS "
        "SELECT * FROM VALUES (2L, 'a', 20), (90L, 'a', 90) AS s(id, ds, v);\n"
        f"MERGE INTO {table} t USING incoming s ON t.id = s.id AND t.ds = s.ds "
        "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT *"
    )


def _record(engine: SparkEngine, table: str) -> tuple[int, list[tuple[int, str, int]]]:
    """The table's own record: how many snapshots it has, and its rows."""
    spark = engine.session()
    snapshots = spark.sql(f"SELECT count(*) FROM {table}.snapshots").collect()[0][0]
    rows = [(r.id, r.ds, r.v) for r in spark.sql(f"SELECT id, ds, v FROM {table} ORDER BY id").collect()]
    return int(snapshots), rows


# ------------------------------------------------------------------ check_window alone (no Spark)


def test_missing_window_is_not_live(tmp_path: Path) -> None:
    with pytest.raises(LeaseNotLive, match="cannot be read") as caught:
        check_window(tmp_path / "nothing.lease.json", FENCE)
    assert caught.value.fence == FENCE


@pytest.mark.parametrize("text", ["", "{not json", "[]", '{"fence": 7}', '{"fence": "x", "live_until": 1e12}',
                                  '{"live_until": 1e12}'])
def test_unreadable_window_is_not_live(tmp_path: Path, text: str) -> None:
    path = tmp_path / "o.json.lease.json"
    path.write_text(text)
    with pytest.raises(LeaseNotLive, match="cannot be read"):
        check_window(path, FENCE)


def test_stale_window_is_not_live(tmp_path: Path) -> None:
    path = window_path(tmp_path / "o.json")
    write_window(path, FENCE, time.time() - 5)
    with pytest.raises(LeaseNotLive, match=r"past its last confirmed validity"):
        check_window(path, FENCE)


def test_window_inside_the_commit_margin_is_not_live(tmp_path: Path) -> None:
    path = window_path(tmp_path / "o.json")
    write_window(path, FENCE, time.time() + 0.5)
    with pytest.raises(LeaseNotLive, match="not certainly live"):
        check_window(path, FENCE, margin=1.0)


def test_lost_lease_window_is_not_live(tmp_path: Path) -> None:
    path = window_path(tmp_path / "o.json")
    write_window(path, FENCE, 0.0)
    with pytest.raises(LeaseNotLive, match="the task lost it"):
        check_window(path, FENCE)


def test_window_of_another_fence_is_not_live(tmp_path: Path) -> None:
    path = window_path(tmp_path / "o.json")
    write_window(path, FENCE + 1, time.time() + 60)
    with pytest.raises(LeaseNotLive, match=f"fence {FENCE + 1}.*started under {FENCE}"):
        check_window(path, FENCE)


def test_fresh_window_of_the_same_fence_is_live(tmp_path: Path) -> None:
    path = window_path(tmp_path / "o.json")
    assert path.name == "o.json.lease.json"
    write_window(path, FENCE, time.time() + 30)
    check_window(path, FENCE)  # no exception
    written = json.loads(path.read_text())
    assert written == {"fence": FENCE, "live_until": pytest.approx(time.time() + 30, abs=5)}


def test_publisher_keeps_the_window_fresh_and_closes_it_on_exit(tmp_path: Path) -> None:
    path = window_path(tmp_path / "sub" / "o.json")
    confirmed: list[float | None] = [time.time() + 30]
    with WindowPublisher(path, FENCE, lambda: confirmed[0], interval=0.05):
        check_window(path, FENCE)
        confirmed[0] = time.time() - 10  # the keeper stopped confirming: the window goes stale
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and json.loads(path.read_text())["live_until"] > time.time() - 5:
            time.sleep(0.05)
        with pytest.raises(LeaseNotLive, match="past its last confirmed validity"):
            check_window(path, FENCE)
        confirmed[0] = None  # the keeper lost the lease
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and json.loads(path.read_text())["live_until"] != 0.0:
            time.sleep(0.05)
        with pytest.raises(LeaseNotLive, match="the task lost it"):
            check_window(path, FENCE)
        confirmed[0] = time.time() + 30
        time.sleep(0.3)
    with pytest.raises(LeaseNotLive, match="the task lost it"):  # closed: no later commit
        check_window(path, FENCE)


# ------------------------------------------------------------------ a real driver reads the window


@pytest.mark.spark
@pytest.mark.slow
def test_driver_under_a_stale_window_runs_its_merge_but_does_not_commit(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    before = _record(iceberg_engine, iceberg_table)
    path = tmp_path / "outcome.json"
    window = window_path(path)
    write_window(window, FENCE, time.time() - 60)  # the task last confirmed the lease a minute ago
    job = submit_job(_merge(iceberg_table), iceberg_table, path, "merge", _config(spark_home),
                     lease_window=(window, FENCE))
    outcome = job.wait(timeout=DRIVER_TIMEOUT)
    assert not outcome.committed, job.log_tail()
    refused = outcome.lease_refused
    assert refused is not None, (outcome, job.log_tail())
    assert "past its last confirmed validity" in refused.reason and refused.fence == FENCE, refused
    assert outcome.snapshot_id is None and outcome.error is None
    assert _record(iceberg_engine, iceberg_table) == before  # no new snapshot, the same rows


@pytest.mark.spark
@pytest.mark.slow
def test_driver_under_a_window_kept_fresh_commits(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    snapshots, rows = _record(iceberg_engine, iceberg_table)
    path = tmp_path / "outcome.json"
    window = window_path(path)
    with WindowPublisher(window, FENCE, lambda: time.time() + 30, interval=1.0):
        job = submit_job(_merge(iceberg_table), iceberg_table, path, "merge", _config(spark_home),
                         lease_window=(window, FENCE))
        outcome = job.wait(timeout=DRIVER_TIMEOUT)
    assert outcome.committed, (outcome.error, outcome.tag, job.log_tail())
    assert outcome.lease_refused is None, outcome
    after_snapshots, after_rows = _record(iceberg_engine, iceberg_table)
    assert after_snapshots == snapshots + 1
    current = iceberg_engine.session().sql(
        f"SELECT snapshot_id FROM {iceberg_table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).collect()[0][0]
    assert outcome.snapshot_id == current
    expected = sorted([(i, d, 20 if i == 2 else v) for i, d, v in rows] + [(90, "a", 90)])
    assert after_rows == expected


@pytest.mark.spark
@pytest.mark.slow
def test_driver_under_a_window_of_another_fence_does_not_commit(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    """A later holder of the footprint (fence 8) keeps its window fresh; a driver of the old
    lease (fence 7) that reads it must not commit."""
    before = _record(iceberg_engine, iceberg_table)
    path = tmp_path / "outcome.json"
    window = window_path(path)
    with WindowPublisher(window, FENCE + 1, lambda: time.time() + 30, interval=1.0):
        job = submit_job(f"INSERT INTO {iceberg_table} VALUES (91, 'c', 1)", iceberg_table, path,
                         config=_config(spark_home), lease_window=(window, FENCE))
        outcome = job.wait(timeout=DRIVER_TIMEOUT)
    assert not outcome.committed, job.log_tail()
    assert outcome.lease_refused is not None and f"names fence {FENCE + 1}" in outcome.lease_refused.reason, outcome
    assert _record(iceberg_engine, iceberg_table) == before


@pytest.mark.spark
@pytest.mark.slow
def test_lease_that_lapses_while_the_insert_runs_stops_its_commit(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path
) -> None:
    """The lease is confirmed until the driver's session is up, then for 15 s more and no longer;
    the INSERT takes 25 s, so its commit comes after the lease lapsed: the lease-fenced catalog
    refuses it inside the commit, after the statement has written its files."""
    assert built_jar()[0] is not None, built_jar()[1]  # scripts/bootstrap.sh builds it
    before = _record(iceberg_engine, iceberg_table)
    path = tmp_path / "outcome.json"
    window = window_path(path)
    # The INSERT's one row sleeps 25 s on its way (a MERGE refuses a non-deterministic source).
    sql = (
        f"INSERT INTO {iceberg_table} SELECT 92L, 'a', "
        "92 + 0 * length(coalesce(reflect('java.lang.Thread', 'sleep', bigint(25000)), '')) FROM range(1)"
    )
    lapses_at: list[float] = []

    def confirmed() -> float:
        if not lapses_at and (path.parent / (path.name + ".app.json")).exists():
            lapses_at.append(time.time() + 15)  # the keeper stops confirming 15 s after the session is up
        return lapses_at[0] if lapses_at else time.time() + 10

    with WindowPublisher(window, FENCE, confirmed, interval=0.2):
        job = submit_job(sql, iceberg_table, path, "insert_into", _config(spark_home),
                         lease_window=(window, FENCE))
        outcome = job.wait(timeout=DRIVER_TIMEOUT)
    refused = outcome.lease_refused
    if refused is not None and refused.at == AT_STATEMENT_START:
        # The lease had lapsed before the INSERT began (a slow machine): not the case this test is about.
        assert _record(iceberg_engine, iceberg_table) == before
        pytest.skip("the driver reached its INSERT after the lease lapsed; nothing to learn")
    if not (outcome.committed or refused is not None):
        pytest.fail(f"the INSERT failed: {outcome.error}\n{job.log_tail()}")
    assert outcome.tag[LEASE_CHECKED_AT] == AT_COMMIT, job.log_tail()
    committed_at = iceberg_engine.session().sql(
        f"SELECT unix_millis(committed_at) FROM {iceberg_table}.snapshots ORDER BY committed_at DESC LIMIT 1"
    ).collect()[0][0] / 1000
    assert not (outcome.committed and committed_at > lapses_at[0]), (
        f"committed {committed_at - lapses_at[0]:.1f}s after the lease lapsed")
    assert not outcome.committed and refused is not None, job.log_tail()
    assert refused.at == AT_COMMIT and refused.fence == FENCE, refused
    assert f"(fence {FENCE}) is not certainly live" in refused.reason, refused
    assert "lease not live at the commit of" in refused.reason, refused
    assert outcome.snapshot_id is None and outcome.error is None
    assert _record(iceberg_engine, iceberg_table) == before  # no new snapshot, the same rows


@pytest.mark.spark
@pytest.mark.slow
def test_driver_without_the_fence_jar_says_its_check_stops_at_the_statement_start(
    iceberg_engine: SparkEngine, iceberg_table: str, spark_home: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """No silent fallback: without the jar the submit warns, the driver says so in its log, and
    its outcome records where its lease was checked last."""
    monkeypatch.setenv(JAR_ENV, str(tmp_path / "not-built.jar"))
    snapshots, _ = _record(iceberg_engine, iceberg_table)
    path = tmp_path / "outcome.json"
    window = window_path(path)
    with WindowPublisher(window, FENCE, lambda: time.time() + 30, interval=1.0), caplog.at_level("WARNING"):
        job = submit_job(f"INSERT INTO {iceberg_table} VALUES (93, 'c', 1)", iceberg_table, path,
                         config=_config(spark_home), lease_window=(window, FENCE))
        outcome = job.wait(timeout=DRIVER_TIMEOUT)
    assert outcome.committed, (outcome.error, job.log_tail())
    assert outcome.tag[LEASE_CHECKED_AT] == AT_STATEMENT_START
    said = "checked only right before the write statement starts, not at its commit"
    assert said in job.log_tail(200_000) and "not-built.jar is not built" in job.log_tail(200_000)
    assert said in caplog.text
    assert _record(iceberg_engine, iceberg_table)[0] == snapshots + 1


# ------------------------------------------------------------------ the Java check, without Spark


def _java_refusal(path: Path, fence: int, margin: float = 1.0) -> str | None:
    jar, why = built_jar()
    assert jar is not None, why  # scripts/bootstrap.sh builds it
    done = subprocess.run(
        ["java", "-cp", str(jar), "occflow.lease.LeaseWindow", str(path), str(fence),
         str(margin)], capture_output=True, text=True, timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout.strip() if done.returncode == 1 else None


def _python_refusal(path: Path, fence: int, margin: float = 1.0) -> str | None:
    try:
        check_window(path, fence, margin)
    except LeaseNotLive as refused:
        return str(refused)
    return None


WINDOWS = {
    "missing": None,
    "empty": "",
    "not json": "{not json",
    "a list": "[]",
    "no live_until": '{"fence": 7}',
    "fence not a number": '{"fence": "x", "live_until": 1e12}',
    "no fence": '{"live_until": 1e12}',
    "other fence": '{"fence": 8, "live_until": 1e12}',
    "lost": '{"fence": 7, "live_until": 0.0}',
    "stale": '{"fence": 7, "live_until": %(past)s}',
    "inside the margin": '{"fence": 7, "live_until": %(soon)s}',
    "live": '{"fence": 7, "live_until": %(later)s}',
}


def test_java_check_refuses_the_windows_the_python_check_refuses(tmp_path: Path) -> None:
    """The lease-fenced catalog's check (Java) and the driver's (Python) agree window by window:
    both refuse or both accept, and a refusal names the same reason."""
    reasons = {"cannot be read": "unreadable", "names fence": "other fence", "the task lost it": "lost",
               "past its last confirmed validity": "stale", "less than the commit margin": "margin"}
    for name, text in WINDOWS.items():
        path = tmp_path / f"{name.replace(' ', '_')}.lease.json"
        if text is not None:
            now = time.time()
            path.write_text(text % {"past": now - 30, "soon": now + 5, "later": now + 60} if "%" in text else text)
        java, python = _java_refusal(path, FENCE, margin=10.0), _python_refusal(path, FENCE, margin=10.0)
        assert (java is None) == (python is None), (name, java, python)
        kinds = {kind for marker, kind in reasons.items() if java and marker in java}
        assert kinds == {kind for marker, kind in reasons.items() if python and marker in python}, (name, java, python)
        assert (java is None) == (name == "live"), (name, java)


# ------------------------------------------------------------------ what the driver is started with


def test_fenced_driver_gets_the_wrapping_catalog_and_its_delegate(tmp_path: Path) -> None:
    config = _config(tmp_path)
    window = (tmp_path / "o.json.lease.json", FENCE)
    command = _driver_command("spark-submit", config, (), tmp_path / "o.json", "lake.db.t", parse_operation("insert_into"),
                              None, None, window)
    # The conf travels in a 0600 properties file, never on the command line (submit_files.py).
    assert "--conf" not in command and "--properties-file" in command
    conf = _driver_conf(config, "lake.db.t", window)
    jar, why = built_jar()
    assert jar is not None, why
    assert conf["spark.sql.catalog.lake.catalog-impl"] == FENCED_CATALOG
    assert conf["spark.sql.catalog.lake.occflow.delegate.catalog-impl"] == "org.apache.iceberg.jdbc.JdbcCatalog"
    assert conf["spark.sql.catalog.lake.occflow.lease.window"] == str((tmp_path / "o.json.lease.json").absolute())
    assert conf["spark.sql.catalog.lake.occflow.lease.fence"] == str(FENCE)
    assert conf["spark.jars"].split(",")[-1] == str(jar)
    assert conf["spark.jars"].split(",")[:-1] == config.spark_conf()["spark.jars"].split(",")
    # The session a driver builds from it is recognised as fenced for its window and fence only.
    assert in_session(conf, config, tmp_path / "o.json.lease.json", FENCE).checked_at == AT_COMMIT
    assert in_session(conf, config, tmp_path / "o.json.lease.json", FENCE + 1).checked_at == AT_STATEMENT_START


def test_hadoop_catalog_type_becomes_the_delegate_type(tmp_path: Path) -> None:
    config = SparkConfig(home=str(tmp_path), catalog={"type": "hadoop"})
    conf = plan(config).spark_conf(config.spark_conf(), tmp_path / "w.json", FENCE)
    assert conf["spark.sql.catalog.lake.catalog-impl"] == FENCED_CATALOG
    assert conf["spark.sql.catalog.lake.occflow.delegate.type"] == "hadoop"
    assert "spark.sql.catalog.lake.type" not in conf


def test_unfenced_plans_say_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parquet = plan(SparkConfig(home=str(tmp_path), table_format="parquet"))
    assert parquet.checked_at == AT_STATEMENT_START and "parquet" in parquet.reason
    monkeypatch.setenv(JAR_ENV, str(tmp_path / "none.jar"))
    missing = plan(_config(tmp_path))
    assert missing.checked_at == AT_STATEMENT_START and "none.jar is not built" in missing.describe()
    assert missing.spark_conf({"a": "b"}, tmp_path / "w.json", FENCE) == {"a": "b"}


def test_jar_built_from_other_sources_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar, why = built_jar()
    assert jar is not None, why
    stale = tmp_path / "stale.jar"
    with zipfile.ZipFile(jar) as source, zipfile.ZipFile(stale, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "META-INF/MANIFEST.MF":
                data = data.replace(b"Occflow-Source-Digest: ", b"Occflow-Source-Digest: 0")
            target.writestr(item, data)
    monkeypatch.setenv(JAR_ENV, str(stale))
    assert built_jar() == (None, built_jar()[1]) and "other sources" in built_jar()[1]
