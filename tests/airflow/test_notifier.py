"""ConflictNotifier under real ``dag.test()``: the task log, a real SMTP notifier, string errors.

The SMTP server is Python's own ``smtpd`` on a local port; Airflow's ``SmtpNotifier`` sends the
alert to it through a real ``smtp`` connection.
"""

from __future__ import annotations

import email
import json
import socket
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

with warnings.catch_warnings():
    # The standard library's own SMTP server (deprecated, still in 3.11) is the test's mail host.
    warnings.simplefilter("ignore", DeprecationWarning)
    import asyncore
    import smtpd

pytestmark = pytest.mark.airflow


class _Inbox(smtpd.SMTPServer):
    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), None)
        self.messages: list[email.message.Message] = []

    def process_message(self, peer, mailfrom, rcpttos, data, **kwargs):  # noqa: ANN001, ANN201
        self.messages.append(email.message_from_bytes(data if isinstance(data, bytes) else data.encode()))


@pytest.fixture
def smtp_inbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Inbox]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    inbox = _Inbox(port)
    thread = threading.Thread(target=asyncore.loop, kwargs={"timeout": 0.1}, daemon=True)
    thread.start()
    monkeypatch.setenv(
        "AIRFLOW_CONN_SMTP_OCCFLOW_TEST",
        json.dumps(
            {
                "conn_type": "smtp",
                "host": "127.0.0.1",
                "port": port,
                "extra": {"disable_ssl": True, "disable_tls": True, "from_email": "airflow@example.com",
                          "retry_limit": 0, "timeout": 10},
            }
        ),
    )
    yield inbox
    inbox.close()


def _body(message: email.message.Message) -> str:
    parts = message.walk() if message.is_multipart() else [message]
    return "\n".join(
        p.get_payload(decode=True).decode() for p in parts if p.get_content_maintype() == "text"
    )


def test_alert_names_the_winning_commit_and_the_task_that_made_it(run_dag, tmp_path, smtp_inbox):
    """The winner is a real delta-rs commit by task ``backfill``; the loser is a spark-submit-like
    job whose driver prints Delta's ConcurrentAppendException naming that version."""
    table = str(tmp_path / "events")
    write_deltalake(table, pa.table({"ds": ["2024-01-01"], "v": [0]}), partition_by=["ds"])
    job = tmp_path / "merge_job.py"
    # Format of Delta's pre-4.1 message (ConcurrentAppendException + "Conflicting commit: {json}").
    job.write_text(
        "import sys\n"
        "from deltalake import DeltaTable\n"
        f"version = DeltaTable({table!r}).version()\n"
        "print('py4j.protocol.Py4JJavaError: An error occurred while calling o77.sql.', file=sys.stderr)\n"
        "print(': io.delta.exceptions.ConcurrentAppendException: Files were added to partition "
        "[ds=2024-01-01] by a concurrent update. Please try the operation again.', file=sys.stderr)\n"
        "print('Conflicting commit: {\"version\":%d,\"timestamp\":1732219272000,\"operation\":\"WRITE\","
        "\"operationParameters\":{\"mode\":\"Append\"},\"readVersion\":%d}' % (version, version - 1), "
        "file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    run = run_dag(
        f"""
        import sys
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.bash import BashOperator
        from airflow.providers.standard.operators.python import PythonOperator
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier
        from occflow.notifications import ConflictNotifier

        def backfill():
            import pyarrow as pa
            from deltalake import DeltaTable, write_deltalake
            write_deltalake({table!r}, pa.table({{"ds": ["2024-01-01"], "v": [1]}}), mode="append")
            # The shape of occflow's write report (the XCom of its write operators).
            return {{"table": "lake.events", "operation": "insert_into",
                     "version": DeltaTable({table!r}).version()}}

        alert = ConflictNotifier(
            SmtpNotifier(to="oncall@example.com", smtp_conn_id="smtp_occflow_test",
                         subject="{{{{ occflow_subject }}}}", html_content="<pre>{{{{ occflow_message }}}}</pre>"),
            table="lake.events", operation="MERGE INTO", profile="delta-write-serializable",
        )
        with DAG("notifier_winner_task", schedule=None):
            PythonOperator(task_id="backfill", python_callable=backfill) >> BashOperator(
                task_id="merge", bash_command=f"{{sys.executable}} {str(job)}",
                on_failure_callback=alert)
        """
    )
    assert run.task("backfill").state == "success"
    assert run.task("merge").state == "failed"
    assert len(smtp_inbox.messages) == 1
    message = smtp_inbox.messages[0]
    assert message["Subject"] == (
        "occflow: notifier_winner_task.merge lost a write conflict on lake.events (concurrent_append)"
    )
    body = _body(message)
    assert "operation:      merge (profile delta-write-serializable)" in body
    assert "winning commit: version 1, operation WRITE" in body
    assert "made by task backfill" in body
    assert "merge declares no partition" in body  # the advice follows from the declaration
    assert "MERGE ON clause" in body  # the kind's help text


def test_retry_alert_goes_to_the_task_log_without_a_notifier(run_dag, tmp_path, capfd):
    table = str(tmp_path / "events")
    write_deltalake(table, pa.table({"ds": ["a", "a"], "v": [1, 2]}), partition_by=["ds"])
    marker = tmp_path / "first-try"
    run = run_dag(
        f"""
        from pathlib import Path
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.python import PythonOperator
        from occflow.notifications import ConflictNotifier
        from occflow.policies import ConflictRetryPolicy

        def delete_row():
            from deltalake import DeltaTable
            mine = DeltaTable({table!r})
            if not Path({str(marker)!r}).exists():
                Path({str(marker)!r}).touch()
                DeltaTable({table!r}).delete("v = 1")  # a concurrent writer wins
            mine.delete("v = 2")

        policy = ConflictRetryPolicy("delta-rs", "delete", table="lake.events", overrides={{
            "concurrent_append": {{"action": "retry", "wait": {{"type": "fixed", "wait": 1}},
                                   "stop": {{"type": "after_attempt", "attempts": 2}}}}}})
        with DAG("notifier_task_log", schedule=None):
            PythonOperator(task_id="delete", python_callable=delete_row, retries=policy.retries,
                           retry_policy=policy, on_retry_callback=ConflictNotifier())
        """
    )
    assert run.task("delete").state == "success"
    out = capfd.readouterr()
    log = out.out + out.err
    assert "occflow: notifier_task_log.delete lost a write conflict on lake.events (concurrent_append)" in log
    assert "decision:       retry in 1s" in log
    assert "operation:      delete (profile delta-rs)" in log


def test_a_plain_string_exception_does_not_break_the_notifier(run_dag, tmp_path):
    """Airflow passes a string when a task is failed from outside; the real context is used here."""
    result = tmp_path / "report.json"
    run = run_dag(
        f"""
        import json
        from airflow.sdk import DAG
        from airflow.providers.standard.operators.python import PythonOperator
        from occflow.notifications import ConflictNotifier

        def call_notifier(**context):
            received = []
            notifier = ConflictNotifier(received.append, table="lake.events", operation="merge")
            context = dict(context, exception="Task was marked failed externally (state set to failed)")
            notifier(context)
            with open({str(result)!r}, "w") as out:
                json.dump({{"sent": len(received), "report": context["occflow_conflict"]}}, out)

        with DAG("notifier_string_exception", schedule=None):
            PythonOperator(task_id="check", python_callable=call_notifier)
        """
    )
    assert run.task("check").state == "success"
    data = json.loads(Path(result).read_text())
    assert data["sent"] == 1  # the wrapped callable still got the alert
    assert data["report"]["kind"] == "not_a_conflict"
    assert data["report"]["error"] == "Task was marked failed externally (state set to failed)"
    assert data["report"]["subject"] == "occflow: notifier_string_exception.check failed (not a write conflict)"


def test_occflow_operator_report_is_explained_with_attempts_and_wasted_time():
    """The failure exception of occflow's operators carries the write report; no Airflow run needed."""
    from occflow.notifications import ConflictNotifier
    from occflow.operators.base import ConflictFailure

    report = {
        "table": "lake.events",
        "operation": "merge",
        "profile": "delta-write-serializable",
        "engine": "delta-rs",
        "partitions": [{"ds": "2024-01-01"}],
        "attempts": 4,
        "wasted_seconds": 37.25,
        "conflicts": [
            {"kind": "concurrent_delete_read", "reason": "r",
             "winning_commit": {"version": 7, "operation": "OPTIMIZE", "snapshot_id": None, "timestamp": None}}
        ],
        "decisions": [{"action": "fail", "reason": "reschedules exhausted"}],
    }
    failure = ConflictFailure("merge on lake.events lost with concurrent_delete_read", report)
    explained = ConflictNotifier().explain({"exception": failure})
    text = explained.text()
    assert "table:          lake.events, partition ds=2024-01-01" in text
    assert "winning commit: version 7, operation OPTIMIZE" in text
    assert "attempts:       4, 37.2s spent in attempts thrown away" in text
    assert "decision:       fail: reschedules exhausted" in text
    assert "declares no partition" not in text  # it declared one


class _TaskInstance:
    """The fields of a running try that the notifier reads when no Airflow run is needed."""

    dag_id, task_id, map_index, try_number = "load", "submit", -1, 1

    def __init__(self) -> None:
        import datetime

        self.start_date = datetime.datetime.now(datetime.timezone.utc)

    def xcom_pull(self, **kwargs):  # noqa: ANN003, ANN201 - no XCom in this test
        return None


_RETRY_LINES = [
    "24/11/21 20:05:41 WARN Tasks: Retrying task after failure: sleepTimeMs=112 Cannot commit local.db.events: "
    "metadata location file:/wh/events/metadata/00007-aa.metadata.json has changed from "
    "file:/wh/events/metadata/00006-bb.metadata.json",
    "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit local.db.events: metadata location "
    "file:/wh/events/metadata/00007-aa.metadata.json has changed from file:/wh/events/metadata/00006-bb.metadata.json",
    "\tat org.apache.iceberg.util.Tasks$Builder.runTaskWithRetry(Tasks.java:413)",
]


@pytest.mark.parametrize(
    ("child_lines", "kind"),
    [
        # Iceberg retried its own commit, then the executor ran out of memory: not a conflict.
        (_RETRY_LINES + ["24/11/21 20:06:10 ERROR Executor: Exception in task 3.0 in stage 7.0 (TID 21)",
                         "java.lang.OutOfMemoryError: Java heap space"], "not_a_conflict"),
        # Iceberg retried its own commit and nothing else happened: the retry is not the failure.
        (_RETRY_LINES, "not_a_conflict"),
        # The job's own traceback ends in the conflict (Py4J as PySpark prints it).
        (["py4j.protocol.Py4JJavaError: An error occurred while calling o123.sql.",
          ": io.delta.exceptions.ConcurrentAppendException: [DELTA_CONCURRENT_APPEND] ConcurrentAppendException: "
          "Files were added to partition [ds=2024-01-01] by a concurrent update. Please try the operation again."],
         "concurrent_append"),
    ],
    ids=["retry-then-oom", "retry-alone", "conflict"],
)
def test_the_task_log_is_weighed_in_order_and_by_level(child_lines: list[str], kind: str) -> None:
    """What BashOperator / SparkSubmitHook relay from the child at INFO, then Airflow's own ERROR."""
    import structlog

    from occflow.notifications import ConflictNotifier
    from occflow.policies import log_tail

    assert log_tail.install()
    ti = _TaskInstance()
    log = structlog.get_logger("occflow.test")
    for line in ["Running command: ['spark-submit', 'load.py']", "Output:", *child_lines,
                 "Command exited with return code 1"]:
        log.info(line)
    log.error("Task failed with exception")  # Airflow's report, logged before any callback runs
    error = RuntimeError("Bash command failed. The command returned a non-zero exit code 1.")
    report = ConflictNotifier(table="local.db.events", operation="insert_into").explain({"exception": error, "ti": ti})
    assert report.kind.value == kind, report.classification_reason
