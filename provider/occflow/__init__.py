"""occflow: concurrent pipeline orchestration on lakehouse tables, for Apache Airflow."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .core.classify import classify


def __getattr__(name: str) -> Any:
    # ``occflow.classify`` (the public entry point, pure Python) loads on first use: a command
    # or a trigger that never classifies does not pay for the classifier's tables.
    if name == "classify":
        return importlib.import_module(".core.classify", __name__).classify
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["classify", "__version__"]
