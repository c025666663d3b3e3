"""Where the lease store lives: a SQLAlchemy URL from configuration or an Airflow connection.

Resolution order (``resolve_store_url``, the one every component calls: writes, triggers,
sensors, the view, the CLI): an explicit URL; ``OCCFLOW_LEASE_STORE_URL``; the Airflow connection
named by ``OCCFLOW_LEASE_STORE_CONN_ID``; else a SQLite file ``occflow_leases.db`` in
``$AIRFLOW_HOME`` (or ``~/airflow``). ``store_url`` is the part without Airflow (no connection).

A worker records which store it admits in (``announce_store``) so that one left on the
per-machine file while its peers share a store says so. In Airflow's multi-team mode a store
connection scoped to a team is refused (``refuse_team_scoped_store``): the store is one for
every team that writes a table.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError

from .model import AdmissionPriorities, Holder, LeaseStoreError

_log = logging.getLogger(__name__)

URL_ENV = "OCCFLOW_LEASE_STORE_URL"
CONN_ID_ENV = "OCCFLOW_LEASE_STORE_CONN_ID"
#: ``1`` records the store's history (``LeaseStore(history=True)``) in the tasks' stores.
HISTORY_ENV = "OCCFLOW_LEASE_HISTORY"
#: Seconds data writes start ahead of maintenance in the queue (``AdmissionPriorities``).
HEAD_START_ENV = "OCCFLOW_LEASE_DATA_WRITE_HEAD_START"
#: Off turns order-aware admission off for the grants this worker makes (every blocking pair
#: waits, in either order); a lease already recorded as gated is held at its gate whatever it says.
ORDER_AWARE_ENV = "OCCFLOW_ORDER_AWARE_ADMISSION"
#: Off turns admission off in every occflow operator of the process (racing; conflicts are
#: retried by the policy), except for writes that can corrupt data beside a concurrent one.
ADMISSION_ENV = "OCCFLOW_ADMISSION"
#: The spellings every on/off setting accepts (case-insensitive; blank or unset: its default).
SWITCH_VALUES: dict[str, bool] = {
    "on": True, "true": True, "yes": True, "1": True,
    "off": False, "false": False, "no": False, "0": False,
}


class SettingError(LeaseStoreError, ValueError):
    """A worker setting (an environment variable) holds a value it does not take."""


def switch(variable: str, default: bool, env: Mapping[str, str] | None = None) -> bool:
    """The on/off setting ``variable``: on/off, true/false, yes/no or 1/0 in any case, blank or
    unset for ``default``; anything else is a ``SettingError`` naming the variable, never
    silently taken for either."""
    env = os.environ if env is None else env
    raw = env.get(variable)
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value not in SWITCH_VALUES:
        raise SettingError(
            f"{variable}={raw!r} must be on or off (accepted: on/off, true/false, yes/no, 1/0, in any "
            f"case; blank or unset for the default, {'on' if default else 'off'})"
        )
    return SWITCH_VALUES[value]


def admission_switched_off(env: Mapping[str, str] | None = None) -> bool:
    """Whether ``OCCFLOW_ADMISSION`` turns admission off (default: on, each operator's
    ``admission=`` argument decides); a bad value is a ``SettingError`` (a ``ValueError``)."""
    return not switch(ADMISSION_ENV, True, env)


# Airflow connection URIs use conn types as schemes; SQLAlchemy wants dialect+driver.
_SCHEMES = {
    "postgres": "postgresql+psycopg2",
    "postgresql": "postgresql+psycopg2",
    "postgresql+psycopg2": "postgresql+psycopg2",
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
}


def url_from_connection_uri(uri: str) -> str:
    """A SQLAlchemy URL from an Airflow connection URI (``postgres://u:p@h:5432/db``, ``sqlite:///f``)."""
    if not isinstance(uri, str) or "://" not in uri:
        raise LeaseStoreError(
            f"lease store URL {uri!r} is not a URL; use sqlite:///path/to/leases.db or "
            "postgresql://user:password@host:5432/database"
        )
    scheme, rest = uri.split("://", 1)
    dialect = _SCHEMES.get(scheme.lower())
    if dialect is None:
        raise LeaseStoreError(
            f"unsupported lease store {scheme!r} in {uri!r}; supported: SQLite (sqlite:///path) "
            "and PostgreSQL (postgresql://...)"
        )
    if dialect == "sqlite":
        # An Airflow connection keeps a SQLite path as its schema, quoted in its URI
        # (sqlite:///%2Fvar%2Fleases.db): the file is the unquoted path.
        rest = unquote(rest)
    return f"{dialect}://{rest}"


def default_url(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    home = Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return f"sqlite:///{home / 'occflow_leases.db'}"


def store_url(url: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The store URL from an explicit value, the environment, or the embedded default."""
    env = os.environ if env is None else env
    if url:
        return url_from_connection_uri(url)
    if env.get(URL_ENV):
        return url_from_connection_uri(env[URL_ENV])
    return default_url(env)


def store_options(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``LeaseStore`` options from the environment: history, order-aware admission and the data
    writes' head start."""
    env = os.environ if env is None else env
    options: dict[str, Any] = {"history": env.get(HISTORY_ENV, "").strip().lower() in ("1", "true", "yes")}
    options["order_aware"] = switch(ORDER_AWARE_ENV, True, env)
    raw = env.get(HEAD_START_ENV, "").strip()
    if raw:
        try:
            head_start = float(raw)
        except ValueError:
            head_start = -1.0
        if not 0 <= head_start < float("inf"):
            raise LeaseStoreError(f"{HEAD_START_ENV}={raw!r} must be a number of seconds >= 0 (e.g. 1800)")
        options["priorities"] = AdmissionPriorities(data_write_head_start=head_start)
    return options


def resolve_store_url(
    url: str | None = None, conn_id: str | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The store URL as the Airflow layer resolves it.

    An explicit ``url``, else ``OCCFLOW_LEASE_STORE_URL``, else the Airflow connection
    ``conn_id`` (or ``OCCFLOW_LEASE_STORE_CONN_ID``) read through Airflow's secrets backends
    (so ``AIRFLOW_CONN_<ID>`` works), else the SQLite file in ``$AIRFLOW_HOME``.
    """
    env = os.environ if env is None else env
    if url or env.get(URL_ENV):
        return store_url(url, env)
    conn_id = conn_id or env.get(CONN_ID_ENV)
    if conn_id:
        if _multi_team_mode():
            # Before reading it: a team's copy may shadow it, or only its team may read it.
            refuse_team_scoped_store(conn_id, env, True, _stored_connection_team(conn_id))
        try:
            uri = _connection_uri(conn_id)
        except Exception as exc:  # Airflow raises its own not-found type; name the id either way
            raise LeaseStoreError(f"cannot read the lease store connection {conn_id!r}: {exc}") from exc
        return url_from_connection_uri(uri)
    return default_url(env)


# ------------------------------------------------------------------ one store for every team
# In Airflow's multi-team mode a connection can be scoped to a team: a team-namespaced variable
# AIRFLOW_CONN__<TEAM>___<CONN_ID> shadows the global one for that team's tasks, and a connection
# stored with a team is shown to that team only. A lease store named that way is a store per team:
# leases in one do not hold back writes admitted in another, so two teams' conflicting writes to
# one table would run together. occflow refuses it (an error before any write, not a warning read
# after the damage): the store connection is one for every team.

#: Airflow's prefix of a team-namespaced connection variable (``AIRFLOW_CONN__<TEAM>___<ID>``).
TEAM_CONN_PREFIX = "AIRFLOW_CONN__"
#: Airflow's separator between the team and the connection id in such a variable.
TEAM_CONN_SEPARATOR = "___"


class TeamScopedStoreError(LeaseStoreError):
    """The lease store connection is scoped to a team (Airflow multi-team): a store per team."""


def team_scoped_variables(conn_id: str, env: Mapping[str, str]) -> dict[str, str]:
    """The team-namespaced variables defining connection ``conn_id``: variable name -> team (as
    spelled in the variable, upper case)."""
    suffix = TEAM_CONN_SEPARATOR + conn_id.upper()
    found = {}
    for name in env:
        if name.startswith(TEAM_CONN_PREFIX) and name.endswith(suffix):
            team = name[len(TEAM_CONN_PREFIX) : -len(suffix)]
            if team:
                found[name] = team
    return found


def refuse_team_scoped_store(
    conn_id: str, env: Mapping[str, str], multi_team: bool, stored_team: str | None = None
) -> None:
    """Raise ``TeamScopedStoreError`` when, in multi-team mode, the store connection ``conn_id``
    is scoped to a team: a team-namespaced variable defines it, or the stored connection has a
    team (``stored_team``). Outside multi-team mode Airflow reads neither, so neither counts."""
    if not multi_team:
        return
    why = (
        "leases in one store do not hold back writes admitted in another, so two teams' conflicting "
        f"writes to one table would run together. Keep one store connection for every team: define "
        f"{conn_id!r} without a team (AIRFLOW_CONN_{conn_id.upper()}, or a connection with no team) on "
        "every worker, the triggerer and the api-server"
    )
    variables = team_scoped_variables(conn_id, env)
    if variables:
        named = ", ".join(f"{name} (team {team})" for name, team in sorted(variables.items()))
        raise TeamScopedStoreError(
            f"the lease store connection {conn_id!r} ({CONN_ID_ENV}) is scoped to a team by {named}: that "
            f"team's writes would admit in another store than every other team's; {why}, and remove "
            f"{', '.join(sorted(variables))}."
        )
    if stored_team:
        raise TeamScopedStoreError(
            f"the lease store connection {conn_id!r} ({CONN_ID_ENV}) belongs to team {stored_team!r} in "
            f"Airflow's metadata: only that team's writes can read it, and a store of their own for the "
            f"other teams would split admission; {why}."
        )


def _multi_team_mode() -> bool:
    from airflow.configuration import conf

    return bool(conf.getboolean("core", "multi_team", fallback=False))


def _stored_connection_team(conn_id: str) -> str | None:
    """The team of connection ``conn_id`` in Airflow's metadata DB, where this process reads it
    (the CLI, the api-server's view, ``dag.test()``); a task reads no metadata DB (its team's
    connections come through the API server, which hides other teams'), so ``None`` there."""
    if _in_airflow_task():
        return None
    from airflow.models.connection import Connection as StoredConnection

    try:
        return StoredConnection.get_team_name(conn_id)
    except sa.exc.SQLAlchemyError:  # no metadata DB here (a script with an env connection): nothing to read
        return None


def _connection_uri(conn_id: str) -> str:
    """The URI of Airflow connection ``conn_id``, through the secrets backends Airflow gives
    this process: a task's (the Task SDK, through its supervisor), else the server side's (the
    metadata database too: the api-server's view, the CLI)."""
    if _in_airflow_task():
        from airflow.sdk import Connection

        return str(Connection.get(conn_id).get_uri())
    from airflow.models.connection import Connection as StoredConnection

    # Deprecated for tasks, which the branch above serves; outside a task the Task SDK's
    # Connection reads no metadata database, and a connection made in the UI lives there.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return str(StoredConnection.get_connection_from_secrets(conn_id).get_uri())


# ----------------------------------------------------------------- which store a worker uses
# A worker that misses the store setting admits against its own SQLite file and grants leases the
# shared store's workers never see. Nothing in one store can show that, so each write's worker
# records the store it used in the one thing every worker shares, the Airflow metadata (one
# Variable per store), and compares with the records of the others.

#: Prefix of the Airflow Variables recording which stores workers use (one per store fingerprint:
#: a worker only ever writes its own store's, so two workers never overwrite each other's record).
IDENTITY_VARIABLE_PREFIX = "occflow_lease_store."
#: How long a peer's record counts: a worker that wrote on its own file a day ago is still a risk.
PEER_WINDOW_SECONDS = 24 * 3600.0
#: A worker rewrites its own record at most this often (a Variable read per write, a write rarely).
REFRESH_SECONDS = 300.0


@dataclass(frozen=True)
class StoreIdentity:
    """Which store a worker admits in, without its secrets: ``fingerprint`` is a hash of the
    location (a SQLite file: the host and the resolved path, since the file is this machine's; a
    server: the URL without its password); ``per_machine_default`` says the store is the SQLite
    file in ``$AIRFLOW_HOME`` taken because nothing named a store."""

    fingerprint: str
    store: str
    per_machine_default: bool
    host: str

    def describe(self) -> str:
        why = " (the per-machine default: no OCCFLOW_LEASE_STORE_CONN_ID or URL set)" if self.per_machine_default else ""
        return f"{self.store} [{self.fingerprint}]{why}"


def store_identity(url: str, env: Mapping[str, str] | None = None, host: str | None = None) -> StoreIdentity:
    """The identity of the store at ``url`` as this machine (``host``) reaches it."""
    env = os.environ if env is None else env
    host = host or socket.gethostname()
    full = url_from_connection_uri(url)
    try:
        parsed = make_url(full)
    except (ArgumentError, ValueError) as exc:
        raise LeaseStoreError(f"malformed lease store URL {url!r}: {exc}") from None
    default = False
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "").resolve()
        location = shown = f"sqlite://{host}{path}"
        configured = env.get(URL_ENV) or env.get(CONN_ID_ENV)
        default = not configured and path == Path(default_url(env).removeprefix("sqlite:///")).resolve()
    else:
        # Masked, the password reads "***" whatever it is: a rotated password is the same store.
        location = shown = parsed.render_as_string(hide_password=True)
    fingerprint = hashlib.sha256(location.encode()).hexdigest()[:16]
    return StoreIdentity(fingerprint=fingerprint, store=shown, per_machine_default=default, host=host)


def diverging_peers(
    mine: StoreIdentity, records: Iterable[Mapping[str, Any]], now: float, window: float = PEER_WINDOW_SECONDS
) -> list[Mapping[str, Any]]:
    """The recent records of another store where one side is a per-machine default file: that
    pair admits conflicting writes side by side. Two configured stores may differ on purpose (a
    store for other tables, ``lease_store_url=`` per operator) and are not reported; a store scoped to
    a team by Airflow's multi-team connections is refused before this (``refuse_team_scoped_store``)."""
    return [
        r for r in records
        if r.get("fingerprint") != mine.fingerprint
        and now - float(r.get("at") or 0.0) <= window
        and (mine.per_machine_default or bool(r.get("per_machine_default")))
    ]


def divergence_message(mine: StoreIdentity, holder: str, peers: Iterable[Mapping[str, Any]]) -> str:
    """The warning a worker logs (and its write reports) when ``peers`` use another store."""
    seen = "; ".join(
        f"{p.get('holder') or 'a write'} on host {p.get('host')} used {p.get('store')} [{p.get('fingerprint')}]"
        + (" (a per-machine default file)" if p.get("per_machine_default") else "")
        + f" at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(float(p.get('at') or 0.0)))}"
        for p in peers
    )
    return (
        f"lease store mismatch: {holder} on host {mine.host} admits in {mine.describe()}, but {seen}. "
        "Leases in one store do not hold back writes admitted in another: conflicting writes can run "
        f"together. Set the same {CONN_ID_ENV} (or {URL_ENV}) on every worker, the triggerer and the api-server."
    )


def _in_airflow_task() -> bool:
    # Only a task process talks to the Airflow metadata (through its supervisor); anywhere else
    # (a script, the CLI, a test's own LeaseKeeper) there are no peers to compare with.
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(runner, "SUPERVISOR_COMMS", None) is not None


def announce_store(
    url: str, holder: Holder, log: logging.Logger | None = None, env: Mapping[str, str] | None = None
) -> tuple[StoreIdentity, str | None]:
    """Record in the Airflow metadata that this worker admits in the store at ``url``, and warn
    (on ``log``, at WARNING, naming both stores) if a peer recently admitted in another store
    while one of the two is a per-machine default file. Returns this store's identity and the
    warning, if any. Outside an Airflow task, or if the metadata cannot be reached, only the
    identity: the write must not fail for a check about other writes."""
    mine = store_identity(url, env)
    if not _in_airflow_task():
        return mine, None
    from airflow.sdk import Variable

    now = time.time()
    try:
        records: list[Mapping[str, Any]] = []
        for key in Variable.keys(prefix=IDENTITY_VARIABLE_PREFIX):
            value = Variable.get(key, default=None)
            record = _record_of(value)
            if record is not None:
                records.append(record)
        own = next((r for r in records if r.get("fingerprint") == mine.fingerprint and r.get("host") == mine.host), None)
        if own is None or now - float(own.get("at") or 0.0) > REFRESH_SECONDS:
            record = {**asdict(mine), "holder": _task_of(holder), "pid": os.getpid(), "at": now}
            Variable.set(f"{IDENTITY_VARIABLE_PREFIX}{mine.fingerprint}", json.dumps(record, sort_keys=True))
    except Exception as exc:  # the metadata is someone else's service: its failure is only noted
        (log or _log).info("could not compare the lease store with its peers' (Airflow Variables): %s", exc)
        return mine, None
    peers = diverging_peers(mine, records, now)
    if not peers:
        return mine, None
    message = divergence_message(mine, _task_of(holder), peers)
    (log or _log).warning("%s", message)
    return mine, message


def _task_of(holder: Holder) -> str:
    return f"{holder.dag_id}.{holder.task_id} (run {holder.run_id})" if holder.dag_id else "a script"


def _record_of(value: object) -> Mapping[str, Any] | None:
    # A record another version (or a person) wrote malformed is skipped, not trusted.
    try:
        record = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("fingerprint"), str) else None


def make_engine(url: str, *, existing: bool = False) -> Engine:
    """An engine set up for lease decisions on SQLite (WAL, BEGIN IMMEDIATE) or PostgreSQL.
    ``existing``: the SQLite file must exist already."""
    full = url_from_connection_uri(url)
    try:
        parsed = make_url(full)
    except (ArgumentError, ValueError) as exc:
        raise LeaseStoreError(f"malformed lease store URL {url!r}: {exc}") from None
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        if database in ("", ":memory:") or database.startswith("file:"):
            raise LeaseStoreError(
                "the SQLite lease store must be a file shared by all workers (sqlite:///path/to/leases.db), "
                "not an in-memory database"
            )
        check_sqlite_path(Path(database), existing=existing)
        engine = sa.create_engine(parsed, connect_args={"timeout": 60})
        _sqlite_immediate(engine)
        return engine
    return sa.create_engine(parsed, pool_pre_ping=True, pool_size=2, max_overflow=4)


def check_sqlite_path(path: Path, *, existing: bool = False) -> None:
    """Refuse a SQLite store path that cannot be (or should not become) a store, before SQLite
    creates anything: a typo'd directory must not silently become a new, empty store that
    grants every lease (the workers on the right path would never see its leases)."""
    where = f"the SQLite lease store {str(path)[:300]!r}"
    if "\x00" in str(path):
        raise LeaseStoreError(f"{where} is not a path (it holds a NUL character)")
    try:
        resolved = path.resolve()
        if resolved.parts[1:2] in (("proc",), ("sys",), ("dev",)):
            raise LeaseStoreError(f"{where} is on /{resolved.parts[1]}, a virtual file system, not a place for a database")
        parent = path.parent
        if not parent.is_dir():
            raise LeaseStoreError(
                f"{where} is in a directory that does not exist ({str(parent)[:300]!r}); create the directory, "
                "or fix the path in the store URL (sqlite:////absolute/path/to/leases.db)"
            )
        if path.exists() and not path.is_file():
            raise LeaseStoreError(f"{where} is not a regular file")
        if not path.exists():
            if existing:
                raise LeaseStoreError(
                    f"{where} does not exist; check the store URL (--store, {URL_ENV}) or AIRFLOW_HOME"
                )
            if not os.access(parent, os.W_OK | os.X_OK):
                raise LeaseStoreError(f"{where} cannot be created: {str(parent)[:300]!r} is not a writable directory")
    except OSError as exc:  # a name too long, a directory we may not look into
        raise LeaseStoreError(f"{where} cannot be used: {exc.strerror or exc}") from None


def _sqlite_immediate(engine: Engine) -> None:
    """Every transaction starts with BEGIN IMMEDIATE: it holds the write lock from its first read.

    pysqlite's own transaction handling is switched off so SQLAlchemy's BEGIN is the one sent.
    """

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
