"""Notifiers: ``ConflictNotifier`` explains a write conflict, wrapping any Airflow notifier."""

from __future__ import annotations

from .conflict import ConflictNotifier, ConflictReport

__all__ = ["ConflictNotifier", "ConflictReport"]
