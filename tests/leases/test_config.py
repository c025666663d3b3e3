"""Where the store lives: URLs, Airflow connection URIs, the embedded default, and bad input."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from occflow.core.errors import (
    InvalidDeclarationError,
    InvalidFootprintError,
    UnknownOperationError,
    UnknownProfileError,
)
from occflow.leases import (
    LeaseRequest,
    LeaseStore,
    LeaseStoreError,
    footprints_overlap,
    resolve_store_url,
    store_url,
    url_from_connection_uri,
)


def test_connection_uris_map_to_sqlalchemy_urls():
    assert url_from_connection_uri("postgres://u:p@db:5432/leases") == "postgresql+psycopg2://u:p@db:5432/leases"
    assert url_from_connection_uri("postgresql://u@db/x") == "postgresql+psycopg2://u@db/x"
    assert url_from_connection_uri("sqlite:////var/occflow.db") == "sqlite:////var/occflow.db"


def test_store_url_prefers_explicit_then_environment_then_airflow_home():
    env = {"AIRFLOW_HOME": "/opt/af"}
    assert store_url(None, env) == "sqlite:////opt/af/occflow_leases.db"
    env["OCCFLOW_LEASE_STORE_URL"] = "postgres://h/db"
    assert store_url(None, env) == "postgresql+psycopg2://h/db"
    assert store_url("sqlite:////x.db", env) == "sqlite:////x.db"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://h/db", "unsupported lease store 'mysql'"),
        ("leases.db", "is not a URL"),
        ("sqlite://", "must be a file"),
        ("sqlite:///:memory:", "must be a file"),
    ],
)
def test_bad_store_urls_are_rejected_with_what_would_be_right(url, message):
    with pytest.raises(LeaseStoreError, match=message):
        LeaseStore.from_url(url)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"profile": "delta-magic"}, UnknownProfileError, "known profiles: maxcompute-standard"),
        ({"operation": "upsert"}, UnknownOperationError, "unknown operation 'upsert'"),
        ({"operation": "minor_compact"}, UnknownOperationError, "not in profile 'maxcompute-standard'"),
        ({"partitions": []}, InvalidFootprintError, "empty footprint"),
        ({"partitions": None}, InvalidFootprintError, "whole_table=True"),
        ({"partitions": ["ds"]}, InvalidFootprintError, "malformed partition key 'ds'"),
        ({"partitions": ["ds=1/"]}, InvalidFootprintError, "malformed partition key"),
        ({"partitions": ["1ds=2"]}, InvalidFootprintError, "malformed partition key"),
        ({"partitions": [{"ds": None}]}, InvalidFootprintError, "must be a scalar"),
        ({"table": "db.t; drop table x"}, InvalidDeclarationError, "invalid table identifier"),
        ({"ttl": 0}, InvalidDeclarationError, "ttl must be a positive number"),
    ],
)
def test_bad_requests_are_rejected_naming_the_field(kwargs, error, message):
    args = {"table": "db.t", "operation": "update", "profile": "maxcompute-standard", "partitions": ["ds=1"]}
    args.update(kwargs)
    with pytest.raises(error, match=message):
        LeaseRequest.create(args.pop("table"), args.pop("operation"), args.pop("profile"), **args)


def test_partition_keys_are_canonical_and_overlap_by_shared_columns():
    r = LeaseRequest.create("db.t", "update", "maxcompute-standard", ["country=NL/ds=1", {"ds": 2}])
    assert r.partitions == frozenset({"country=NL/ds=1", "ds=2"})
    assert footprints_overlap(frozenset({"ds=1"}), frozenset({"country=NL/ds=1"}))
    assert not footprints_overlap(frozenset({"ds=1"}), frozenset({"ds=2/country=NL"}))
    assert footprints_overlap(None, frozenset({"ds=2"}))


@pytest.mark.airflow
def test_store_url_is_read_from_an_airflow_connection(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW_CONN_OCCFLOW_LEASES": "postgres://lease_user:secret@db.internal:5433/leases"}
    env.pop("OCCFLOW_LEASE_STORE_URL", None)
    code = "from occflow.leases import resolve_store_url; print(resolve_store_url(conn_id='occflow_leases'))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "postgresql+psycopg2://lease_user:secret@db.internal:5433/leases"
    assert resolve_store_url(None, None, {"AIRFLOW_HOME": "/af"}) == "sqlite:////af/occflow_leases.db"


def test_a_request_survives_serialization_with_its_queue_place(sqlite_url):
    import json

    store = LeaseStore.from_url(sqlite_url)
    holder = store.try_acquire(LeaseRequest.create("db.t", "insert_into", "maxcompute-standard", ["ds=1"]))
    waiting = LeaseRequest.create("db.t", "update", "maxcompute-standard", ["ds=1"])
    assert store.try_acquire(waiting) is None
    again = LeaseRequest.from_dict(json.loads(json.dumps(waiting.to_dict())))
    assert again == waiting
    # The deserialized request keeps the queue place: a later insert still waits behind it.
    assert [b.kind for b in store.decide(LeaseRequest.create("db.t", "insert_into", "maxcompute-standard",
                                                            ["ds=1"])).blockers] == ["waiting"]
    store.release(holder)
    assert store.try_acquire(again) is not None
    with pytest.raises(InvalidDeclarationError, match="not a serialized lease request"):
        LeaseRequest.from_dict({"table": "db.t"})


# The two admission switches, one spelling set: what each reads, through the code that reads it.
SPELLINGS = [
    ("on", True), ("ON", True), ("true", True), ("True", True), ("yes", True), ("YES", True), ("1", True),
    (" on ", True), ("off", False), ("Off", False), ("false", False), ("FALSE", False), ("no", False),
    ("No", False), ("0", False), ("\toff\n", False),
]


@pytest.mark.parametrize(("value", "on"), SPELLINGS)
def test_both_admission_switches_accept_the_same_spellings(value, on):
    from occflow.leases.config import admission_switched_off, store_options

    assert admission_switched_off({"OCCFLOW_ADMISSION": value}) is (not on)
    assert store_options({"OCCFLOW_ORDER_AWARE_ADMISSION": value})["order_aware"] is on


@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_blank_or_unset_switch_is_its_default_on(value):
    from occflow.leases.config import admission_switched_off, store_options

    env = {} if value is None else {"OCCFLOW_ADMISSION": value, "OCCFLOW_ORDER_AWARE_ADMISSION": value}
    assert admission_switched_off(env) is False
    assert store_options(env)["order_aware"] is True


@pytest.mark.parametrize("value", ["sometimes", "enabled", "2", "y", "of", "tru e"])
@pytest.mark.parametrize("variable", ["OCCFLOW_ADMISSION", "OCCFLOW_ORDER_AWARE_ADMISSION"])
def test_a_bad_switch_value_fails_naming_the_variable_and_what_it_takes(variable, value):
    from occflow.leases.config import SettingError, admission_switched_off, store_options

    read = admission_switched_off if variable == "OCCFLOW_ADMISSION" else store_options
    with pytest.raises(SettingError) as raised:
        read({variable: value})
    message = str(raised.value)
    assert message.startswith(f"{variable}={value!r} must be on or off")
    assert "on/off, true/false, yes/no, 1/0" in message
    # Both callers' error types: the operators catch ValueError, the store's callers LeaseStoreError.
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, LeaseStoreError)
