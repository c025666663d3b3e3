"""MaxComputeWriteOperator run by real Airflow (``dag.test()``) and raced from threads.

MaxCompute is a remote service that cannot run here: every test runs the operator against
``occflow.engines.maxcompute.StandInProject``, a stand-in behind PyODPS's client and instance
interface that commits through occflow's reference engine with the table's MaxCompute profile, so
jobs really race by the specs' rules and fail with MaxCompute's error texts (raised as PyODPS
raises them). Oracles: the spec cells are written out here (spec 001 rows 8, 9, 10, 18, 20; spec
000's INSERT rows), and the tables must equal a serial re-run of the committed jobs in commit
order on a fresh reference table.

``dag.test()`` runs tasks one at a time, so the races run the operators in threads (one
Airflow-like context each: a task instance stand-in with ``xcom_push``) against one stand-in
project and one lease store.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from occflow.core.classify import classify
from occflow.core.errors import InvalidDeclarationError
from occflow.core.kinds import ConflictKind
from occflow.core.reference import ReferenceTable
from occflow.engines.maxcompute import MaxComputeWrite, StandInProject
from occflow.engines.maxcompute.jobs import ProjectJobs
from occflow.operators.exactly_once import from_context
from occflow.operators.maxcompute import MaxComputeWriteOperator

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]
DELTA, STANDARD = "mc.orders", "mc.totals"
DAY = "ds = '2024-01-01'"
SQL = {
    "insert_day": f"INSERT INTO {DELTA} PARTITION ({DAY}) SELECT id, amount FROM mc.staged",
    "update_day": f"UPDATE {DELTA} SET amount = amount + 1 WHERE {DAY}",
    "minor_compact": f"ALTER TABLE {DELTA} PARTITION ({DAY}) COMPACT minor",
    "major_compact": f"ALTER TABLE {DELTA} PARTITION ({DAY}) COMPACT major",
    "append_totals": f"INSERT INTO {STANDARD} PARTITION ({DAY}) SELECT region, amount FROM mc.staged",
    "overwrite_totals": f"INSERT OVERWRITE TABLE {STANDARD} PARTITION ({DAY}) SELECT region, amount FROM mc.staged",
}
# The order the jobs end in when they run side by side (seconds each job runs on the stand-in).
SECONDS = {"insert_into": 0.4, "update": 0.8, "minor_compact": 1.2, "major_compact": 1.6, "insert_overwrite": 0.8}


def _project(path: Path, seconds: dict[str, float] | None = None) -> StandInProject:
    project = StandInProject(path, job_seconds=seconds or SECONDS)
    days = [{"ds": "2024-01-01"}, {"ds": "2024-01-02"}]
    project.create_table(DELTA, partition_columns=["ds"], partitions=days, transactional=True, primary_key=["id"])
    project.create_table(STANDARD, partition_columns=["ds"], partitions=days)
    for table in (DELTA, STANDARD):
        seed = project.run_sql(f"INSERT INTO {table} PARTITION ({DAY}) SELECT * FROM mc.staged")
        project.finish(seed.id)
        seed.wait_for_success()
    return project


def _serial(project: StandInProject, table: str) -> dict[str, dict[str, int]]:
    live = project.reference(table)
    fresh = ReferenceTable(live.profile.name, partitions=list(live.snapshot().rows))
    for commit in project.history(table):
        fresh.begin(commit.operation, sorted(commit.footprint.write_partitions or ()), txn_id=commit.txn_id).commit()
    return {p: dict(r) for p, r in fresh.snapshot().rows.items()}


def _context(task_id: str, try_number: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """An Airflow-like context for a task run in a thread: a task instance with ``xcom_push``."""
    pushed: dict[str, Any] = {}
    state: dict[str, Any] = {}
    ti = SimpleNamespace(dag_id="mc_race", task_id=task_id, run_id="manual__1", map_index=-1, try_number=try_number,
                         xcom_push=lambda key, value: pushed.__setitem__(key, value))
    store = SimpleNamespace(get=state.get, set=state.__setitem__)
    return {"ti": ti, "logical_date": "2024-01-01T00:00:00+00:00", "task_state_store": store}, pushed


def _race(path: Path, tasks: list[str], **kwargs: Any) -> dict[str, Any]:
    """Run the tasks' operators side by side; each one's report, or the exception it ended with."""
    ends: dict[str, Any] = {}

    def run(task_id: str) -> None:
        table = DELTA if task_id in ("insert_day", "update_day", "minor_compact", "major_compact") else STANDARD
        op = MaxComputeWriteOperator(task_id=task_id, table=table, sql=SQL[task_id], standin=str(path),
                                     poll_interval=0.02, **kwargs)
        context, pushed = _context(task_id)
        try:
            ends[task_id] = (op.execute(context), pushed)
        except BaseException as exc:  # noqa: BLE001 - a skip or a failure is an end too
            ends[task_id] = (exc, pushed)

    threads = [threading.Thread(target=run, args=(t,)) for t in tasks]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert set(ends) == set(tasks), f"tasks did not end: {set(tasks) - set(ends)}"
    return ends


def test_racing_writes_on_one_delta_table_partition_end_as_the_matrix_and_a_serial_run_say(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path)
    ends = _race(path, ["insert_day", "update_day", "minor_compact", "major_compact"], admission=False)
    insert, update, minor = (ends[t][0] for t in ("insert_day", "update_day", "minor_compact"))
    # INSERT INTO ends first and wins; the UPDATE that started beside it fails (spec 001 row 8),
    # is classified from MaxCompute's text and re-run from a fresh snapshot.
    assert insert["committed"] and insert["attempts"] == 1 and not insert["conflicts"]
    assert update["committed"] and update["attempts"] == 2
    assert [c["kind"] for c in update["conflicts"]] == ["operation_conflict"]
    assert update["conflicts"][0]["winning_commit"]["tag"]["lastCommitTs"]
    assert update["decisions"][0]["action"] == "retry"
    # MINOR COMPACT after INSERT INTO: both succeed (row 9), MaxCompute rebased it itself: one
    # occflow attempt, no waste; it has an ID version and no time version (spec 001, versions).
    assert minor["committed"] and minor["attempts"] == 1 and minor["wasted_seconds"] == 0
    assert minor["maxcompute"]["meta_level_retry"] is True
    assert minor["maxcompute"]["time_version"] is None and minor["maxcompute"]["data_change"] is False
    assert insert["maxcompute"]["time_version"] is not None and insert["maxcompute"]["data_change"] is True
    # MAJOR COMPACT after INSERT INTO fails (row 10): a compaction that lost is skipped.
    assert isinstance(ends["major_compact"][0], AirflowSkipException)
    # Every task's instance id and log view are in XCom.
    for task_id in ("insert_day", "update_day", "minor_compact", "major_compact"):
        assert ends[task_id][1]["maxcompute_instance_id"], task_id
        assert ends[task_id][1]["maxcompute_log_view"].startswith("standin://")
    history = [(c.operation.value, c.version) for c in project.history(DELTA)]
    assert [op for op, _ in history] == ["insert_into", "insert_into", "minor_compact", "update"]
    assert insert["version"] == 2 and minor["version"] == 3 and update["version"] == 4
    assert project.rows(DELTA) == _serial(project, DELTA)


def test_racing_insert_into_and_overwrite_on_a_standard_table_both_commit(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path)
    ends = _race(path, ["append_totals", "overwrite_totals"], admission=False)
    for task_id in ("append_totals", "overwrite_totals"):
        report = ends[task_id][0]
        assert report["committed"] and report["attempts"] == 1 and not report["conflicts"], report
        assert report["profile"] == "maxcompute-standard"
    # Spec 000: INSERT jobs never conflict; the later OVERWRITE replaces the earlier INTO's rows.
    assert [c.operation.value for c in project.history(STANDARD)] == ["insert_into", "insert_into", "insert_overwrite"]
    assert project.rows(STANDARD) == _serial(project, STANDARD)


def test_with_admission_the_conflicting_tasks_take_turns_and_nothing_is_wasted(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path)
    tasks = ["insert_day", "update_day", "minor_compact", "major_compact", "append_totals", "overwrite_totals"]
    ends = _race(path, tasks, lease_store_url=f"sqlite:///{tmp_path / 'leases.db'}", admission_wait_seconds=60.0)
    for task_id in tasks:
        report = ends[task_id][0]
        assert isinstance(report, dict), (task_id, report)
        assert report["committed"] and report["attempts"] == 1 and not report["conflicts"], report
        assert report["fence"] is not None
    for table in (DELTA, STANDARD):
        assert project.rows(table) == _serial(project, table)
    # The jobs the matrix says would fail one another never overlapped: no job failed.
    assert all(i.is_successful() for i in project.list_instances())


def test_a_retry_reconnects_to_the_instance_its_dead_try_left_running(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path, {"insert_into": 1.0})
    context, pushed = _context("insert_day", try_number=1)
    tag = from_context(context, "insert_into", [{"ds": "2024-01-01"}])
    orphan = MaxComputeWrite(project, DELTA, SQL["insert_day"], tag.operation, tag=tag).submit()  # try 1 died here
    op = MaxComputeWriteOperator(task_id="insert_day", table=DELTA, sql=SQL["insert_day"], standin=str(path),
                                 poll_interval=0.02, admission=False)
    context, pushed = _context("insert_day", try_number=2)
    report = op.execute(context)
    assert report["committed"] and report["maxcompute"]["reconnected"] is True
    assert report["maxcompute"]["instance_id"] == orphan.id == pushed["maxcompute_instance_id"]
    assert [t.id for t in ProjectJobs(project).of_write(DELTA, tag.write_id)] == [orphan.id]
    assert len([c for c in project.history(DELTA) if c.operation.value == "insert_into"]) == 2  # seed + once


def test_a_later_try_of_a_write_maxcompute_already_committed_does_not_run_it_again(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path, {"insert_into": 0.1})
    context, _ = _context("insert_day", try_number=1)
    tag = from_context(context, "insert_into", [{"ds": "2024-01-01"}])
    done = MaxComputeWrite(project, DELTA, SQL["insert_day"], tag.operation, tag=tag, poll_interval=0.02).run()
    assert done.committed
    op = MaxComputeWriteOperator(task_id="insert_day", table=DELTA, sql=SQL["insert_day"], standin=str(path),
                                 poll_interval=0.02, admission=False)
    report = op.execute(_context("insert_day", try_number=2)[0])
    assert report["committed"] and report["tag"]["exactly_once"].startswith("already committed")
    assert len(list(project.list_instances())) == 3  # two seeds and the one write


def test_a_lost_insert_into_on_a_standard_table_fails_naming_its_residue_and_is_not_retried(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path)
    project.fail_next(STANDARD, "insert_into", "metadata_lock", residue=True)
    op = MaxComputeWriteOperator(task_id="append_totals", table=STANDARD, sql=SQL["append_totals"],
                                 standin=str(path), poll_interval=0.02, admission=False)
    with pytest.raises(AirflowFailException, match=r"left rows behind in ds=2024-01-01: its rows are in the table") as info:
        op.execute(_context("append_totals")[0])
    failed = [i for i in project.list_instances() if not i.is_successful()]
    assert len(failed) == 1 and failed[0].id in str(info.value)
    assert classify(failed[0].get_task_result()).kind is ConflictKind.METADATA_LOCK_CONFLICT


def test_a_compaction_of_a_standard_table_is_refused_before_anything_runs(tmp_path):
    path = tmp_path / "project.bin"
    project = _project(path)
    op = MaxComputeWriteOperator(task_id="compact", table=STANDARD, standin=str(path), admission=False,
                                 sql=f"ALTER TABLE {STANDARD} PARTITION ({DAY}) COMPACT minor")
    with pytest.raises(AirflowFailException, match=r"minor_compact is not a write on mc.totals: its matrix maxcompute-standard"):
        op.execute(_context("compact")[0])
    assert len(list(project.list_instances())) == 2  # only the seeds


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sql": "SELECT * FROM mc.orders"}, "is not a write"),
        ({"sql": f"INSERT INTO mc.other PARTITION ({DAY}) SELECT 1"}, "writes mc.other but the task declares mc.orders"),
        ({"sql": SQL["update_day"], "operation": "insert_into"}, "is a update but the task declares insert_into"),
        ({"sql": f"ALTER TABLE {DELTA} ADD COLUMNS (x BIGINT)"}, "COMPACT MINOR"),
    ],
)
def test_a_bad_write_fails_the_dag_import_naming_what_is_wrong(kwargs, message):
    with pytest.raises(Exception, match=message):
        MaxComputeWriteOperator(task_id="w", table=DELTA, standin="memory:x", **kwargs)


def test_a_mapped_write_is_checked_at_parse_time_on_the_matrix_that_knows_its_operation():
    from airflow.sdk import DAG

    with DAG("mc_mapped", schedule=None):
        MaxComputeWriteOperator.partial(task_id="compact", table=DELTA, standin="memory:x").expand(
            sql=[SQL["minor_compact"], SQL["major_compact"]]
        )
        MaxComputeWriteOperator.partial(task_id="compact_fixed", table=DELTA, sql=SQL["major_compact"],
                                        standin="memory:x").expand(hints=[{}, {"odps.sql.type.system.odps2": "true"}])
        with pytest.raises(InvalidDeclarationError, match="writes mc.other but the task declares mc.orders"):
            MaxComputeWriteOperator.partial(task_id="bad", table=DELTA, standin="memory:x",
                                            sql=f"INSERT INTO mc.other PARTITION ({DAY}) SELECT 1")


@pytest.mark.slow  # ~45-60 s: six stand-in jobs of 1-2.5 s each, one at a time, plus the DAG run
def test_the_example_dag_ends_with_the_serial_result_in_a_real_airflow_run(run_dag, tmp_path, monkeypatch):
    monkeypatch.setenv("OCCFLOW_MAXCOMPUTE_STANDIN", str(tmp_path / "example.bin"))
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{tmp_path / 'leases.db'}")
    source = (REPO / "dags_example" / "maxcompute_transactional.py").read_text()
    run = run_dag(source, filename="example_maxcompute_transactional.py")
    assert run.state == "success"
    summary = run.task("verify").xcom["return_value"]
    assert summary["rows"] == summary["expected_rows"] > 0
    for task_id in ("insert_day", "update_day", "minor_compact", "major_compact", "append_totals", "overwrite_totals"):
        report = run.task(task_id).xcom["return_value"]
        assert report["committed"], task_id
        assert run.task(task_id).xcom["maxcompute_instance_id"] == report["maxcompute"]["instance_id"]
    compactions = summary["compaction"]
    assert all(c["time_version"] is None and c["data_change"] is False for c in compactions.values())


def test_the_client_comes_from_the_connection_and_the_stand_in_only_when_asked(monkeypatch, tmp_path):
    import json

    from airflow.sdk.exceptions import AirflowNotFoundException

    from occflow.hooks import maxcompute as hooks

    extra = {"project": "sales", "endpoint": "https://service.cn-hangzhou.maxcompute.aliyun.com/api",
             "access_key_id": "id", "access_key_secret": "secret"}
    monkeypatch.setenv("AIRFLOW_CONN_MC_ALIBABA", json.dumps({"conn_type": "maxcompute", "extra": extra}))
    client = hooks.OccflowMaxComputeHook("mc_alibaba", standin_fallback=str(tmp_path / "unused.bin")).get_client()
    assert type(client).__module__ == "odps.core" and client.project == "sales"  # the Alibaba provider's client
    assert not (tmp_path / "unused.bin").exists()

    own = {"conn_type": "occflow_maxcompute", "login": "id", "password": "secret", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_MC_OWN", json.dumps(own))
    monkeypatch.setattr(hooks, "MaxComputeHook", None)  # as where the Alibaba provider is not installed
    assert hooks.OccflowMaxComputeHook("mc_own").get_client().project == "sales"

    fallback = hooks.OccflowMaxComputeHook("mc_missing", standin_fallback=str(tmp_path / "p.bin")).get_client()
    assert isinstance(fallback, StandInProject)
    with pytest.raises(AirflowNotFoundException):
        hooks.OccflowMaxComputeHook("mc_missing").get_client()
