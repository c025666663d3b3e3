"""The generated profile pages in docs/ match the data they are generated from."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from occflow.core.profiles import PROFILES
from occflow.core.render import matrix_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "profiles"


@pytest.mark.parametrize("name", list(PROFILES))
def test_profile_page_is_generated_from_the_data(name):
    page = DOCS / f"{name}.md"
    assert page.exists(), "run: occflow profiles --write-docs docs/profiles"
    assert page.read_text() == matrix_markdown(PROFILES[name]), (
        f"{page} is stale: run `occflow profiles --write-docs docs/profiles`"
    )


@pytest.mark.parametrize("name", list(PROFILES))
def test_matrix_json_is_the_architecture_contract(name):
    out = subprocess.run(
        [sys.executable, "-m", "occflow.cli", "matrix", name, "--format", "json"],
        capture_output=True, text=True, check=True,
    ).stdout
    data = json.loads(out)
    assert data["profile"] == name
    ops = data["operations"]
    assert len(data["cells"]) == len(ops) ** 2
    for cell in data["cells"]:
        assert {"earlier", "later", "later_fails", "exception", "effect"} <= set(cell)
        assert cell["earlier"] in ops and cell["later"] in ops
        assert (cell["exception"] is None) is (not cell["later_fails"])
        assert cell["later_fails"] is PROFILES[name].later_fails(cell["earlier"], cell["later"])


def test_unknown_profile_is_a_clear_cli_error():
    proc = subprocess.run(
        [sys.executable, "-m", "occflow.cli", "matrix", "delta-snapshot"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "unknown profile or table format 'delta-snapshot'" in proc.stderr and "delta-write-serializable" in proc.stderr
