"""Where a task is defined in its DAG file, and the ``# occflow: ignore[...]`` pragmas on it.

Like ruff's ``# noqa: CODE``, a pragma sits on the task's definition: on any line of the call
that creates the task (the line holding ``task_id="..."`` included) or on a comment line right
above it; for ``@task.occflow_write`` functions, on the decorator or the ``def`` line. It names
the finding kinds it silences and, unlike ``noqa``, a reason, which the report repeats::

    DeltaWriteOperator(  # occflow: ignore[conflict] -- the nightly ALTER runs in a freeze window
        task_id="add_channel_column", ...)

A pragma with no kind, an unknown kind or no reason is an error (exit 2), never silently ignored.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import OccflowError

#: The kinds a pragma or a config entry may silence (``serialized`` is information, never counted).
SUPPRESSIBLE = ("corrupts_data", "conflict")

_PRAGMA = re.compile(r"#\s*occflow\s*:\s*ignore\b(?P<rest>.*)$", re.IGNORECASE)
_WELL_FORMED = re.compile(r"^\[(?P<kinds>[^\]]*)\]\s*(?:--|:|—|-)?\s*(?P<reason>.*)$")
_EXAMPLE = "# occflow: ignore[conflict] -- why this pair may run together"


class LintSuppressionError(OccflowError):
    """A suppression (pragma or config entry) is malformed."""


@dataclass(frozen=True)
class Pragma:
    line: int
    kinds: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class SourceFile:
    path: str
    spans: dict[str, tuple[int, int]]  # task id -> (first, last) line of its definition
    pragmas: dict[int, Pragma]
    comment_only: frozenset[int]  # lines that hold nothing but a comment
    dags: dict[str, int] = field(default_factory=dict)  # dag id -> line of the DAG(...) / @dag

    def line_of_dag(self, dag_id: str) -> int | None:
        return self.dags.get(dag_id)

    def line_of(self, task_id: str) -> int | None:
        span = self._span(task_id)
        return span[0] if span else None

    def _span(self, task_id: str) -> tuple[int, int] | None:
        # A task in a TaskGroup is "group.task" to Airflow and "task" in the call.
        return self.spans.get(task_id) or self.spans.get(task_id.rsplit(".", 1)[-1])

    def pragmas_of(self, task_id: str) -> list[Pragma]:
        span = self._span(task_id)
        if span is None:
            return []
        first, last = span
        while first - 1 in self.comment_only:  # comment lines right above the definition
            first -= 1
        return [p for line, p in sorted(self.pragmas.items()) if first <= line <= last]


def parse_pragma(text: str, where: str) -> tuple[tuple[str, ...], str] | None:
    """The kinds and reason of a pragma comment, None if the comment is not one; a malformed
    pragma is a ``LintSuppressionError`` naming ``where`` and the expected form."""
    match = _PRAGMA.search(text)
    if match is None:
        return None
    form = _WELL_FORMED.match(match.group("rest").strip())
    if form is None:
        raise LintSuppressionError(f"{where}: pragma names no kind; write {_EXAMPLE!r}")
    kinds = tuple(k.strip() for k in form.group("kinds").split(",") if k.strip())
    unknown = [k for k in kinds if k not in SUPPRESSIBLE]
    if not kinds or unknown:
        raise LintSuppressionError(
            f"{where}: pragma kind(s) {unknown or '[]'} not one of {list(SUPPRESSIBLE)}; write {_EXAMPLE!r}"
        )
    reason = form.group("reason").strip()
    if not reason:
        raise LintSuppressionError(f"{where}: pragma gives no reason; write {_EXAMPLE!r}")
    return kinds, reason


def read_source(path: str) -> SourceFile:
    """The task definitions and pragmas of one DAG file (parsed once per content)."""
    return _parsed(path, Path(path).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=256)
def _parsed(path: str, text: str) -> SourceFile:
    pragmas: dict[int, Pragma] = {}
    comment_only: set[int] = set()
    lines = text.splitlines()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if lines[line - 1].strip().startswith("#"):
            comment_only.add(line)
        parsed = parse_pragma(token.string, f"{path}:{line}")
        if parsed is not None:
            pragmas[line] = Pragma(line, *parsed)
    tree = ast.parse(text, filename=path)
    return SourceFile(path, _task_spans(tree), pragmas, frozenset(comment_only), _dag_lines(tree))


def _task_spans(tree: ast.AST) -> dict[str, tuple[int, int]]:
    """Task id -> lines of the call that creates it: ``task_id="x"`` calls first, then
    ``@task`` functions named ``x``, then calls whose first argument is the string ``x``."""
    by_keyword: dict[str, tuple[int, int]] = {}
    by_function: dict[str, tuple[int, int]] = {}
    by_position: dict[str, tuple[int, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.decorator_list:
            first = min(d.lineno for d in node.decorator_list)
            by_function.setdefault(node.name, (first, node.lineno))
        if not isinstance(node, ast.Call):
            continue
        span = (node.lineno, node.end_lineno or node.lineno)
        for kw in node.keywords:
            if kw.arg == "task_id" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                by_keyword.setdefault(kw.value.value, span)
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            by_position.setdefault(node.args[0].value, span)
    return {**by_position, **by_function, **by_keyword}


def _dag_lines(tree: ast.AST) -> dict[str, int]:
    """Dag id -> line of the call that creates the DAG (``DAG("x", ...)``, ``DAG(dag_id="x")``)
    or of the ``@dag`` function ``x`` (its name is the default dag id)."""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                called = d.func if isinstance(d, ast.Call) else d
                if _name(called) == "dag":
                    found.setdefault(node.name, min(x.lineno for x in node.decorator_list))
        if isinstance(node, ast.Call) and _name(node.func) in ("DAG", "dag"):
            given = [kw.value for kw in node.keywords if kw.arg == "dag_id"] or node.args[:1]
            if given and isinstance(given[0], ast.Constant) and isinstance(given[0].value, str):
                found.setdefault(given[0].value, node.lineno)
    return found


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def is_dag_source(path: str | None) -> bool:
    """A plain Python DAG file (a DAG in a .zip has no source lines to point at)."""
    return bool(path) and str(path).endswith(".py") and Path(str(path)).is_file()


def location(path: str | None, task_id: str, dag_id: str | None = None) -> tuple[str, int] | None:
    """The file and line where a task is defined; where it cannot be found (a task id built at
    run of the file, an f-string in a loop), the line of its DAG, else the file's first line."""
    if path is None or not is_dag_source(path):
        return None
    source = read_source(path)
    return path, source.line_of(task_id) or (source.line_of_dag(dag_id) if dag_id else None) or 1
