"""A settled write clears the history it kept for a reschedule, in Airflow's own task state store.

Airflow's store refuses ``None`` as a value; the history used to be "cleared" by setting it to
``None``, an error that was swallowed, so the history of a rescheduled write stayed behind. The
oracle is Airflow's metadata DB (``TaskStateStoreModel``), read after a real ``dag.test()`` run.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.airflow


def test_a_settled_write_leaves_no_history_in_the_task_state_store(run_dag):
    run = run_dag(
        """
        import pendulum
        from airflow.sdk import DAG, task

        from occflow.operators.history import WriteHistory, load_history, store_history

        with DAG("history_cleared", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):

            @task
            def kept_then_settled(**context):
                store_history(context, WriteHistory(attempts=2, wasted_seconds=1.5))  # a reschedule
                assert load_history(context).attempts == 2  # it was kept
                store_history(context, None)  # the write settled

            @task
            def kept(**context):
                store_history(context, WriteHistory(attempts=3))  # rescheduled, not settled

            kept_then_settled()
            kept()
        """,
        dag_id="history_cleared",
    )
    assert run.state == "success"
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskStateStoreModel.task_id, TaskStateStoreModel.key).where(
                TaskStateStoreModel.dag_id == "history_cleared"
            )
        ).all()
    keys = {(task_id, key) for task_id, key in rows}
    assert ("kept", "occflow_write_history") in keys  # the oracle sees a kept history
    assert ("kept_then_settled", "occflow_write_history") not in keys
