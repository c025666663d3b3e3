"""occflow: concurrent pipeline orchestration on lakehouse tables, for Apache Airflow."""

from __future__ import annotations

__version__ = "0.1.0"
