"""Partition values leave core as plain JSON types, and a STRING column still keeps its spelling.

A STRING column's value once travelled as a ``str`` subclass marking that it keeps its spelling
(``"2024-5-1"`` is not the day ``2024-05-01`` there): Airflow's msgpack comms refused it in an
asset event's extra and in the XCom report, and the committed write was retried. Now the value is
plain text everywhere; the declaration records which columns the table types STRING
(``WriteDeclaration.string_columns``) and only the key maker reads that.

One real ``dag.test()`` write on a real delta-rs table typed STRING ``ds`` and INT ``p``, declared
``{"ds": "2024-5-1", "p": "07"}``. Every value that reaches the report's ``to_dict``, the asset
event's extra and the lease request's JSON is walked for exact JSON types (``type(v) is str``,
never a subclass). The oracle for the keys is delta-rs's own ``_delta_log``: the partitions it
wrote (``2024-5-1`` beside ``2024-05-01``, ``p`` as ``7``) are two partitions there, and their
admission keys, built from the table's facts as the operator builds them, are two disjoint keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

pytestmark = pytest.mark.airflow

_JSON_TYPES = (dict, list, str, int, float, bool, type(None))


def _assert_plain(value: Any, where: str) -> None:
    """Every node of ``value`` is exactly a JSON type (a subclass of ``str`` or ``dict`` is what
    msgpack refused); mapping keys are exactly ``str``."""
    assert type(value) in _JSON_TYPES, f"{where}: {type(value).__qualname__} {value!r}"
    if type(value) is dict:
        for key, item in value.items():
            assert type(key) is str, f"{where}: key {type(key).__qualname__} {key!r}"
            _assert_plain(item, f"{where}.{key}")
    elif type(value) is list:
        for i, item in enumerate(value):
            _assert_plain(item, f"{where}[{i}]")


def _logged_partitions(location: Path) -> dict[int, list[dict[str, str]]]:
    """Per log version, the ``partitionValues`` of the files delta-rs added (its own record)."""
    out: dict[int, list[dict[str, str]]] = {}
    for log in sorted((location / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        out[int(log.stem)] = [a["add"]["partitionValues"] for a in actions if "add" in a]
    return out


def test_values_leaving_core_are_plain_and_the_string_key_keeps_the_spelling(run_dag, tmp_path, monkeypatch):
    from occflow.core.declaration import WriteDeclaration
    from occflow.core.footprint import footprints_overlap
    from occflow.core.report import WriteReport
    from occflow.engines.deltars.facts import deltars_table_facts
    from occflow.leases.model import LeaseRequest
    from occflow.operators import assets

    location = tmp_path / "t"
    held = pa.table({"id": pa.array([1], pa.int64()), "ds": ["2024-05-01"], "p": pa.array([7], pa.int32())})
    write_deltalake(str(location), held, partition_by=["ds", "p"])
    monkeypatch.setenv("OCCFLOW_LEASE_STORE_URL", f"sqlite:///{tmp_path / 'leases.db'}")

    # What leaves core, caught where it is made (dag.test() runs the task in this process).
    reports: list[dict[str, Any]] = []
    extras: list[tuple[dict[str, Any], tuple[str, ...]]] = []
    requests: list[LeaseRequest] = []
    to_dict, table_event, from_declaration = WriteReport.to_dict, assets.table_event, LeaseRequest.from_declaration

    def report_to_dict(self: WriteReport) -> dict[str, Any]:
        reports.append(to_dict(self))
        return reports[-1]

    def event(*args: Any, **kwargs: Any) -> Any:
        made = table_event(*args, **kwargs)
        if made is not None:
            extras.append((made.extra, made.partition_keys))
        return made

    def request(declaration: WriteDeclaration, *args: Any, **kwargs: Any) -> LeaseRequest:
        requests.append(from_declaration(declaration, *args, **kwargs))
        return requests[-1]

    monkeypatch.setattr(WriteReport, "to_dict", report_to_dict)
    monkeypatch.setattr(assets, "table_event", event)
    monkeypatch.setattr(LeaseRequest, "from_declaration", staticmethod(request))

    run = run_dag(
        f"""
        import pendulum
        import pyarrow as pa
        from airflow.sdk import DAG
        from occflow.operators.delta import DeltaWriteOperator

        def rows(context, snapshot):
            return pa.table({{"id": pa.array([2], pa.int64()), "ds": ["2024-5-1"], "p": pa.array([7], pa.int32())}})

        with DAG("plain_partition_values", schedule=None, start_date=pendulum.datetime(2024, 1, 1)):
            DeltaWriteOperator(task_id="append", table="lake.t", path={str(location)!r}, operation="insert_into",
                               partitions={{"ds": "2024-5-1", "p": "07"}}, data=rows)
        """,
        dag_id="plain_partition_values",
    )
    assert run.state == "success", run.task("append").state

    # Everything that left core is exactly JSON types, and the values are the typed ones.
    assert reports and extras and requests
    for i, report in enumerate(reports):
        _assert_plain(report, f"report[{i}]")
    assert reports[-1]["partitions"] == [{"ds": "2024-5-1", "p": "7"}]  # INT '07' typed; STRING kept
    (extra, keys), = extras
    _assert_plain(extra, "asset extra")
    assert all(type(k) is str for k in keys) and keys == ("2024-5-1|7",), keys
    assert extra["partitions"] == [{"ds": "2024-5-1", "p": "7"}]
    for i, lease in enumerate(requests):
        claim = lease.to_dict()
        _assert_plain(claim, f"lease[{i}]")
        assert json.loads(json.dumps(claim)) == claim
    assert {k for lease in requests for k in lease.partitions or ()} == {"ds='2024-5-1'/p=7"}

    # delta-rs's record: the write added the partition spelled 2024-5-1 (p as 7), apart from 2024-05-01.
    logged = _logged_partitions(location)
    assert logged[reports[-1]["version"]] == [{"ds": "2024-5-1", "p": "7"}]
    partitions = {(v["ds"], v["p"]) for added in logged.values() for v in added}
    assert partitions == {("2024-05-01", "7"), ("2024-5-1", "7")}
    # Their admission keys, from the table's facts as the operator makes them: two, disjoint.
    facts = deltars_table_facts(location, table="lake.t")
    keys_of = {
        ds: WriteDeclaration.create("lake.t", "delete", profile="delta-rs", partitions={"ds": ds, "p": p})
        .with_typed_partitions(facts.partition_column_types, facts.engine)
        .partition_keys()
        for ds, p in partitions
    }
    assert keys_of["2024-5-1"] == {lease for r in requests for lease in r.partitions or ()}
    assert not footprints_overlap(keys_of["2024-5-1"], keys_of["2024-05-01"])
    # Without the types the text may be either: it names both partitions (wider, never a guess).
    untyped = WriteDeclaration.create("lake.t", "delete", profile="delta-rs", partitions={"ds": "2024-5-1", "p": 7})
    assert all(footprints_overlap(untyped.partition_keys(), keys) for keys in keys_of.values())
