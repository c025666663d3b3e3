"""The alert of a task under ``ConflictRetryPolicy`` names the table, operation and profile the
policy names, also when the policy pushed nothing: a failure that is not a conflict (the policy
records only conflicts) and an ``AirflowFailException`` (Airflow does not ask the policy at all).
Real ``dag.test()`` runs; the alert is what the wrapped notifier received in its context.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.airflow


def test_the_alert_carries_the_policys_table_operation_and_profile(run_dag, tmp_path):
    from occflow.policies import ConflictRetryPolicy

    out = tmp_path / "alerts"
    out.mkdir()
    run = run_dag(f'''
import json
import pathlib
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException
from airflow.providers.standard.operators.python import PythonOperator
from occflow.notifications.conflict import ConflictNotifier
from occflow.policies import ConflictRetryPolicy

OUT = pathlib.Path({str(out)!r})

def record(context):
    (OUT / (context["ti"].task_id + ".json")).write_text(json.dumps(context["occflow_conflict"]))

def bug():
    raise ValueError("no such column: amount")

def refuse():
    raise AirflowFailException("the staged file is corrupt")

policy = ConflictRetryPolicy("delta-rs", "MERGE INTO", table="lake.events")
with DAG("alert_policy_fields", schedule=None):
    PythonOperator(task_id="bug", python_callable=bug, retries=policy.retries, retry_policy=policy,
                   on_failure_callback=ConflictNotifier(notifier=record))
    PythonOperator(task_id="refuse", python_callable=refuse, retries=policy.retries, retry_policy=policy,
                   on_failure_callback=ConflictNotifier(notifier=record))
''')
    # What the policy itself says it writes: the oracle, not the notifier's reading of it.
    policy = ConflictRetryPolicy("delta-rs", "MERGE INTO", table="lake.events")
    expected = (policy.table, policy.policy.operation.value, policy.policy.profile)
    assert expected == ("lake.events", "merge", "delta-rs")
    for task_id, error in (("bug", "no such column: amount"), ("refuse", "the staged file is corrupt")):
        assert run.task(task_id).state == "failed" and run.task(task_id).try_number == 1
        assert "occflow_conflict" not in run.task(task_id).xcom  # the policy pushed nothing
        alert = json.loads((out / f"{task_id}.json").read_text())
        assert (alert["table"], alert["operation"], alert["profile"]) == expected, alert
        assert alert["kind"] == "not_a_conflict" and error in alert["error"]
        assert "occflow did not retry it as a conflict" not in alert["subject"]


def test_the_text_of_an_alert_that_is_not_a_conflict_names_the_profile():
    from occflow.core.kinds import ConflictKind
    from occflow.notifications.alert import ConflictReport

    text = ConflictReport(task="d.t", kind=ConflictKind.NOT_A_CONFLICT, error="boom", table="lake.events",
                          operation="merge", profile="delta-rs").text()
    assert "  table:          lake.events" in text
    assert "  operation:      merge (profile delta-rs)" in text
