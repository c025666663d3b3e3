"""occflow as Airflow's providers manager sees it: the real ``airflow providers ...`` commands in a
fresh AIRFLOW_HOME, and the ``occflow_spark`` connection's form and test button.

Every class the registration names must load (Airflow loads them by name), and
``get_provider_info()`` itself must not import Airflow: the providers manager calls it while
Airflow is still importing.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

REPO = Path(__file__).resolve().parents[2]
AIRFLOW = Path(sys.executable).with_name("airflow")
PACKAGE = "airflow-provider-occflow"


def import_string(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


MAXCOMPUTE_HOOK = "occflow.hooks.maxcompute.OccflowMaxComputeHook"
PLUGIN = "occflow.plugins.OccflowTableWritesPlugin"


@pytest.fixture(scope="module")
def airflow_cli(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Runs ``airflow providers <args> -o json`` with its own, empty AIRFLOW_HOME."""
    home = tmp_path_factory.mktemp("airflow-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"})

    def run(*args: str) -> Any:
        done = subprocess.run([str(AIRFLOW), "providers", *args, "-o", "json"], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        out = done.stdout
        return json.loads(out[out.index("["):])

    return run


@pytest.fixture(scope="module")
def provider(airflow_cli: Any) -> dict[str, Any]:
    found = airflow_cli("get", PACKAGE, "--full")
    assert len(found) == 1
    return dict(found[0])


def test_providers_get_lists_every_part(provider: dict[str, Any]) -> None:
    assert provider["package-name"] == PACKAGE
    assert provider["notifications"] == ["occflow.notifications.conflict.ConflictNotifier"]
    from airflow.sdk import BaseNotifier

    assert issubclass(import_string(provider["notifications"][0]), BaseNotifier)
    assert {"occflow.hooks.spark"} <= set(provider["hooks"][0]["python-modules"])
    assert set(provider["extra-links"]) == {"occflow.operators.links.WriteCommitLink",
                                            "occflow.operators.links.TableHistoryLink"}
    types = {c["connection-type"]: c for c in provider["connection-types"]}
    spark = types["occflow_spark"]
    assert spark["hook-class-name"] == "occflow.hooks.spark.OccflowSparkHook"
    assert {"table_format", "deploy_mode", "catalog_type", "catalog_uri", "warehouse", "conf"} <= set(spark["conn-fields"])
    assert spark["ui-field-behaviour"]["relabeling"]["host"] == "Master or Spark Connect URL"
    # The documentation URL is the docs site's (pyproject's Documentation URL, mkdocs' site_url).
    site = re.search(r"^site_url:\s*(\S+)", (REPO / "mkdocs.yml").read_text(), re.MULTILINE)
    assert site is not None and provider["documentation-url"] == site.group(1)
    # The docs the integration points at are in the repository (mkdocs builds the site from them).
    (integration,) = provider["integrations"]
    assert (REPO / integration["external-doc-url"]).is_file()
    assert all((REPO / page).is_file() for page in integration["how-to-guide"])


def test_maxcompute_is_listed_and_every_named_class_loads(provider: dict[str, Any]) -> None:

    types = {c["connection-type"]: c for c in provider["connection-types"]}
    assert types["occflow_maxcompute"]["hook-class-name"] == MAXCOMPUTE_HOOK
    assert "occflow.hooks.maxcompute" in provider["hooks"][0]["python-modules"]
    assert "occflow.operators.maxcompute" in provider["operators"][0]["python-modules"]
    # The UI plugin is the airflow.plugins entry point, not provider info (see the test below).
    assert not provider.get("plugins")
    named = [c["hook-class-name"] for c in provider["connection-types"]] + list(provider["extra-links"])
    named += provider["notifications"] + [PLUGIN]
    named += [d["class-name"] for d in provider["task-decorators"]]
    for path in named:
        assert import_string(path) is not None, path
    for group in ("hooks", "operators", "sensors", "triggers"):
        for module in provider[group][0]["python-modules"]:
            importlib.import_module(module)


PLUGINS_PROBE = """
import importlib.metadata, json
from airflow import plugins_manager
plugins, errors = plugins_manager._get_plugins()
dists = [d for d in importlib.metadata.distributions() if d.metadata["Name"] == "airflow-provider-occflow"]
print(json.dumps({"loaded": [p.name for p in plugins], "errors": errors, "dists": len(dists)}))
"""


@pytest.mark.parametrize("lazy", ["True", "False"])
def test_the_plugin_is_registered_once_however_providers_are_discovered(tmp_path: Path, lazy: str) -> None:
    """Airflow always loads ``airflow.plugins`` entry points, and provider info's ``plugins``
    only when providers are not discovered lazily: declared in both, every service logged
    "Plugin 'occflow_table_writes' already registered, skipping" (and counted an import error)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({"AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": lazy})
    done = subprocess.run([sys.executable, "-c", PLUGINS_PROBE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["loaded"].count("occflow_table_writes") == 1
    repeats = [source for source, error in found["errors"].items()
               if "occflow_table_writes" in error or "occflow" in source]
    # One distribution (bootstrap removes the build's egg-info beside the sources, which was a
    # second copy whose entry point Airflow loaded again), and no repeat at all.
    assert found["dists"] == 1
    assert repeats == [], repeats


def test_get_provider_info_imports_no_airflow() -> None:
    # Airflow's provider discovery calls it while ``import airflow`` is still running: an Airflow
    # import from here was a circular import that broke ``import occflow.hooks.spark``.
    code = ("import sys; from occflow.provider_info import get_provider_info; info = get_provider_info(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'pyspark', 'odps')); "
            "assert not bad, bad; print(len(info['connection-types']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "2"
    for first in ("occflow.hooks.spark", "occflow.operators.links", "occflow.operators.base"):
        done = subprocess.run([sys.executable, "-c", f"import {first}"], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"import {first} first: {done.stderr[-1500:]}"


@pytest.mark.slow  # five airflow commands, ~6 s of CPU each
def test_airflow_loads_the_notifier_the_form_and_the_links(airflow_cli: Any) -> None:
    """What Airflow made of the registration: each class imported, each form field parsed."""
    notifications = {n["notification_class_name"] for n in airflow_cli("notifications")}
    assert "occflow.notifications.conflict.ConflictNotifier" in notifications
    behaviours = {b["field_behaviours"] for b in airflow_cli("behaviours")}
    assert "occflow_spark" in behaviours
    widgets = {w["connection_parameter_name"]: w for w in airflow_cli("widgets")}
    for field in ("table_format", "deploy_mode", "warehouse", "conf"):
        assert widgets[f"extra__occflow_spark__{field}"]["class"] == "occflow.hooks.spark.OccflowSparkHook"
    links = {x["extra_link_class_name"] for x in airflow_cli("links")}
    assert {"occflow.operators.links.WriteCommitLink", "occflow.operators.links.TableHistoryLink"} <= links
    assert "occflow_maxcompute" in behaviours


# ------------------------------------------------------------------ the connection itself


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, host: str, extra: dict[str, Any]) -> Any:
    from occflow.hooks.spark import OccflowSparkHook

    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                       json.dumps({"conn_type": "occflow_spark", "host": host, "extra": extra}))
    return OccflowSparkHook(conn_id)


def test_form_fields_become_the_spark_config(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _connection(monkeypatch, "occflow_form", "spark://cluster:7077", {
        "table_format": "iceberg", "deploy_mode": "cluster", "catalog_type": "hadoop",
        "warehouse": "s3a://bucket/warehouse", "conf": '{"spark.executor.memory": "2g"}', "app_name": "",
    })
    config = hook.session_config()
    assert config["master"] == "spark://cluster:7077"
    assert config["conf"] == {"spark.executor.memory": "2g", "spark.submit.deployMode": "cluster"}
    assert config["catalog"]["type"] == "hadoop" and config["catalog"]["warehouse"] == "s3a://bucket/warehouse"
    assert config["app_name"] == "occflow"  # a field left empty keeps the default


def test_the_test_button_reaches_a_master_that_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        ok, message = _connection(monkeypatch, "occflow_up", f"spark://127.0.0.1:{port}", {}).test_connection()
    assert ok, message
    assert f"127.0.0.1:{port} accepts connections" in message
    # The same port once nothing listens on it any more.
    ok, message = _connection(monkeypatch, "occflow_down", f"spark://127.0.0.1:{port}", {}).test_connection()
    assert not ok and f"cannot reach 127.0.0.1:{port}" in message


def test_the_test_button_checks_java_for_a_local_master(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = _connection(monkeypatch, "occflow_local", "local[2]", {}).test_connection()
    assert ok, message
    assert message.startswith("master local[2]: ") and "version" in message


def test_the_test_button_names_a_bad_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = _connection(monkeypatch, "occflow_bad", "local[2]", {"table_format": "orc"}).test_connection()
    assert not ok
    assert "occflow_bad" in message and "table_format" in message and "orc" in message
    ok, message = _connection(monkeypatch, "occflow_mode", "yarn", {"deploy_mode": "remote"}).test_connection()
    assert not ok and "deploy_mode must be 'client' or 'cluster'" in message
