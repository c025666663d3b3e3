"""Lease store fixtures: a real PostgreSQL server (scripts/postgres.sh) and SQLite files."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a throwaway PostgreSQL server, started once per test session."""
    if os.environ.get("OCCFLOW_TEST_PG_URL"):
        yield os.environ["OCCFLOW_TEST_PG_URL"]
        return
    # Not under pytest's 0700 tmp dirs: the server runs as the `postgres` user when we are root.
    directory = tempfile.mkdtemp(prefix="occflow-pg-")
    os.chmod(directory, 0o755)
    env = {**os.environ, "OCCFLOW_PG_DIR": directory}
    script = str(REPO / "scripts" / "postgres.sh")
    done = subprocess.run(["bash", script, "start"], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        pytest.fail(f"scripts/postgres.sh could not start PostgreSQL:\n{done.stdout}\n{done.stderr}")
    try:
        yield done.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", script, "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh database on the server for one test."""
    import psycopg2

    name = f"occflow_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(pg_server)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    base = pg_server.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'leases.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs on both backends."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    return str(request.getfixturevalue("pg_url"))
