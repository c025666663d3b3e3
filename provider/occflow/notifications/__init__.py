"""Notifiers: ``ConflictNotifier`` explains a write conflict, wrapping any Airflow notifier."""

from __future__ import annotations

from .alert import ConflictReport
from .conflict import ConflictNotifier

__all__ = ["ConflictNotifier", "ConflictReport"]
