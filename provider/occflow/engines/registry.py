"""The behavioural half of the engine registry: an ``EngineSpec``'s dotted paths, resolved.

``core.engines`` declares every engine as data (core may not import an engine, and core's tables
are keyed by engine names); what runs — the ``WriteTarget`` class, the table-facts reader, the
conformance runner — is a dotted path there, imported here only when asked, so a caller that
needs one engine does not load the others (nor Spark, delta-rs or PyODPS). The operator's path
is resolved by the Airflow face (``decorators``) through ``resolve``: engines know nothing of
Airflow.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import engines as declared  # read at each call: the list may grow after import
from ..core.engines import EngineSpec, committer, conformance_committers
from ..core.errors import InvalidDeclarationError
from .conformance import RunnerFactory


def resolve(reference: str, package: str | None = None) -> Any:
    """``module:name`` (``module`` relative to ``package`` when it starts with a dot) imported.

    A reference that does not import is an error naming the reference, not a bare ImportError:
    the registry is data and a typo in it must say where it is."""
    module, sep, name = reference.partition(":")
    try:
        found = importlib.import_module(module, package)
        return getattr(found, name) if sep else found
    except (ImportError, AttributeError) as exc:
        where = f" (in {package})" if module.startswith(".") else ""
        raise InvalidDeclarationError(f"engine registry: {reference!r}{where} does not import: {exc}") from exc


def target_class(spec: EngineSpec) -> type[Any]:
    """The engine's ``WriteTarget`` class."""
    found = resolve(spec.target, spec.package)
    if not isinstance(found, type):
        raise InvalidDeclarationError(f"engine {spec.name}: target {spec.target!r} is not a class")
    return found


def facts_reader(spec: EngineSpec) -> Callable[..., Any]:
    """The engine's table-facts reader (its arguments are the engine's: a location, a session)."""
    found = resolve(spec.facts, spec.package)
    if not callable(found):
        raise InvalidDeclarationError(f"engine {spec.name}: facts reader {spec.facts!r} is not callable")
    return found  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ConformanceEntry:
    """A committer's entry points into the conformance framework: its runners and what it is."""

    name: str
    runners: RunnerFactory
    meta: Callable[[], dict[str, str]]


def conformance_names() -> list[str]:
    """The committers ``occflow conformance --engine`` runs, without importing any runner."""
    return [c.name for c in conformance_committers()]


def conformance_entry(name: str) -> ConformanceEntry:
    """The conformance entry points of committer ``name``; an unknown name, or one occflow has no
    runner for, is an error naming the engines that have one."""
    known = conformance_names()
    try:
        found = committer(name)
    except InvalidDeclarationError:
        found = None
    if found is None or found.conformance is None:
        raise InvalidDeclarationError(f"unknown conformance engine {name!r}; known engines: {', '.join(known)}")
    module = resolve(found.conformance)
    return ConformanceEntry(found.name, module.conformance_runners, module.conformance_meta)


def engine_folders(root: Path | None = None) -> list[str]:
    """The engine folders: the packages under ``engines/`` (each must have exactly one spec in
    ``core.engines.ENGINES``, tested)."""
    here = root or Path(__file__).parent
    return sorted(p.name for p in here.iterdir() if (p / "__init__.py").is_file())


def unregistered_folders(root: Path | None = None) -> list[str]:
    """The engine folders under ``root`` (default: this package) that no spec names, or that
    more than one names: each must be exactly one entry of ``core.engines.ENGINES``."""
    named = specs_by_folder()
    return [folder for folder in engine_folders(root) if len(named.get(folder, [])) != 1]


def specs_by_folder() -> dict[str, list[EngineSpec]]:
    """Each folder under this package that a spec names, and the specs that name it."""
    found: dict[str, list[EngineSpec]] = {}
    for spec in declared.ENGINES:
        if spec.package.rpartition(".")[0] == __package__:
            found.setdefault(spec.folder, []).append(spec)
    return found


__all__ = [
    "ConformanceEntry",
    "conformance_entry",
    "conformance_names",
    "engine_folders",
    "facts_reader",
    "resolve",
    "specs_by_folder",
    "target_class",
    "unregistered_folders",
]
