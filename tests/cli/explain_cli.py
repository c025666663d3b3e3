"""``occflow explain`` run in-process, for the explain tests (tests/cli is on ``sys.path``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from occflow.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["explain", *args])
    out, err = capsys.readouterr()
    return code, out, err


def explain_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code, out, err = run(capsys, *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)
