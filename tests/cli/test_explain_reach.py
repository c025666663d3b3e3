"""``occflow explain`` keys a write by the table's reach, as ``SparkWriteOperator.declare`` keys
its lease (issues 32 and 33): on an Iceberg table whose older partition spec still has live files,
a DELETE on the current spec's column rewrites those files, so two DELETEs the SQL names on
disjoint partitions are kept apart by the store, and ``explain --against`` must say so.

The oracles explain does not share: a real ``LeaseStore`` on SQLite, asked with the declarations
``SparkWriteOperator.declare`` makes on the same table (its own facts read, its own reach
applied), and Iceberg itself: a DELETE planned before the other's commit fails on the evolved
table and commits on the unevolved one (the control, where explain and the store grant the pair).
One Spark session (tests/conftest.py's); run under ``flock /tmp/occflow-heavy.lock``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from explain_cli import explain_json, run

from occflow.engines.spark.iceberg import pinned_session
from occflow.leases import LeaseRequest, LeaseStore

pytestmark = pytest.mark.spark

EVOLVED, PLAIN = "lake.db.explain_reach_evolved", "lake.db.explain_reach_plain"
DELETE = "DELETE FROM {table} WHERE b = '{b}'"
INSERT = "INSERT INTO {table} PARTITION (b = '{b}') SELECT 9 AS id, 'a9' AS a"


def _make(spark: Any, name: str, *, evolve: bool) -> None:
    """Rows of b = x, y, z. Evolved: written under spec 0 (a), then the spec is b alone: the
    a=a1 file holds rows of b = x, y and z, so a DELETE of any of them rewrites it. Plain: the
    same rows under one spec (b) only."""
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id BIGINT, a STRING, b STRING) USING iceberg "
        f"PARTITIONED BY ({'a' if evolve else 'b'}) TBLPROPERTIES ('format-version'='2')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a1', 'x'), (2, 'a1', 'y'), (3, 'a1', 'z'), (4, 'a2', 'y')")
    if evolve:
        spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD b")
        spark.sql(f"ALTER TABLE {name} DROP PARTITION FIELD a")
    spark.sql(f"INSERT INTO {name} VALUES (5, 'a3', 'x'), (6, 'a3', 'w')")


@pytest.fixture(scope="module")
def spark(iceberg_engine: Any, spark_home: Path) -> Any:
    session = iceberg_engine.session()
    _make(session, EVOLVED, evolve=True)
    _make(session, PLAIN, evolve=False)
    return session


@pytest.fixture
def cli_home(spark_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OCCFLOW_HOME", str(spark_home))  # the CLI's session is the running one
    return spark_home


def declared(sql: str, table: str, home: Path) -> LeaseRequest:
    """The lease request of the write as a DAG would run it: ``SparkWriteOperator.declare``
    derives it from the SQL and the table's facts, with the table's reach applied."""
    from occflow.operators.spark import SparkWriteOperator  # Airflow: only where the oracle needs it

    operator = SparkWriteOperator(
        task_id="w", table=table.removeprefix("lake."), table_format="iceberg", job=sql,
        spark_config={"table_format": "iceberg", "home": str(home)},
    )
    return LeaseRequest.from_declaration(operator.declare(), commit_gate=True)


def store_ruling(store: LeaseStore, running: LeaseRequest, newcomer: LeaseRequest) -> str:
    """The running write's lease taken, the newcomer decided, the gates read back."""
    held = store.decide(running).lease
    assert held is not None
    decided = store.decide(newcomer)
    try:
        if decided.lease is None:
            return "blocked"
        awaits = held.lease_id in {lease.lease_id for lease in store.gate(decided.lease)}
        holds = decided.lease.lease_id in {lease.lease_id for lease in store.gate(held)}
        return {(False, False): "granted", (True, False): "awaits", (False, True): "holds"}[(awaits, holds)]
    finally:
        store.cancel(newcomer)  # a refused request keeps its place in the queue: leave none behind
        for lease in (held, decided.lease):
            if lease is not None:
                store.release(lease)


def explained(capsys: pytest.CaptureFixture[str], newcomer: str, running: str) -> dict[str, Any]:
    capsys.readouterr()  # the operator's log lines (Airflow logs to stdout) are not explain's output
    return explain_json(capsys, newcomer, "--spark", "--against", running)


def test_explain_keys_an_evolved_tables_deletes_by_the_reach_and_agrees_with_the_store(
        spark: Any, cli_home: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    pairs = [
        (DELETE.format(table=EVOLVED, b="x"), DELETE.format(table=EVOLVED, b="z")),
        (INSERT.format(table=EVOLVED, b="z"), DELETE.format(table=EVOLVED, b="x")),
        (DELETE.format(table=EVOLVED, b="x"), INSERT.format(table=EVOLVED, b="z")),
    ]
    rulings = []
    for newcomer, running in pairs:
        found = explained(capsys, newcomer, running)
        [against] = found["against"]
        stored = store_ruling(store, declared(running, EVOLVED, cli_home), declared(newcomer, EVOLVED, cli_home))
        assert (against["admission"], against["conflict"]) == (stored, stored == "blocked"), (newcomer, running, against)
        rulings.append(stored)
        # The SQL alone names one current-spec partition each: b=x against b=z, disjoint.
        assert [found["partitions"], against["partitions"]] in ([[{"b": "x"}], [{"b": "z"}]], [[{"b": "z"}], [{"b": "x"}]])
        assert found["table_facts"]["older_specs"][0]["fields"] == ["a"]
        for job in (found, against):
            if job["operation"] == "delete":  # a DELETE rewrites a1's old-spec file: the whole table
                assert job["table_reach"]["partitions"] is None
                assert "partition spec 0 (a) still has live files" in job["table_reach"]["why"][0]
            else:  # an append writes under the current spec only
                assert job["table_reach"] == {"partitions": job["partitions"], "why": []}
        assert any("partition spec 0 (a)" in line for line in found["why"]) == (found["operation"] == "delete")
        assert "the table's reach makes them overlap" in against["reason"]
    assert rulings[0] == "blocked"  # two DELETEs: neither commit order is clean

    capsys.readouterr()
    code, text, _ = run(capsys, pairs[0][0], "--spark", "--against", pairs[0][1])
    assert code == 0
    lines = text.splitlines()
    assert lines[2:4] == ["partitions:   b=x", "reach:        whole table"]
    assert "against [1]: delete on lake.db.explain_reach_evolved: CONFLICT" in lines

    # The engine's word: the DELETE of b=z planned before the DELETE of b=x commits fails.
    late = pinned_session(spark)
    late.sql(f"SELECT count(*) FROM {EVOLVED}").collect()  # pins the table as it is now
    spark.sql(pairs[0][1])
    with pytest.raises(Exception, match=r"(?s)Missing required files to delete|Found conflicting files"):
        late.sql(pairs[0][0])


def test_control_on_an_unevolved_table_the_two_deletes_are_disjoint_for_explain_the_store_and_iceberg(
        spark: Any, cli_home: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = LeaseStore.from_url(f"sqlite:///{tmp_path / 'leases.db'}")
    newcomer, running = DELETE.format(table=PLAIN, b="x"), DELETE.format(table=PLAIN, b="z")
    found = explained(capsys, newcomer, running)
    [against] = found["against"]
    assert found["table_facts"]["older_specs"] == []
    assert found["table_reach"] == {"partitions": [{"b": "x"}], "why": []}
    assert (against["admission"], against["conflict"], against["overlap"]) == ("granted", False, False)
    assert against["reason"] == "their partitions are disjoint (b=x vs b=z)"
    assert store_ruling(store, declared(running, PLAIN, cli_home), declared(newcomer, PLAIN, cli_home)) == "granted"
    capsys.readouterr()
    code, text, _ = run(capsys, newcomer, "--spark")
    assert code == 0 and "reach:" not in text
    # The engine's word: planned before the other commits, the DELETE still commits.
    late = pinned_session(spark)
    late.sql(f"SELECT count(*) FROM {PLAIN}").collect()
    spark.sql(running)
    late.sql(newcomer)
    assert sorted(r["b"] for r in spark.sql(f"SELECT b FROM {PLAIN}").collect()) == ["w", "y", "y"]
