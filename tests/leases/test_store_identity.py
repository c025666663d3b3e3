"""Which store a worker admits in, as it records it for its peers (``config.store_identity``), and
which peers' records make it warn (``config.diverging_peers``).

The rules are checked against a brute-force oracle written from the sentence the docs state
("a peer that used another store within the window, where one of the two is the per-machine
default file") over every combination of a small grid, and the identity against what must and
must not be in it (the password, the host of a SQLite file).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict

import pytest

from occflow.leases import LeaseStoreError
from occflow.leases.config import (
    PEER_WINDOW_SECONDS,
    announce_store,
    divergence_message,
    diverging_peers,
    store_identity,
)
from occflow.leases.model import Holder

PG = "postgresql://occflow:{password}@db.internal:5432/leases"


def test_a_password_changes_neither_the_fingerprint_nor_shows_in_the_identity():
    one, two = store_identity(PG.format(password="s3cret-one")), store_identity(PG.format(password="other"))
    assert one.fingerprint == two.fingerprint
    text = json.dumps(asdict(one))
    assert "s3cret-one" not in text and "***" in one.store and "db.internal" in one.store


def test_different_servers_or_databases_are_different_stores():
    base = store_identity(PG.format(password="x"))
    assert store_identity(PG.format(password="x").replace("/leases", "/other")).fingerprint != base.fingerprint
    assert store_identity(PG.format(password="x").replace("db.internal", "db2")).fingerprint != base.fingerprint


def test_a_sqlite_file_is_the_machines_own(tmp_path):
    url = f"sqlite:///{tmp_path / 'leases.db'}"
    here, there = store_identity(url, {}, host="worker-a"), store_identity(url, {}, host="worker-b")
    # The same path on two machines is two files: two stores.
    assert here.fingerprint != there.fingerprint
    assert store_identity(url, {}, host="worker-a") == here


def test_the_per_machine_default_is_the_airflow_home_file_taken_when_nothing_names_a_store(tmp_path):
    home = {"AIRFLOW_HOME": str(tmp_path)}
    default = f"sqlite:///{tmp_path / 'occflow_leases.db'}"
    assert store_identity(default, home).per_machine_default
    # The same file named on purpose is configured, not a fallback.
    assert not store_identity(default, {**home, "OCCFLOW_LEASE_STORE_URL": default}).per_machine_default
    assert not store_identity(default, {**home, "OCCFLOW_LEASE_STORE_CONN_ID": "leases"}).per_machine_default
    assert not store_identity(f"sqlite:///{tmp_path / 'other.db'}", home).per_machine_default
    assert not store_identity(PG.format(password="x"), home).per_machine_default


def test_a_store_that_is_not_a_url_is_refused_with_what_would_be_right():
    with pytest.raises(LeaseStoreError, match="not a URL"):
        store_identity("leases.db")


def _record(fingerprint, default, at):
    return {"fingerprint": fingerprint, "store": f"store-{fingerprint}", "per_machine_default": default,
            "host": "h", "holder": "d.t (run r)", "at": at}


@pytest.mark.parametrize("mine_default", [False, True])
def test_diverging_peers_matches_the_rule_on_every_combination(mine_default, tmp_path):
    env = {"AIRFLOW_HOME": str(tmp_path)}
    mine = store_identity(f"sqlite:///{tmp_path / 'occflow_leases.db'}" if mine_default else PG.format(password="x"),
                          env)
    assert mine.per_machine_default is mine_default
    now = 1_000_000.0
    grid = list(itertools.product([mine.fingerprint, "ffffffffffffffff"], [False, True],
                                  [now, now - PEER_WINDOW_SECONDS + 1, now - PEER_WINDOW_SECONDS - 1]))
    records = [_record(f, d, at) for f, d, at in grid]
    found = diverging_peers(mine, records, now)
    expected = [r for r in records if r["fingerprint"] != mine.fingerprint
                and r["at"] >= now - PEER_WINDOW_SECONDS and (mine_default or r["per_machine_default"])]
    assert found == expected
    assert found  # every combination has at least one peer the worker must report


def test_the_warning_names_both_stores_and_the_way_out(tmp_path):
    mine = store_identity(f"sqlite:///{tmp_path / 'occflow_leases.db'}", {"AIRFLOW_HOME": str(tmp_path)}, host="w1")
    peer = _record("0123456789abcdef", False, 0.0)
    text = divergence_message(mine, "dag.rogue (run r)", [peer])
    assert mine.fingerprint in text and "0123456789abcdef" in text and "store-0123456789abcdef" in text
    assert "per-machine default" in text and "OCCFLOW_LEASE_STORE_CONN_ID" in text and "host w1" in text


def test_outside_an_airflow_task_the_worker_only_names_its_store(tmp_path):
    # A script's own LeaseKeeper has no peers to ask: it must not try the Airflow metadata.
    identity, warning = announce_store(f"sqlite:///{tmp_path / 'l.db'}", Holder("d", "t"))
    assert warning is None and identity.store.endswith(str(tmp_path / "l.db"))
