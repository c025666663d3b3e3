"""Airflow-side conflict policies: ``ConflictRetryPolicy`` for any task's ``retry_policy``."""

from __future__ import annotations

from .retry import AIRFLOW_ACTION, XCOM_KEY, ConflictRetryPolicy

__all__ = ["AIRFLOW_ACTION", "XCOM_KEY", "ConflictRetryPolicy"]
