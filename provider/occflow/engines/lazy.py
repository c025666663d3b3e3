"""Names a package exports, loaded on first use (PEP 562): a caller that needs one reader of an
engine (a trigger, ``occflow explain``) does not load the whole engine with it."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``exports`` maps each public name to the module that
    defines it (relative to the package); a name is imported once, then kept in the package."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


__all__ = ["lazy_exports"]
