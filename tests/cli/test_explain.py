"""``occflow explain``: the specs' own examples (specs 003 and 004), real delta-rs and Spark +
Iceberg tables, and bad input (issue 12)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from explain_cli import explain_json, run

from occflow.cli import main
from occflow.core.footprint import footprints_overlap
from occflow.core.profiles import get_profile

MERGE_IMPLICIT = (
    "MERGE INTO db.events t USING updates s "
    "ON s.user_id = t.user_id AND s.date = t.date AND s.country = t.country "
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)
MERGE_EXPLICIT = (
    "MERGE INTO db.events t USING updates s "
    "ON s.user_id = t.user_id AND s.date = t.date AND s.country = t.country "
    "AND t.date = '{date}' AND t.country = '{country}' "
    # INSERT * takes date and country from the source (the whole table): the spec's literals
    "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT (user_id, date, country) "
    "VALUES (s.user_id, '{date}', '{country}')"
)
UPDATE_LATER = "UPDATE db.events SET v = v + 1 WHERE date > '2010-01-01'"
DELETE_EARLIER = "DELETE FROM db.events WHERE date < '2010-01-01'"


# ---------------------------------------------------------------------------- the specs' examples


def test_a_merge_whose_condition_does_not_name_the_partition_reads_the_whole_table(capsys) -> None:
    found = explain_json(capsys, MERGE_IMPLICIT, "--table-format", "delta", "--partition-columns", "date,country")
    assert (found["operation"], found["partitions"], found["reads_target"]) == ("merge", None, True)
    assert found["profile"] == "delta-write-serializable"
    assert any("spec 003" in w for w in found["why"])
    code, out, _ = run(capsys, MERGE_IMPLICIT, "--table-format", "delta", "--partition-columns", "date,country")
    assert code == 0 and "partitions:   whole table" in out and "profile:      delta-write-serializable" in out


def test_a_merge_that_names_its_partition_touches_only_it_and_not_its_neighbours(capsys) -> None:
    nl = MERGE_EXPLICIT.format(date="2024-01-01", country="NL")
    de = MERGE_EXPLICIT.format(date="2024-01-01", country="DE")
    found = explain_json(capsys, nl, "--table-format", "delta", "--partition-columns", "date,country",
                         "--against", de, "--against", MERGE_IMPLICIT)
    assert found["partitions"] == [{"date": "2024-01-01", "country": "NL"}]
    # Spec 003: run concurrently for different countries, the explicit MERGEs do not conflict;
    # beside the implicit one (the whole table) they do.
    explicit, implicit = found["against"]
    assert (explicit["overlap"], explicit["conflict"]) == (False, False)
    assert (implicit["overlap"], implicit["conflict"]) == (True, True)
    assert "merge then merge: the later fails (concurrent_append)" in implicit["reason"]


@pytest.mark.parametrize(("columns", "conflict"), [("date", False), ("", True), ("country", True)])
def test_update_after_and_delete_before_a_date_conflict_unless_partitioned_by_date(capsys, columns, conflict) -> None:
    args = ["--table-format", "delta", "--partition-columns", columns, "--against", DELETE_EARLIER]
    found = explain_json(capsys, UPDATE_LATER, *args)
    verdict = found["against"][0]
    assert verdict["conflict"] is conflict
    # The oracle: the matrix says UPDATE and DELETE conflict on one partition (spec 003, "can
    # conflict"), so only disjoint footprints keep them apart; and the two ranges share no date.
    assert get_profile("delta-write-serializable").conflicts("update", "delete")
    keys = [None if d["partitions"] is None else frozenset(_keys(d["partitions"])) for d in (found, verdict)]
    assert footprints_overlap(*keys) is conflict
    code, out, _ = run(capsys, UPDATE_LATER, *args)
    assert code == 0 and ("CONFLICT" if conflict else "no conflict") in out.splitlines()[-2]


def _keys(partitions: list[dict[str, Any]]) -> list[str]:
    out = []
    for spec in partitions:
        parts = []
        for column, value in sorted(spec.items()):
            if isinstance(value, dict):
                ops = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
                parts += [f"{column}{ops[k]}{v}" for k, v in value.items()]
            else:
                parts.append(f"{column}={value}")
        out.append("/".join(parts))
    return out


def test_an_insert_that_reads_its_target_is_a_merge_beside_an_update(capsys) -> None:
    sql = "INSERT INTO db.events SELECT * FROM db.events WHERE date = '2024-01-01'"
    found = explain_json(capsys, sql, "--table-format", "delta", "--partition-columns", "date",
                         "--against", "UPDATE db.events SET v = 0 WHERE date = '2024-01-01'")
    assert (found["operation"], found["reads_target"]) == ("merge", True)
    assert any("note (1)" in w for w in found["why"])
    assert found["against"][0]["conflict"] is True
    # A blind append of the same rows does not conflict with that UPDATE under WriteSerializable.
    blind = explain_json(capsys, "INSERT INTO db.events VALUES (1, '2024-01-01')", "--table-format", "delta",
                         "--partition-columns", "date", "--against", "UPDATE db.events SET v = 0 WHERE date = '2024-01-01'")
    assert (blind["operation"], blind["reads_target"], blind["against"][0]["conflict"]) == ("insert_into", False, False)


def test_reorg_upgrade_is_a_protocol_change_that_conflicts_with_every_operation(capsys) -> None:
    sql = "REORG TABLE db.events APPLY (UPGRADE UNIFORM(ICEBERG_COMPAT_VERSION=2))"
    found = explain_json(capsys, sql, "--table-format", "delta", "--partition-columns", "date")
    assert (found["operation"], found["partitions"], found["protocol_change"]) == ("upgrade_protocol", None, True)
    rows = {r["operation"]: r for r in found["conflicts_with"]}
    assert set(rows) == {op.value for op in get_profile("delta-write-serializable").operations}
    assert all(r["conflicts"] for r in rows.values())
    # The upgrade first: the append fails on the changed protocol; the append first: the upgrade fails.
    assert rows["insert_into"]["this_first"]["exception"] == "protocol_changed"
    assert rows["insert_into"]["other_first"]["later_fails"]
    # PURGE rewrites like OPTIMIZE: not a protocol change.
    purge = explain_json(capsys, "REORG TABLE db.events APPLY (PURGE)", "--table-format", "delta")
    assert purge["operation"] == "optimize"


def test_the_table_properties_given_choose_the_profile(capsys) -> None:
    sql = "DELETE FROM db.events WHERE id = 7"
    serializable = explain_json(capsys, sql, "--table-format", "delta", "--property", "delta.isolationLevel=Serializable")
    assert serializable["profile"] == "delta-serializable"
    rlc = explain_json(capsys, sql, "--table-format", "delta", "--property", "delta.enableDeletionVectors=true")
    assert rlc["profile"] == "delta-write-serializable-rlc"
    assert explain_json(capsys, sql, "--table-format", "delta-rs")["profile"] == "delta-rs"
    snapshot = explain_json(capsys, sql, "--table-format", "iceberg", "--property", "write.delete.isolation-level=snapshot")
    assert snapshot["profile"] == "iceberg-snapshot"
    assert explain_json(capsys, sql, "--table-format", "maxcompute-transactional")["profile"] == "maxcompute-transactional"


def test_sql_from_a_file_and_from_stdin(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "job.sql").write_text("-- nightly\nDELETE FROM db.events WHERE date = '2024-01-01'\n")
    found = explain_json(capsys, f"@{tmp_path / 'job.sql'}", "--table-format", "delta", "--partition-columns", "date")
    assert found["partitions"] == [{"date": "2024-01-01"}]
    monkeypatch.setattr("sys.stdin", io.StringIO("TRUNCATE TABLE db.events"))
    assert explain_json(capsys, "-", "--table-format", "iceberg")["operation"] == "truncate"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["DELETE FROM db.t; DROP TABLE db.x", "--table-format", "delta"], "statement 2 of 2 ('DROP TABLE db.x')"),
        (["SELECT * FROM db.t", "--table-format", "delta"], "not a write"),
        (["DELETE FROM db.t WHERE x = 'a", "--table-format", "delta"], "unclosed quote"),
        (["DELETE FROM db.t"], "name the table: --table-format"),
        (["DELETE FROM db.t", "--table-format", "delta", "--delta-location", "/x"], "name the table once"),
        (["@/no/such/file.sql", "--table-format", "delta"], "SQL file '/no/such/file.sql' does not exist"),
        (["DELETE FROM db.t", "--table-format", "delta", "--property", "novalue"], "--property 'novalue': write KEY=VALUE"),
        (["DELETE FROM db.t", "--table-format", "delta", "--property", "delta.isolationLevel=Snapshot"],
         "Delta knows Serializable and WriteSerializable"),
        (["DELETE FROM db.t", "--table-format", "delta", "--partition-columns", "ds-x"], "invalid partition column 'ds-x'"),
    ],
)
def test_bad_input_exits_2_naming_what_is_wrong(capsys, args: list[str], message: str) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert message in err


def test_an_unknown_table_format_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["explain", "DELETE FROM db.t", "--table-format", "hudi"])
    assert exit_.value.code == 2
    assert "invalid choice: 'hudi'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- a real delta-rs table


def _events(path: Path, **configuration: str) -> str:
    rows = pa.table({
        "id": list(range(8)),
        "ds": ["a", "a", "b", "b", "c", "c", "a", "b"],
        "country": ["NL", "DE", "NL", "DE", "NL", "DE", "NL", "NL"],
    })
    write_deltalake(str(path), rows, partition_by=["ds", "country"], configuration=configuration or None)
    return str(path)


def _removed_partitions(uri: str) -> set[tuple[str, str]]:
    """The oracle: the partitions delta-rs's last commit really removed files from (its log)."""
    version = DeltaTable(uri).version()
    log = Path(uri) / "_delta_log" / f"{version:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return {(a["remove"]["partitionValues"]["ds"], a["remove"]["partitionValues"]["country"])
            for a in actions if "remove" in a}


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("ds = 'a' AND country = 'NL' AND id > 0", [{"ds": "a", "country": "NL"}]),
        ("ds IN ('a', 'b') AND id >= 2", [{"ds": "a"}, {"ds": "b"}]),
        ("id >= 5", None),
    ],
)
def test_explain_on_a_real_delta_rs_table_derives_what_delta_rs_touches(capsys, tmp_path, predicate, expected) -> None:
    uri = _events(tmp_path / "events", **{"delta.isolationLevel": "Serializable"})
    found = explain_json(capsys, f"DELETE FROM db.events WHERE {predicate}", "--delta-location", uri)
    assert found["table_facts"]["partition_columns"] == ["ds", "country"]
    assert found["profile"] == "delta-rs"  # delta-rs commits: its own matrix, whatever the level
    assert any("delta.isolationLevel is Serializable" in w for w in found["why"])
    assert found["partitions"] == expected
    # Run the same delete on delta-rs: every partition it removed a file from is declared.
    DeltaTable(uri).delete(predicate)
    touched = _removed_partitions(uri)
    assert touched
    if expected is None:
        assert len({ds for ds, _ in touched}) > 1  # it really spans partitions: the whole table was right
    else:
        for ds, country in touched:
            assert any(spec.get("ds", ds) == ds and spec.get("country", country) == country for spec in expected)


def test_explain_on_a_missing_delta_location_names_it(capsys, tmp_path) -> None:
    code, out, err = run(capsys, "DELETE FROM db.events", "--delta-location", str(tmp_path / "none"))
    assert (code, out) == (2, "")
    assert f"cannot read the Delta table at {tmp_path / 'none'}" in err


# ---------------------------------------------------------------------------- a real Iceberg table


@pytest.fixture(scope="module")
def iceberg_home(spark_home: Path, iceberg_engine: Any) -> Iterator[Path]:
    """The run's one Spark session (tests/conftest.py) with a table for explain to read; its
    embedded home is where the CLI finds the same catalog."""
    home = spark_home
    spark = iceberg_engine.session()
    spark.sql("DROP TABLE IF EXISTS lake.db.explain_events")
    spark.sql(
        "CREATE TABLE lake.db.explain_events (id BIGINT, ds STRING, ts TIMESTAMP) USING iceberg "
        "PARTITIONED BY (ds, days(ts)) TBLPROPERTIES ('format-version'='2', "
        "'write.merge.isolation-level'='snapshot')"
    )
    yield home


@pytest.mark.spark
def test_explain_on_a_real_iceberg_table_reads_its_spec_and_isolation_levels(capsys, iceberg_home, monkeypatch) -> None:
    monkeypatch.setenv("OCCFLOW_HOME", str(iceberg_home))  # the CLI's session is the running one
    merge = ("MERGE INTO lake.db.explain_events t USING (SELECT 1 AS id) s ON t.id = s.id AND t.ds = '{ds}' "
             "WHEN MATCHED THEN DELETE")
    found = explain_json(capsys, merge.format(ds="2024-01-01"), "--spark",
                         "--against", merge.format(ds="2024-01-02"),
                         "--against", "UPDATE lake.db.explain_events SET id = 0 WHERE ts > '2024-01-01'")
    assert found["table_facts"]["partition_columns"] == ["ds"]
    assert found["table_facts"]["partition_transforms"] == ["days(ts)"]
    assert found["partitions"] == [{"ds": "2024-01-01"}]
    # The table sets write.merge.isolation-level = snapshot; its UPDATEs stay serializable.
    assert found["profile"] == "iceberg-snapshot"
    assert any("days(ts) is a transform" in w for w in found["why"])
    other_day, update = found["against"]
    assert (other_day["overlap"], other_day["conflict"]) == (False, False)
    # A condition on ts names no partition (days(ts) is not an identity column): the whole table.
    assert update["partitions"] is None and update["profile"] == "iceberg-serializable"
    assert update["overlap"] is True
