"""The house rules of docs/architecture.md, checked on the code itself.

- The import-linter contracts in ``pyproject.toml`` hold (the test command also runs
  ``lint-imports``); and they can fail: an upward import or a circle planted in a copy of the
  package breaks them.
- No module over 500 lines and no function over 60, literal matrix data excepted.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "provider" / "occflow"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
#: Modules that are literal conflict matrices (one sourced cell per line, read next to the spec).
MATRIX_DATA = {"core/profiles/delta.py", "core/profiles/iceberg.py"}


def _lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_import_contracts_hold() -> None:
    result = _lint_imports(ROOT, ROOT / "provider")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "broken" not in result.stdout.lower() or "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        # core reaching up into the Airflow face
        ("core/kinds.py", "import occflow.operators.base  # planted upward import\n", "Layers"),
        # one engine importing another
        ("engines/deltars/__init__.py", "import occflow.engines.spark  # planted\n", "independent"),
        # the Airflow face using an engine's library itself instead of the engine's package
        ("operators/delta.py", "import deltalake  # planted\n", "Airflow face reaches engines"),
        # an engine knowing Airflow
        ("engines/deltars/target.py", "import airflow  # planted\n", "know nothing of Airflow"),
        ("operators/flow.py", "import occflow.engines.maxcompute  # planted\n", "write flow talks to engines"),
        # core importing pyodps
        ("core/report.py", "import odps  # planted\n", "core is pure"),
        # a circle inside the Airflow face, hidden in a function as the old code did
        (
            "operators/base.py",
            "def _planted():\n    import occflow.decorators.occflow_write  # noqa: F401\n",
            "circles",
        ),
    ],
)
def test_import_contracts_catch_a_planted_violation(
    tmp_path: Path, module: str, planted: str, contract: str
) -> None:
    copy = tmp_path / "provider" / "occflow"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = copy / module
    assert target.exists(), f"{module} moved: update this test"
    target.write_text(target.read_text() + "\n" + planted)
    if contract == "circles":
        # the decorator builds operators; the planted import closes the loop.
        assert "..operators" in (copy / "decorators" / "occflow_write.py").read_text()
    result = _lint_imports(tmp_path, tmp_path / "provider")
    assert result.returncode != 0, f"planted import in {module} went unnoticed:\n{result.stdout[-3000:]}"
    assert "BROKEN" in result.stdout or "broken" in result.stdout.lower()
    if contract not in ("circles", "independent", "Layers"):
        broken = result.stdout.split("Broken contracts")[-1]
        assert contract in broken, f"{module}: expected the contract naming {contract!r} to break:\n{broken[:2000]}"


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_500_lines() -> None:
    too_long = {
        str(p.relative_to(PACKAGE)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
        and str(p.relative_to(PACKAGE)) not in MATRIX_DATA
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines: {too_long}"


def test_no_function_over_60_lines() -> None:
    too_long = {}
    for path in _sources():
        rel = str(path.relative_to(PACKAGE))
        if rel in MATRIX_DATA:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long[f"{rel}:{node.lineno} {node.name}"] = length
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


def _imports_occflow(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").startswith("occflow")
    return isinstance(node, ast.Import) and any(a.name.startswith("occflow") for a in node.names)


def test_no_local_import_of_occflow_modules() -> None:
    """A function-local import of occflow code is how the old circles hid; optional heavy
    dependencies (pyspark, deltalake, ...) may still be imported lazily."""
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            found.extend(f"{path.relative_to(PACKAGE)}:{node.lineno}" for node in ast.walk(fn) if _imports_occflow(node))
    assert not found, f"function-local imports of occflow modules: {found}"
