"""occflow: concurrent pipeline orchestration on lakehouse tables, for Apache Airflow."""

from __future__ import annotations

__version__ = "0.1.0"

from .core.classify import classify  # noqa: E402 - the public entry point, pure Python

__all__ = ["classify", "__version__"]
