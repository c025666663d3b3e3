"""Shared test configuration."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPECS = Path(os.environ.get("OCCFLOW_SPECS_DIR", REPO.parent / "shared" / "specs"))


@pytest.fixture(scope="session")
def specs_dir() -> Path:
    if not (SPECS / "000_67b4bcfc3388519b.txt").exists():
        pytest.skip(f"the specification texts are not at {SPECS} (set OCCFLOW_SPECS_DIR)")
    return SPECS
