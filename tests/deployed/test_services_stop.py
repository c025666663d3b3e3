"""The main command and its deployed mode stop every service they started when interrupted (issue 26).

``scripts/run_deployed.py`` runs as a user runs it; the test interrupts it with a signal sent to
its pid (``kill -INT``, ``kill -TERM``) and then looks for what it had started: the processes
below it (Redis, the Spark master and workers, Airflow's migration or services, each the leader
of its own session) and the PostgreSQL server, which ``pg_ctl`` detaches, found by its
``postmaster.pid``. Each of them must be gone, with every member of its session, soon after.

Two moments: once the services are up, with a second Ctrl-C while the launcher is stopping them
(the stop must not be cut short); and while PostgreSQL is still starting (the launcher does not
know its URL yet, the server runs all the same).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT = 300  # PostgreSQL, Redis and two Spark workers while Airflow migrates, on a loaded 2-core box
STOP_TIMEOUT = 90  # stop_all's 30 s grace, then pg_ctl's fast stop


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, session id) of a live process, None once it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    if fields[0] == "Z":
        return None
    return int(fields[1]), int(fields[3])


def _live() -> dict[int, tuple[int, int]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _stat(int(entry.name))
            if found is not None:
                out[int(entry.name)] = found
    return out


def _descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, with its command line."""
    live = _live()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (ppid, _) in live.items() if ppid in frontier and pid not in found}
        found |= frontier
    out = {}
    for pid in found:
        with contextlib.suppress(OSError):
            out[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return out


def _postmaster(tmp: Path) -> int | None:
    """The PostgreSQL server's pid (initdb's bootstrap backend writes a negative one: not a server)."""
    for pidfile in tmp.glob("occflow-deployed-pg-*/data/postmaster.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int(pidfile.read_text().split()[0])
            if pid > 0:
                return pid
    return None


def _wait(
    what: str, check: Callable[[], bool], timeout: float, launcher: subprocess.Popen[bytes], log: Path
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if launcher.poll() is not None:
            ended = launcher.returncode
            pytest.fail(f"the launcher ended ({ended}) before {what}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not after {timeout}s:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)


@pytest.fixture
def tmp_world() -> Iterator[Path]:
    """The launcher's TMPDIR: its PostgreSQL directory lands here (reachable by the postgres user)."""
    tmp = Path(tempfile.mkdtemp(prefix="occflow-stop-test-"))
    tmp.chmod(0o755)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _launch(home: Path, tmp: Path) -> tuple[subprocess.Popen[bytes], Path]:
    if shutil.which("redis-server") is None or not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip("the deployed mode needs redis-server and PostgreSQL (scripts/apt-packages.txt)")
    log = home.parent / "launcher.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-u", str(REPO / "scripts" / "run_deployed.py"), "--home", str(home)],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "TMPDIR": str(tmp)},
            start_new_session=True,  # a signal reaches the launcher alone, as `kill PID` does
        )
    return launcher, log


def _started_by(launcher: subprocess.Popen[bytes], tmp: Path) -> dict[int, str]:
    """What the launcher started, each with its session: its descendants and the PostgreSQL server."""
    started = _descendants(launcher.pid)
    postmaster = _postmaster(tmp)
    if postmaster is not None:
        started[postmaster] = "postgres (postmaster)"
    return started


def _assert_all_gone(started: dict[int, str], launcher: subprocess.Popen[bytes], log: Path) -> None:
    try:
        launcher.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        tail = log.read_text()[-4000:]
        pytest.fail(f"the launcher did not end {STOP_TIMEOUT}s after the signal:\n{tail}")
    sessions = set(started)  # a service leads its own session: its members have its pid as session id
    deadline = time.monotonic() + 10
    left: dict[int, str] = {}
    while time.monotonic() < deadline:
        live = _live()
        left = {pid: started.get(pid, f"a member of session {sid}") for pid, (_, sid) in live.items()
                if pid in started or sid in sessions}
        if not left:
            return
        time.sleep(0.5)
    pytest.fail(f"left running after the launcher ended: {left}\n{log.read_text()[-4000:]}")


def test_ctrl_c_twice_stops_every_service_the_deployed_mode_started(tmp_path: Path, tmp_world: Path) -> None:
    home = tmp_path / "run"
    launcher, log = _launch(home, tmp_world)
    started: dict[int, str] = {}
    try:
        workers = [home / "spark-worker-1.log", home / "spark-worker-2.log"]

        def up() -> bool:
            below = _descendants(launcher.pid).values()
            if _postmaster(tmp_world) is None or not any("redis-server" in c for c in below):
                return False
            return all(w.exists() and "Successfully registered with master" in w.read_text(errors="replace")
                       for w in workers)

        _wait("PostgreSQL, Redis and both Spark workers are up", up, UP_TIMEOUT, launcher, log)
        started = _started_by(launcher, tmp_world)
        names = " ".join(started.values())
        for service in ("redis-server", "deploy.master.Master", "deploy.worker.Worker", "postmaster"):
            assert service in names, started
        launcher.send_signal(signal.SIGINT)
        _wait("the launcher is stopping", lambda: "stopping everything" in log.read_text(), 60, launcher, log)
        launcher.send_signal(signal.SIGINT)  # impatient: the stop already under way must go on
        _assert_all_gone(started, launcher, log)
    finally:
        _cleanup(launcher, started)


def test_sigterm_while_postgres_starts_stops_the_server_too(tmp_path: Path, tmp_world: Path) -> None:
    home = tmp_path / "run"
    launcher, log = _launch(home, tmp_world)
    started: dict[int, str] = {}
    try:
        server_up = lambda: _postmaster(tmp_world) is not None  # noqa: E731
        _wait("the PostgreSQL server appears", server_up, UP_TIMEOUT, launcher, log)
        started = _started_by(launcher, tmp_world)
        launcher.send_signal(signal.SIGTERM)
        _assert_all_gone(started, launcher, log)
        assert launcher.returncode == 143, launcher.returncode  # the SIGTERM handler's exit status
    finally:
        _cleanup(launcher, started)


def test_sigterm_stops_the_airflow_services_the_main_command_started(tmp_path: Path) -> None:
    """The embedded main command (``scripts/run_examples.py``) too: its Airflow services lead
    sessions of their own, so without the SIGTERM handler a ``kill PID`` left them running."""
    home = tmp_path / "run"
    log = tmp_path / "launcher.log"
    with open(log, "wb") as out:
        launcher = subprocess.Popen(
            [sys.executable, "-u", str(REPO / "scripts" / "run_examples.py"), "--home", str(home),
             "--dags", "occflow_delta_schema_change"],
            stdout=out, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
        )
    started: dict[int, str] = {}
    try:
        def up() -> bool:
            below = " ".join(_descendants(launcher.pid).values())
            return all(service in below for service in ("scheduler", "dag-processor", "triggerer"))

        _wait("the Airflow services are up", up, UP_TIMEOUT, launcher, log)
        started = _descendants(launcher.pid)
        launcher.send_signal(signal.SIGTERM)
        _assert_all_gone(started, launcher, log)
        assert launcher.returncode == 143, launcher.returncode  # the SIGTERM handler's exit status
    finally:
        _cleanup(launcher, started)


def _cleanup(launcher: subprocess.Popen[bytes], started: dict[int, str]) -> None:
    """After a failure: kill what is left, so a failing test leaves no service behind either."""
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait(30)
    live = _live()
    for pid, command in started.items():
        # The service and every member of its session (a service leads one: its workers and
        # log servers have its pid as their session id, and outlive it once it is killed).
        for member in [m for m, (_, sid) in live.items() if sid == pid and m != pid] + [pid]:
            if _stat(member) is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(member, signal.SIGKILL)
                    print(f"killed left-over {member}: {command if member == pid else f'of session {pid}'}")
