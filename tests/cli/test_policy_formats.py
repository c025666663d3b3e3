"""``occflow policy FORMAT OPERATION``: a table format stands for its default profile, or with
``--engine`` for the profile that engine's operator uses; ``occflow matrix`` resolves the same."""

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
    first = table.splitlines()[0]
    assert first.startswith(f"table format {table_format}: its default profile {profile} (")
    assert first.endswith("; name a profile to choose another")
    assert f"policy for {operation} on {profile} " in table


def test_delta_says_that_delta_rs_operator_follows_delta_rs(capsys):
    assert main(["policy", "delta", "merge"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "delta-write-serializable (SparkWriteOperator's, --engine spark)" in first
    assert "DeltaWriteOperator uses delta-rs (--engine delta-rs)" in first


@pytest.mark.parametrize(
    ("table_format", "engine", "profile"),
    [("delta", "delta-rs", "delta-rs"), ("delta", "spark", "delta-write-serializable"),
     ("iceberg", "spark", "iceberg-serializable"), ("maxcompute", "maxcompute", "maxcompute-standard"),
     ("maxcompute-transactional", "maxcompute", "maxcompute-transactional")],
)
def test_engine_picks_the_profile_its_operator_uses(capsys, table_format, engine, profile):
    assert main(["policy", table_format, "merge" if "maxcompute" not in table_format else "update",
                 "--engine", engine, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["profile"] == profile
    if table_format != profile:  # a profile's own name needs no note
        assert f"table format {table_format} written by {engine}" in out.err and f"profile {profile}" in out.err
    assert main(["matrix", table_format, "--engine", engine, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["profile"] == profile


def test_matrix_of_delta_on_delta_rs_is_delta_rs_own_matrix(capsys):
    assert main(["matrix", "delta", "--engine", "delta-rs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "table format delta written by delta-rs (DeltaWriteOperator): profile delta-rs"
    assert lines[1].startswith("delta-rs: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [(["policy", "delta-write-serializable", "merge", "--engine", "delta-rs"],
      "--engine delta-rs (DeltaWriteOperator) does not follow profile delta-write-serializable: on a delta table it follows delta-rs"),
     (["policy", "delta-rs", "merge", "--engine", "spark"], "does not follow profile delta-rs"),
     (["policy", "iceberg", "merge", "--engine", "delta-rs"], "does not write iceberg tables; it writes delta"),
     (["matrix", "maxcompute-standard", "--engine", "spark"], "profile maxcompute-standard describes maxcompute tables")],
)
def test_an_engine_refuses_a_profile_its_operator_does_not_follow(capsys, args, message):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_name_lists_the_profiles_and_the_formats(capsys):
    assert main(["policy", "parquet", "merge"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile or table format 'parquet'" in err
    assert "delta-write-serializable" in err and "table formats: delta, iceberg, maxcompute" in err
