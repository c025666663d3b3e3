"""Every engine name the old tables accepted still means what it meant, now through the registry.

Before ``core.engines``, engine names were re-mapped in eight tables (issue 32). The oracle here
is those tables and the code around them, as committed before the registry (``BEFORE``): each
module is read with ``git show`` and run beside today's, and every name either accepted is run
through both; the answers (profiles, notes, refusals and their messages, advice) must agree.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from itertools import product
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from occflow.core import advice, declaration, engines
from occflow.core.errors import InvalidDeclarationError, UnknownProfileError
from occflow.core.kinds import ConflictKind
from occflow.core.operations import Operation
from occflow.core.profiles import PROFILES
from occflow.core.tablefacts import TableFacts

#: The last commit with the eight tables (the registry replaced them after it).
BEFORE = "6f37041b06a5d5464f3872c652accdafdda083fc"
ROOT = Path(__file__).resolve().parents[2]


def _head_source(path: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{BEFORE}:{path}"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError) as exc:  # a shallow clone without that commit
        pytest.skip(f"the pre-registry tables need commit {BEFORE} in the git history: {exc}")


def _load_before(name: str, path: str, package: str, rewrite: dict[str, str] | None = None) -> ModuleType:
    """The module at ``path`` as committed at ``BEFORE``, loaded as ``package._before_<name>``
    (its relative imports resolve to today's package, or as ``rewrite`` points them)."""
    full = f"{package}._before_{name}"
    if full in sys.modules:
        return sys.modules[full]
    source = _head_source(path)
    for old, new in (rewrite or {}).items():
        assert old in source, f"{path} at {BEFORE} has no {old!r}"
        source = source.replace(old, new)
    spec = importlib.util.spec_from_loader(full, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    sys.modules[full] = module
    exec(compile(source, f"{BEFORE}:{path}", "exec"), module.__dict__)  # noqa: S102 - the committed code as oracle
    return module


def _literal(path: str, name: str) -> Any:
    """The literal value assigned to ``name`` at module level in ``path`` at ``BEFORE``."""
    for node in ast.parse(_head_source(path)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            assert node.value is not None
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} at {BEFORE} assigns no {name}")


@pytest.fixture(scope="module")
def old_tablefacts() -> ModuleType:
    return _load_before("tablefacts", "provider/occflow/core/tablefacts.py", "occflow.core")


@pytest.fixture(scope="module")
def old_declaration() -> ModuleType:
    return _load_before("declaration", "provider/occflow/core/declaration.py", "occflow.core")


@pytest.fixture(scope="module")
def old_policy(old_tablefacts: ModuleType, old_declaration: ModuleType) -> ModuleType:
    # The old command on the old tables throughout: its FORMAT_DEFAULT_PROFILE and TableFacts.
    return _load_before("policy", "provider/occflow/cli/policy.py", "occflow.cli", {
        "from ..core.declaration import": "from ..core._before_declaration import",
        "from ..core.tablefacts import": "from ..core._before_tablefacts import",
    })


def _outcome(call: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    """What a call answered, comparable across the old and the new module (a ``Resolved`` of
    either compares as its fields)."""
    try:
        found = call(*args, **kwargs)
    except (InvalidDeclarationError, UnknownProfileError) as exc:
        return type(exc).__name__, str(exc)
    return "ok", (found.profile, found.note) if type(found).__name__ == "Resolved" else found


# ------------------------------------------------------------------ core/tablefacts.py ENGINES


def _facts_grid(old_engines: dict[str, str]) -> list[dict[str, Any]]:
    """Every committer the old table named (and none), on every format, with the properties that
    decide the profile set and unset."""
    grid: list[dict[str, Any]] = []
    for engine in [None, *old_engines]:
        for level, dv, parts in product((None, "Serializable", "WriteSerializable"), (None, "true"), ((), ("ds",))):
            props = {k: v for k, v in (("delta.isolationLevel", level), ("delta.enableDeletionVectors", dv)) if v}
            grid.append(dict(table_format="delta", engine=engine, properties=props, partition_columns=parts))
        for level in (None, "serializable", "snapshot"):
            props = {"write.merge.isolation-level": level, "write.delete.isolation-level": "snapshot"} if level else {}
            grid.append(dict(table_format="iceberg", engine=engine, properties=props))
        for transactional, key in product((None, "true"), (None, (), ("id",))):
            props = {"transactional": transactional} if transactional else {}
            grid.append(dict(table_format="maxcompute", engine=engine, properties=props, primary_key=key))
    return grid


def test_every_old_committer_writes_the_format_it_wrote() -> None:
    old = _literal("provider/occflow/core/tablefacts.py", "ENGINES")
    assert {c.name: c.table_format for c in engines.committers() if c.name != "pyiceberg"} == old
    for name, table_format in old.items():
        assert TableFacts("t", table_format, name).engine == name
        for other in {"delta", "iceberg", "maxcompute"} - {table_format}:
            with pytest.raises(InvalidDeclarationError, match=f"engine '{name}' does not write {other} tables"):
                TableFacts("t", other, name)


def test_table_facts_derive_what_they_derived_for_every_old_engine(old_tablefacts: ModuleType) -> None:
    grid = _facts_grid(old_tablefacts.ENGINES)
    operations = (None, Operation.MERGE, Operation.INSERT_INTO, Operation.OPTIMIZE, Operation.DELETE)
    compared = 0
    for facts in grid:
        made = _outcome(TableFacts, "db.t", **facts)
        before = _outcome(old_tablefacts.TableFacts, "db.t", **facts)
        assert made[0] == before[0], facts
        if made[0] != "ok":
            continue
        new, old = made[1], before[1]
        assert new.row_level_concurrency == old.row_level_concurrency, facts
        for op, zorder in product(operations, (None, False, True)):
            assert new.profile_name(op, zorder=zorder) == old.profile_name(op, zorder=zorder), (facts, op, zorder)
            assert new.why(op, zorder=zorder) == old.why(op, zorder=zorder), (facts, op, zorder)
            for profile in PROFILES:
                assert _outcome(new.check_declared_profile, profile, op, zorder=zorder) == _outcome(
                    old.check_declared_profile, profile, op, zorder=zorder
                ), (facts, op, zorder, profile)
                compared += 1
    assert compared > 10_000  # the grid really ran


def test_an_alias_is_kept_as_its_committers_name() -> None:
    assert TableFacts("t", "delta", "spark-delta").engine == "delta-spark"
    assert TableFacts("t", "delta", "DeltaLake").engine == "delta-rs"


# ------------------------------------------------------------------ core/declaration.py FORMAT_DEFAULT_PROFILE
# ------------------------------------------------------------------ cli/explain.py TABLE_FORMATS


def test_every_old_table_format_name_declares_the_profile_it_did(old_declaration: ModuleType) -> None:
    old = _literal("provider/occflow/core/declaration.py", "FORMAT_DEFAULT_PROFILE")
    assert old == old_declaration.FORMAT_DEFAULT_PROFILE
    for name, profile in old.items():
        assert declaration.format_default_profile(name) == profile
        made = declaration.WriteDeclaration.create("db.t", "insert_into", table_format=name)
        assert made.profile.name == profile == old_declaration.WriteDeclaration.create(
            "db.t", "insert_into", table_format=name).profile.name
    for wrong in ("hudi", "Delta", "deltars", ""):
        with pytest.raises(InvalidDeclarationError, match=f"unknown table_format {wrong!r}; known: delta, "):
            declaration.resolve_profile(None, wrong)


def test_every_old_explain_table_format_is_the_same_kind_of_table() -> None:
    old = _literal("provider/occflow/cli/explain.py", "TABLE_FORMATS")
    for name, (table_format, engine, implied) in old.items():
        kind = engines.table_kind(name)
        assert (kind.table_format, kind.engine, dict(kind.properties)) == (table_format, engine, implied), name


# ------------------------------------------------------------------ cli/policy.py ENGINES


def test_policy_resolves_every_old_name_and_engine_as_it_did(old_policy: ModuleType) -> None:
    from occflow.cli import policy

    old_engines = old_policy.ENGINES
    assert [s.name for s in engines.engine_specs()][: len(old_engines)] == list(old_engines)
    for name, engine in old_engines.items():
        spec = engines.engine_spec(name)
        assert spec.operator_name == engine.operator
        assert {c.table_format: c.name for c in spec.commits} == engine.commits
    names = [*PROFILES, *old_policy.FORMAT_DEFAULT_PROFILE, "parquet"]
    operations = (None, Operation.MERGE, Operation.OPTIMIZE, Operation.UPDATE, Operation.INSERT_OVERWRITE)
    for name, engine, op in product(names, [None, *old_engines], operations):
        new = _outcome(policy.resolve_profile, name, engine, op)
        old = _outcome(old_policy.resolve_profile, name, engine, op)
        if name == "parquet":  # the new list of format names is longer: it names the committers too
            assert new[0] == old[0] == "UnknownProfileError" and new[1].startswith(old[1]), (new, old)
        elif new[0] == "ok" and name == "iceberg" and engine is None:
            # The one change: the default's message now also names pyiceberg's own default.
            assert new[1][0] == old[1][0] and "PyIcebergWriteOperator uses pyiceberg-" in new[1][1], (new, old)
        else:
            assert new == old, (name, engine, op)


# ------------------------------------------------------------------ core/advice.py engine_family


def _old_advice_names() -> set[str]:
    """The names the old ``engine_family`` documents (its docstring's) and the names the engines
    report as ``WriteOutcome.engine`` and ``engine_name``."""
    import re

    source = _head_source("provider/occflow/core/advice.py")
    doc = ast.get_docstring(next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)
                                 and n.name == "engine_family")) or ""
    named = set(re.findall(r"``([a-z-]+)``", doc))
    assert {"delta-rs", "spark-iceberg", "spark-delta", "maxcompute", "spark-submit", "unknown"} <= named
    reported = {"delta-rs", "spark-delta", "spark-iceberg", "spark-parquet", "spark-hive", "spark", "maxcompute"}
    return named | reported | {"deltars", "deltalake", "odps", "Delta-RS", "SPARK-ICEBERG"}


def test_advice_for_every_old_engine_name_is_the_advice_it_was() -> None:
    old = _load_before("advice", "provider/occflow/core/advice.py", "occflow.core")
    for name, kind in product(sorted(_old_advice_names()) + [None], ConflictKind):
        assert advice.kind_help(kind, name) == old.kind_help(kind, name), (name, kind)
        if old.engine_family(name) is not None:
            assert advice.engine_family(name) == old.engine_family(name), name


def test_a_name_no_engine_has_gets_the_kinds_own_help() -> None:
    for name in ("spark-submit", "unknown", "duckdb", "", None):
        assert advice.engine_family(name) is None
        assert advice.kind_help(ConflictKind.PROTOCOL_CHANGED, name) == ConflictKind.PROTOCOL_CHANGED.help
