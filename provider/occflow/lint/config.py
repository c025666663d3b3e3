"""The lint configuration: ``[tool.occflow.lint]`` in ``pyproject.toml``, or ``.occflow-lint.toml``.

Found like ruff finds its settings: the closest such file in the DAG folder or a folder above it
(``--config FILE`` names one). What it holds::

    [tool.occflow.lint]                      # in .occflow-lint.toml: no table header needed
    baseline = "occflow-lint-baseline.json"  # relative to the config file; --baseline overrides

    [[tool.occflow.lint.ignore]]
    task = "sales_daily.fix_prices"          # dag_id.task_id
    kinds = ["conflict"]                     # corrupts_data and/or conflict
    reason = "runs only while loads are paused (runbook 12)"
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import tomllib
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import OccflowError

LOCAL_FILE = ".occflow-lint.toml"


class LintConfigError(OccflowError):
    """The lint configuration cannot be read or is malformed."""


class IgnoreEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(pattern=r"^[^.\s]+\.[^\s]+$", description="dag_id.task_id")
    kinds: tuple[Literal["corrupts_data", "conflict"], ...] = Field(min_length=1)
    reason: str = Field(min_length=1, pattern=r"\S")


class LintSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    baseline: str | None = None
    ignore: tuple[IgnoreEntry, ...] = ()


@dataclass(frozen=True)
class LintConfig:
    path: Path | None  # None: no configuration file
    settings: LintSettings

    @property
    def baseline(self) -> Path | None:
        if self.settings.baseline is None or self.path is None:
            return None
        return self.path.parent / self.settings.baseline


def _section(path: Path) -> dict[str, object] | None:
    """The lint table of a config file, None if the file holds none (a pyproject without it)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LintConfigError(f"cannot read lint config {str(path)!r}: {exc}") from exc
    if path.name == "pyproject.toml" or "tool" in data:
        section = data.get("tool", {}).get("occflow", {}).get("lint")
        return section if isinstance(section, dict) else None
    return data


def load_config(dag_folder: str | Path, explicit: str | None = None) -> LintConfig:
    """The configuration named by ``explicit``, else the closest one above ``dag_folder``."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise LintConfigError(f"lint config {explicit!r} does not exist")
        section = _section(path)
        if section is None:
            raise LintConfigError(f"{explicit!r} has no [tool.occflow.lint] table")
        return _validated(path, section)
    folder = Path(dag_folder).resolve()
    for directory in (folder, *folder.parents):
        for name in (LOCAL_FILE, "pyproject.toml"):
            candidate = directory / name
            if candidate.is_file():
                section = _section(candidate)
                if section is not None:
                    return _validated(candidate, section)
    return LintConfig(None, LintSettings())


def _validated(path: Path, section: dict[str, object]) -> LintConfig:
    try:
        return LintConfig(path, LintSettings.model_validate(section))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise LintConfigError(f"lint config {str(path)!r}: {problems}") from exc
