"""The "Table writes" FastAPI app, mounted by the api-server under ``/occflow``.

Every route sits behind Airflow's own authentication and authorization (a plugin's FastAPI app
is not protected by default): the app-wide dependency ``requires_reading_dags`` resolves the
user from the ``Authorization: Bearer`` JWT or the UI's session cookie (401 without one, 403 for
an invalid token, a user who may read no DAG, or a ``dag_id`` the user may not read), and every
row is then limited to the DAGs the user may read. A lease the store cannot name a DAG for is
shown only to a user who may read every DAG. The view only reads; releasing a lease needs edit
(``PUT``) permission on the holder's DAG.

Routes (under the mount prefix):

- ``GET /``: the HTML page (filters ``dag_id``, ``table``; ``run_id`` / ``task_id`` /
  ``map_index`` focus one task instance's write: the task instance view links there);
- ``GET /api/tables``: per table, the live leases and the waiting queue;
- ``GET /api/timeline``: recent writes with their lost attempts (kind, winner, seconds),
  wasted seconds and lease (waited, held), and leases no write report claims;
- ``GET /api/write``: one task instance's write (``dag_id``, ``run_id``, ``task_id``, ``map_index``);
- ``POST /api/leases/{lease_id}/release``: let a lease go (edit permission on its DAG).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache
from typing import Annotated, Any

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagDetails
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_dag
from airflow.models.dag import DagModel
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse

from ..core.errors import OccflowError
from ..leases import LeaseStore, LeaseStoreError, resolve_store_url
from . import data, page

#: Where the api-server mounts the app; the UI's external views link under it.
URL_PREFIX = "/occflow"


@lru_cache(maxsize=4)
def _store_at(url: str) -> LeaseStore:
    # create=False: the view never writes the store's schema; a store no write made yet is an error shown.
    return LeaseStore.from_url(url, create=False)


def lease_store() -> tuple[LeaseStore | None, str, str | None]:
    """The store the workers use (same resolution: ``OCCFLOW_LEASE_STORE_URL``, the connection in
    ``OCCFLOW_LEASE_STORE_CONN_ID``, else SQLite in ``$AIRFLOW_HOME``), its masked URL, or the error."""
    try:
        store = _store_at(resolve_store_url())
    except LeaseStoreError as exc:
        return None, "", str(exc)
    return store, store.engine.url.render_as_string(hide_password=True), None


@dataclass(frozen=True)
class Reader:
    """What one user may read: the DAGs, one by one, and whether every DAG (the auth manager,
    asked about no DAG in particular, says yes, and every DAG Airflow knows is among the user's:
    a viewer limited to a team's DAGs is not a reader of every DAG). Only a reader of every DAG
    sees the lease spans no DAG can be named for: they may belong to any DAG."""

    readable: data.Readable
    every_dag: bool


def _reader(user: Any) -> Reader:
    manager = get_auth_manager()
    readable = manager.get_authorized_dag_ids(user=user, method="GET")
    # Asked about no DAG in particular, an auth manager may say yes to a user limited by team
    # (the simple auth manager with ``multi_team``): every DAG is every DAG Airflow knows.
    every_dag = bool(manager.is_authorized_dag(method="GET", user=user)) and _all_dag_ids() <= readable
    return Reader(readable=readable.__contains__, every_dag=every_dag)


def _all_dag_ids() -> set[str]:
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        return set(session.scalars(select(DagModel.dag_id)))


def requires_reading_dags(request: Request, user: GetUserDep) -> None:
    """The app-wide check: a request that names a DAG (``?dag_id=``) gets Airflow's own check on
    that DAG; any other request needs a user who may read some DAG (every row it gets is then
    limited to those). ``requires_access_dag("GET")`` alone asks about no DAG in particular,
    which an auth manager with per-DAG permissions grants only to readers of every DAG."""
    if request.query_params.get("dag_id"):
        requires_access_dag("GET")(request, user)
        return
    manager = get_auth_manager()
    if manager.is_authorized_dag(method="GET", user=user) or manager.get_authorized_dag_ids(user=user, method="GET"):
        return
    raise HTTPException(status.HTTP_403_FORBIDDEN, "the Table writes view needs permission to read at least one DAG")


def _may_edit(user: Any, dag_id: str | None) -> bool:
    team = DagModel.get_team_name(dag_id) if dag_id else None
    return bool(
        get_auth_manager().is_authorized_dag(method="PUT", details=DagDetails(id=dag_id, team_name=team), user=user)
    )


def _filters(dag_id: str | None, table: str | None, limit: int, run_id: str | None = None) -> data.Filters:
    try:
        filters = data.Filters(
            dag_id=dag_id or None, table=(table or "").strip() or None, limit=limit, run_id=run_id or None
        )
        filters.table_key  # noqa: B018 - a malformed table name fails here, named in the 400
    except (ValueError, OccflowError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"bad filter: {exc}") from exc
    return filters


#: The largest map index a task instance can have (Airflow stores it as a 32-bit integer).
MAX_MAP_INDEX = 2**31 - 1
#: What the UI leaves in the link of a task instance that is not mapped.
UNMAPPED = ("", "{MAP_INDEX}", "-1")


def map_index_of(text: str | None) -> int:
    """The map index a query names: ``-1`` (not mapped, also for the UI's unfilled
    ``{MAP_INDEX}``) or ``0..MAX_MAP_INDEX``; anything else is a 400 that says what is right."""
    if text is None or text.strip() in UNMAPPED:
        return -1
    value = text.strip()
    if value.isascii() and value.isdigit() and len(value) <= 10 and int(value) <= MAX_MAP_INDEX:
        return int(value)
    raise HTTPException(
        status.HTTP_400_BAD_REQUEST,
        f"map_index must be -1 (not mapped) or a whole number from 0 to {MAX_MAP_INDEX}, got {value[:40]!r}",
    )


def _focus(dag_id: str | None, run_id: str | None, task_id: str | None, map_index: str | None) -> dict[str, Any] | None:
    index = map_index_of(map_index)  # checked even when the focus is incomplete: a bad value is never ignored
    if not (dag_id and run_id and task_id):
        return None
    return {"dag_id": dag_id, "run_id": run_id, "task_id": task_id, "map_index": index}


DagFilter = Annotated[str | None, Query(description="only this DAG's writes and leases")]
TableFilter = Annotated[str | None, Query(description="only this table (any spelling of its name)")]
Limit = Annotated[int, Query(ge=1, le=data.MAX_LIMIT, description="at most this many timeline entries")]


def _tables(
    store: LeaseStore | None, reader: Reader, filters: data.Filters, writes: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    if store is None:
        return [], None
    writes = writes or []
    known = frozenset(w["table_key"] for w in writes if w.get("table_key") and filters.wants_table(w["table"]))
    try:
        return data.live_tables(store, reader.readable, replace(filters, locations=known),
                                data.table_names(writes)), None
    except LeaseStoreError as exc:
        return [], str(exc)


router = APIRouter()


@router.get("/api/tables")
def tables(user: GetUserDep, dag_id: DagFilter = None, table: TableFilter = None) -> dict[str, Any]:
    store, url, error = lease_store()
    found, read_error = _tables(store, _reader(user), _filters(dag_id, table, 1))
    return {"store": url, "store_error": error or read_error, "tables": found}


@router.get("/api/timeline")
def timeline(
    user: GetUserDep,
    session: SessionDep,
    dag_id: DagFilter = None,
    table: TableFilter = None,
    limit: Limit = 200,
    run_id: Annotated[str | None, Query(description="only this DAG run's writes")] = None,
) -> dict[str, Any]:
    store, url, error = lease_store()
    reader = _reader(user)
    result = data.timeline(store, session, reader.readable, _filters(dag_id, table, limit, run_id),
                           reads_every_dag=reader.every_dag)
    return {"store": url, "store_error": error, **result}


@router.get("/api/write")
def write(
    user: GetUserDep, session: SessionDep, dag_id: str, run_id: str, task_id: str, map_index: str = "-1"
) -> dict[str, Any]:
    focus = _focus(dag_id, run_id, task_id, map_index)
    store, _url, _error = lease_store()
    reader = _reader(user)
    found = data.timeline(store, session, reader.readable, _filters(dag_id, None, data.MAX_LIMIT), focus,
                          reads_every_dag=reader.every_dag)["entries"]
    if not found:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no occflow write for {dag_id}.{task_id} in run {run_id}")
    entry: dict[str, Any] = found[0]
    return entry


@router.post("/api/leases/{lease_id}/release")
def release(
    lease_id: str,
    user: GetUserDep,
    x_occflow_action: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    # A custom header: a cross-site form cannot send it, so a session cookie alone cannot release.
    if x_occflow_action != "release":
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "send the header X-Occflow-Action: release")
    store, _url, error = lease_store()
    if store is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, error)
    held = next((lease for lease in store.leases(include_expired=True) if lease.lease_id == lease_id), None)
    if held is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no lease {lease_id!r} (released, reclaimed or never granted)")
    if not _may_edit(user, held.holder.dag_id or None):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "releasing a lease needs edit permission on its DAG")
    return {"lease_id": lease_id, "table": held.table, "released": store.release(lease_id)}


@router.get("/", response_class=HTMLResponse)
def view(
    user: GetUserDep,
    session: SessionDep,
    dag_id: DagFilter = None,
    table: TableFilter = None,
    limit: Limit = 200,
    run_id: str | None = None,
    task_id: str | None = None,
    map_index: str | None = None,
) -> HTMLResponse:
    focus = _focus(dag_id, run_id, task_id, map_index)
    filters = _filters(dag_id, table, limit, run_id)
    store, url, error = lease_store()
    reader = _reader(user)
    result = data.timeline(store, session, reader.readable, filters, reads_every_dag=reader.every_dag)
    writes = [e for e in result["entries"] if e["kind"] == "write"]
    # The live leases of the tables the reports name, by the locations those reports carry.
    found, read_error = _tables(store, reader, filters, writes)
    html = page.render(
        {
            "base": URL_PREFIX,
            "filters": filters,
            "tables": found,
            "store_url": url or "not configured",
            "store_error": error or read_error,
            "can_release": _may_edit(user, None),
            "focus": focus,
            "dag_ids": sorted({e["dag_id"] for e in writes}),
            "table_names": sorted({e["table"] for e in result["entries"] if e.get("table")}),
            "now": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            **result,
        }
    )
    return HTMLResponse(html)


@router.get("/write", response_class=HTMLResponse)
def task_write(
    user: GetUserDep, session: SessionDep, dag_id: str, run_id: str, task_id: str, map_index: str = "-1"
) -> HTMLResponse:
    """The task instance view: the page filtered to the task's DAG, its write highlighted."""
    return view(user, session, dag_id=dag_id, table=None, limit=data.MAX_LIMIT, run_id=run_id,
                task_id=task_id, map_index=map_index)


def create_app() -> FastAPI:
    """The app: every route needs a user who may read DAGs (``requires_reading_dags``)."""
    app = FastAPI(
        title="occflow: table writes",
        description="Live leases, waiting writes and the conflicts of recent writes, per table.",
        dependencies=[Depends(requires_reading_dags)],
        # No unauthenticated schema or docs pages: every route of the app needs a user.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.include_router(router)
    return app


app = create_app()
