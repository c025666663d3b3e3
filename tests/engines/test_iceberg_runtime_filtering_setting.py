"""Iceberg's runtime file filter keyed by the session's settings (issue 33, item 3), on real
Spark + Iceberg.

``SparkCopyOnWriteScan.filter`` fails a copy-on-write MERGE when the table object its scan came
from moved meanwhile ("Runtime file filtering is not possible"), whatever partitions the other
commit touched. Whether that can happen is read from the session the write runs on: Spark's
``spark.sql.optimizer.runtime.rowLevelOperationGroupFilter.enabled`` (default true) and the
catalog's ``cache-enabled`` (Iceberg's default true; occflow's embedded catalog sets false).
Each case races a MERGE of ds=A, held inside its runtime filter by a UDF, against an append to
ds=B through the same session; the engine's outcome is the oracle. Run under
``flock /tmp/occflow-heavy.lock`` (starts a JVM).
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from occflow.core.admission_rule import Claim, Pairing
from occflow.core.operations import Operation
from occflow.core.sqlderive import derive_write
from occflow.core.tablefacts import TableFacts
from occflow.engines.spark.facts import CATALOG_CACHE, GROUP_FILTER, spark_table_facts

_counter = itertools.count()

CASES = {
    # Spark's and Iceberg's own defaults: the filter runs and the catalog caches the table.
    "engine defaults": {CATALOG_CACHE.format(catalog="lake"): "true"},
    "group filter off": {CATALOG_CACHE.format(catalog="lake"): "true", GROUP_FILTER: "false"},
    "catalog cache off (occflow's embedded default)": {CATALOG_CACHE.format(catalog="lake"): "false"},
}


def _gate(folder: Path) -> Any:
    started, release = str(folder / "started"), str(folder / "release")

    def gate(value: int) -> int:  # runs in Spark's Python worker: it holds the MERGE's subquery
        import os
        import time as clock

        open(started, "w").close()
        deadline = clock.monotonic() + 60
        while not os.path.exists(release) and clock.monotonic() < deadline:
            clock.sleep(0.02)
        return value

    return gate


def _claim(facts: TableFacts, sql: str) -> Claim:
    derived = derive_write(sql, list(facts.partition_columns), facts.engine, column_types=facts.partition_column_types)
    reach = facts.reach(derived.operation, derived.partitions).partitions
    keys = None if reach is None else frozenset("/".join(f"{c}={v}" for c, v in sorted(p.items())) for p in reach)
    return Claim(facts.profile(derived.operation), derived.operation, keys)


@pytest.mark.parametrize(
    "case",
    # The failing race starts Spark's Python UDF worker and unwinds the MERGE: 13 s measured.
    [pytest.param(case, marks=pytest.mark.slow) if case == "engine defaults" else case for case in CASES],
)
def test_a_merge_beside_an_append_elsewhere_is_kept_apart_exactly_when_the_session_can_fail_it(
    iceberg_engine: Any, tmp_path: Path, case: str
) -> None:
    spark = iceberg_engine.session()
    session = spark.newSession()
    for key, value in CASES[case].items():
        session.conf.set(key, value)  # before the catalog's first use in this session
    name = f"lake.db.rtf_{next(_counter)}"
    session.sql(
        f"CREATE TABLE {name} (id BIGINT, ds STRING, v INT) USING iceberg PARTITIONED BY (ds) "
        "TBLPROPERTIES ('format-version'='2')"
    )
    session.sql(f"INSERT INTO {name} VALUES (1, 'A', 1), (2, 'A', 2), (3, 'B', 3)")
    session.udf.register("occflow_gate", _gate(tmp_path), "bigint")
    merge = (
        f"MERGE INTO {name} t USING (SELECT occflow_gate(id) AS id, 9 AS v FROM VALUES (1L) AS s(id)) s "
        "ON t.id = s.id AND t.ds = 'A' WHEN MATCHED THEN UPDATE SET v = s.v"
    )
    append = f"INSERT INTO {name} VALUES (4, 'B', 4)"

    facts = spark_table_facts(session, name)  # read through the session the MERGE runs in
    # The append as an operator declares it (partitions={"ds": "B"}): VALUES rows derive as any partition.
    appending = Claim(facts.profile(Operation.INSERT_INTO), Operation.INSERT_INTO, frozenset({"ds=B"}))
    merging = _claim(facts, merge)
    assert merging.partitions in (None, frozenset({"ds=A"}))
    pairing = merging.pairing(appending)

    outcome: dict[str, BaseException | None] = {}
    runner = threading.Thread(target=lambda: outcome.update(merge=_run(session, merge)))
    runner.start()
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline, "the MERGE never reached its gate"
        time.sleep(0.02)
    session.sql(append)  # commits while the MERGE waits between its scan and its runtime filter
    (tmp_path / "release").touch()
    runner.join(90)
    failed = outcome["merge"]
    assert failed is None or "Runtime file filtering is not possible" in str(failed), failed

    assert facts.runtime_filter_check is (failed is not None)  # the setting read = what the engine did
    assert (pairing is not Pairing.TOGETHER) is (failed is not None), (case, pairing, failed)


def _run(session: Any, sql: str) -> BaseException | None:
    try:
        session.sql(sql)
    except Exception as exc:  # the engine's outcome is the oracle
        return exc
    return None
