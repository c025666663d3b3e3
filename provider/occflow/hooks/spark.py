"""``occflow_spark`` connections: where a write job's Spark session comes from.

A connection names a master URL (``local[2]``, ``spark://host:7077``, ``yarn``) in its host or a
Spark Connect URL (``sc://host:15002``), and in its extras the keys of
``occflow.engines.spark.SparkConfig``: ``table_format``, ``conf`` (Spark conf), ``catalog`` (the
table format's catalog settings), ``jars``, ``home``, ``app_name``. The connection form's own
fields (``CONNECTION_FIELDS``) are flat extras mapped onto those: ``deploy_mode`` into
``conf["spark.submit.deployMode"]``, ``catalog_type`` / ``catalog_uri`` / ``warehouse`` into
``catalog``. The default connection id
maps to the embedded local session (``local[2]``, an Iceberg JDBC catalog on SQLite and a local
warehouse under ``$OCCFLOW_HOME``) when no such connection is defined, so the example DAGs run
on a laptop.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret

from ..core.secrets import secret_values

# The embedded default's places, public here as before (the DAGs and docs import them from the hook).
from ..engines.deltars.location import default_delta_location as default_delta_location
from ..engines.deltars.location import delta_warehouse as delta_warehouse
from ..engines.home import embedded_home as embedded_home
from ..engines.spark import SparkConfig, SparkConfigError
from .extras import MAX_DEPTH, connection_extras, nesting_depth
from .forms import SPARK_CONN_TYPE, SPARK_CONNECTION_FIELDS, SPARK_FIELD_BEHAVIOUR

DEFAULT_CONN_ID = "occflow_spark_default"
CONN_TYPE = SPARK_CONN_TYPE
CONNECTION_FIELDS = SPARK_CONNECTION_FIELDS
FIELD_BEHAVIOUR = SPARK_FIELD_BEHAVIOUR

# The form's flat fields and where they go in ``SparkConfig``.
_CATALOG_FIELDS = {"catalog_type": "type", "catalog_uri": "uri", "warehouse": "warehouse"}
_FORM_PREFIX = f"extra__{CONN_TYPE}__"  # how older Airflow UIs stored form fields
#: Seconds a connection test waits for a master or Spark Connect server to accept a connection.
TEST_TIMEOUT = 5.0


def config_from_connection(host: str | None, extras: Mapping[str, Any]) -> dict[str, Any]:
    """A Spark config dict from a connection's host and extras, validated by ``SparkConfig``."""
    data: dict[str, Any] = {}
    for raw_key, value in extras.items():
        key = raw_key[len(_FORM_PREFIX):] if raw_key.startswith(_FORM_PREFIX) else raw_key
        if value is None or value == "":  # a form field left empty: not set
            continue
        # The UI stores nested extras as JSON text.
        data[key] = _json_field(key, value) if key in ("conf", "catalog", "jars") and isinstance(value, str) else value
    deploy_mode = data.pop("deploy_mode", None)
    if deploy_mode is not None:
        if deploy_mode not in ("client", "cluster"):
            raise SparkConfigError(f"deploy_mode must be 'client' or 'cluster', got {deploy_mode!r}")
        data["conf"] = {**(data.get("conf") or {}), "spark.submit.deployMode": deploy_mode}
    flat = {target: data.pop(field) for field, target in _CATALOG_FIELDS.items() if field in data}
    if flat:
        data["catalog"] = {**(data.get("catalog") or {}), **flat}
    if host and "master" not in data and "remote" not in data:
        data["remote" if host.startswith("sc:") else "master"] = host
    return SparkConfig.from_dict(data).to_dict()


def mask_config_secrets(config: Mapping[str, Any]) -> None:
    """Hide the values of the config's secret settings (``core.secrets``: an S3 secret key, a
    catalog token) in every log line of this task. Airflow masks a connection's extras by its own
    list of names, which misses ``conf`` stored as JSON text and names such as ``...account.key``."""
    for value in secret_values(config):
        mask_secret(value)


def _json_field(key: str, value: str) -> Any:
    if nesting_depth(value) > MAX_DEPTH:
        raise SparkConfigError(f"extra {key!r} nests deeper than {MAX_DEPTH} levels: not a Spark setting")
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise SparkConfigError(f"extra {key!r} must be JSON ({exc.msg} at character {exc.pos}): {value!r}") from None


def reachable(url: str, timeout: float = TEST_TIMEOUT) -> tuple[bool, str]:
    """Whether a ``spark://host:port`` / ``sc://host:port`` server accepts a TCP connection."""
    parts = urlsplit(url)
    default_port = 15002 if parts.scheme == "sc" else 7077
    try:
        port = parts.port or default_port
    except ValueError:
        return False, f"{url!r} has no valid port"
    host = parts.hostname
    if not host:
        return False, f"{url!r} names no host"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, f"{host}:{port} accepts connections"
    except OSError as exc:
        return False, f"cannot reach {host}:{port} ({exc})"


def java_version() -> tuple[bool, str]:
    """Whether a local session can start: a ``java`` on PATH (or in ``$JAVA_HOME``) that runs."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home and Path(home, "bin", "java").exists() else shutil.which("java")
    if java is None:
        return False, "no java on PATH and no $JAVA_HOME: a local Spark session needs Java 17"
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{java} -version failed: {exc}"
    if done.returncode != 0:
        return False, f"{java} -version exited {done.returncode}: {done.stderr.strip()[:200]}"
    first = (done.stderr or done.stdout).strip().splitlines()
    return True, first[0] if first else java


class OccflowSparkHook(BaseHook):
    """Reads an ``occflow_spark`` connection into the config the Spark engine starts from."""

    conn_name_attr = "occflow_spark_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "occflow Spark"

    def __init__(self, occflow_spark_conn_id: str = DEFAULT_CONN_ID) -> None:
        super().__init__()
        self.conn_id = occflow_spark_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """``FIELD_BEHAVIOUR`` in the hook method's spelling (snake_case keys)."""
        return {
            "hidden_fields": list(FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(FIELD_BEHAVIOUR["placeholders"]),
        }

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button: the connection's settings are a valid Spark config, and what
        it names can be reached: a ``spark://`` master or a Spark Connect server accepts a TCP
        connection, a ``local`` master has a Java that runs, ``yarn`` has its Hadoop config
        directory. Nothing is started and nothing is written."""
        try:
            config = self.session_config()
        except (SparkConfigError, AirflowNotFoundException) as exc:
            return False, str(exc)
        described = f"table_format={config['table_format']}"
        if config.get("remote"):
            ok, said = reachable(config["remote"])
            return ok, f"Spark Connect {config['remote']}: {said} ({described})"
        master = str(config["master"])
        if master.startswith("local"):
            ok, said = java_version()
            return ok, f"master {master}: {said} ({described})"
        if master.startswith("spark://"):
            ok, said = reachable(master)
            return ok, f"master {master}: {said} ({described})"
        if master == "yarn":
            conf_dir = os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")
            if not conf_dir or not Path(conf_dir).is_dir():
                return False, "master yarn: set HADOOP_CONF_DIR (or YARN_CONF_DIR) to the cluster's config directory"
            return True, f"master yarn: cluster config in {conf_dir} ({described})"
        return True, f"master {master}: settings are valid; this master is not probed ({described})"

    def session_config(self) -> dict[str, Any]:
        """The config for this connection; the embedded default when the default id is undefined."""
        try:
            conn = self.get_connection(self.conn_id)
        except AirflowNotFoundException:
            if self.conn_id == DEFAULT_CONN_ID:
                return SparkConfig().to_dict()
            raise
        try:
            config = config_from_connection(conn.host, connection_extras(conn, self.conn_id))
        except SparkConfigError as exc:  # say which connection's extras (or host) to mend
            raise SparkConfigError(f"connection {self.conn_id!r} (host or extras): {exc}", exc.problems) from None
        mask_config_secrets(config)
        return config
