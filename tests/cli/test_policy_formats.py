"""``occflow policy FORMAT OPERATION``: a table format stands for its default profile."""

from __future__ import annotations

import json

import pytest

from occflow.cli import main


@pytest.mark.parametrize(
    ("table_format", "profile", "operation"),
    # The defaults docs/architecture.md and docs/policies.md name for table_format=...
    [("delta", "delta-write-serializable", "merge"), ("iceberg", "iceberg-serializable", "merge"),
     ("maxcompute", "maxcompute-standard", "insert_overwrite")],
)
def test_a_format_name_prints_its_default_profiles_policy(capsys, table_format, profile, operation):
    assert main(["policy", table_format, operation, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["profile"] == profile
    assert f"table format {table_format}: its default profile {profile}" in out.err  # not in the JSON
    assert main(["policy", table_format, operation]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0] == f"table format {table_format}: its default profile {profile} (name a profile to choose another)"
    assert f"policy for {operation} on {profile} " in table


def test_an_unknown_name_lists_the_profiles_and_the_formats(capsys):
    assert main(["policy", "parquet", "merge"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile or table format 'parquet'" in err
    assert "delta-write-serializable" in err and "table formats: delta, iceberg, maxcompute" in err
