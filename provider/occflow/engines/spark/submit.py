"""Caller side of the spark-submit channel: start a driver process, find it again, read its outcome.

``submit_job`` starts ``spark-submit occflow/engines/spark/driver.py ...`` as a subprocess in its own
session and writes a small state file next to the outcome path (pid, command, log). Anyone who
knows the outcome path can ``SubmittedJob.reconnect`` to it later (an Airflow worker resuming a
task, a trigger polling it) and ``poll`` / ``wait`` for the ``WriteOutcome``. A driver that dies
without an outcome becomes a failed outcome whose error is the log tail, classified like any
other error text, so a crash is never mistaken for success.

No setting is on the driver's command line: its Spark conf and its config (secrets among them)
are in two files only their owner may read (``submit_files.py``).

Exactly-once reaches the driver: ``submit_job(..., tag=...)`` passes the write's commit tag
(``engines.tags``) on the driver's command line; the driver puts it on its commit (Iceberg's
snapshot summary, Delta's txn and user metadata: the format's own ``tagging``) and, right
before the commit, looks for it in the table (another try's driver may have committed the
write): found, the driver does not commit and reports the earlier commit as its outcome. On the
caller's side ``submit_ledger.SubmitLedger`` answers "did this write land?" from the same table
history.

Client mode: spark-submit runs the driver on the submitting host (Python applications cannot run
in standalone cluster mode) while its executors run on the cluster. The driver writes
``<outcome>.app.json`` (application id, master, host) once its session is up; a caller on the
submitting host follows the driver by its pid, a caller on another host by the application's
state in the master's JSON status (``$OCCFLOW_SPARK_MASTER_UI``, e.g. ``http://master:8080``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ...core.errors import InvalidDeclarationError
from ...core.operations import Operation, parse_operation
from ..outcome import ErrorInfo, WriteOutcome
from ..tags import CommitTag
from . import submit_fence as commit_fence
from . import submit_files
from .config import SparkConfig
from .errors import classify_error
from .identifiers import split_table
from .jobs import ApplicationJob, CallableJob, JobContext, SqlJob, as_job
from .submit_files import write_atomically

#: The driver spark-submit runs: a file path, since spark-submit takes the application as a file.
DRIVER_FILE = Path(__file__).with_name("driver.py")
LOG_TAIL_CHARS = 8000
#: The standalone master's web UI (``http://master:8080``): where a driver's application state is read.
MASTER_UI_ENV = "OCCFLOW_SPARK_MASTER_UI"

log = logging.getLogger(__name__)


class SubmitError(InvalidDeclarationError):
    """A job that cannot be submitted, or an outcome path with no submitted job behind it."""


def spark_submit_path() -> str:
    """pyspark's own ``bin/spark-submit`` (or ``$SPARK_HOME/bin/spark-submit`` when set)."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "bin" / "spark-submit").is_file():
        return str(Path(home) / "bin" / "spark-submit")
    import pyspark  # optional heavy dependency

    path = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    if not path.is_file():
        raise SubmitError(f"spark-submit not found at {path}; set SPARK_HOME")
    return str(path)


def _job_args(job: SqlJob | CallableJob | ApplicationJob) -> list[str]:
    if isinstance(job, SqlJob):
        return ["--sql", job.text]
    if isinstance(job, ApplicationJob):
        args = ["--application", str(Path(job.path).absolute())]
        for arg in job.args:
            args += ["--app-arg", arg]
        return args
    fn = job.fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        raise SubmitError(
            f"callable {fn!r} cannot run in another process: give an importable 'module:function' "
            "(not a lambda, a nested function or a __main__ function)"
        )
    return ["--callable", f"{module}:{qualname}"]


def outcome_from_dict(data: Mapping[str, Any]) -> WriteOutcome:
    """The ``WriteOutcome`` a driver wrote (``WriteOutcome.to_json`` read back; an older driver's
    file too, ``WriteOutcome.from_dict``), its error classified when the driver did not."""
    outcome = WriteOutcome.from_dict(data)
    if outcome.error is not None and outcome.classification is None:
        return replace(outcome, classification=classify_error(outcome.error))
    return outcome


def read_outcome(path: str | Path) -> WriteOutcome | None:
    """The outcome at ``path``, or None while the driver has not written it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return outcome_from_dict(json.loads(text))


def _pid_alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs and is our driver (its command line names ``marker``), reaping it
    if it is our own child that has exited."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child: another process started it, fine
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        if not text.strip():
            # Empty while the process execs (spark-submit's bash becoming the JVM) and once it is
            # a zombie: only the zombie has exited.
            return not _is_zombie(pid)
        # A recycled pid running something else is not our driver.
        return marker in text
    return True


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # gone between the two reads
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def master_listens(master: str, timeout: float = 3.0) -> bool:
    """Whether a standalone master ``spark://host:port[,host:port]`` accepts a TCP connection."""
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host or address, int(port or 7077)), timeout=timeout):
                return True
        except (OSError, ValueError):
            continue
    return False


def application_active(master_ui: str, application_id: str, timeout: float = 10.0) -> bool:
    """Whether the standalone master lists ``application_id`` among its active applications
    (``GET <master_ui>/json/``: ``activeapps`` / ``completedapps``)."""
    url = master_ui.rstrip("/") + "/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - the user's master
            status = json.loads(response.read().decode())
    except (OSError, ValueError) as exc:
        raise SubmitError(f"cannot read the Spark master's status at {url}: {exc}") from exc
    return any(app.get("id") == application_id for app in status.get("activeapps") or ())


@dataclass(frozen=True)
class SubmittedJob:
    """A driver process started by ``submit_job``; everything needed to find it again."""

    outcome_path: str
    pid: int
    log_path: str
    table: str
    operation: str
    command: tuple[str, ...] = ()
    started_at: float = field(default_factory=time.time)
    #: The host the driver runs on (client mode: the submitting host); its pid means nothing elsewhere.
    host: str = field(default_factory=socket.gethostname)

    @property
    def state_path(self) -> Path:
        return Path(self.outcome_path + ".job.json")

    @property
    def app_path(self) -> Path:
        return Path(self.outcome_path + ".app.json")

    def application(self) -> dict[str, Any] | None:
        """What the driver wrote once its session was up: ``application_id``, ``master``, ``host``."""
        try:
            data = json.loads(self.app_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return data if isinstance(data, dict) else None

    def save(self) -> None:
        state = {
            "outcome_path": self.outcome_path,
            "pid": self.pid,
            "log_path": self.log_path,
            "table": self.table,
            "operation": self.operation,
            "command": list(self.command),
            "started_at": self.started_at,
            "host": self.host,
        }
        write_atomically(self.state_path, json.dumps(state, indent=2))

    @classmethod
    def reconnect(cls, outcome_path: str | Path) -> SubmittedJob:
        """The job whose driver writes ``outcome_path`` (started here or by another process)."""
        state = Path(str(outcome_path) + ".job.json")
        if not state.is_file():
            raise SubmitError(f"no submitted job writes {outcome_path}: {state} does not exist")
        data = json.loads(state.read_text(encoding="utf-8"))
        return cls(
            outcome_path=data["outcome_path"],
            pid=int(data["pid"]),
            log_path=data["log_path"],
            table=data["table"],
            operation=data["operation"],
            command=tuple(data.get("command") or ()),
            started_at=float(data.get("started_at") or 0.0),
            host=str(data.get("host") or socket.gethostname()),
        )

    def running(self) -> bool:
        if self.host == socket.gethostname():
            return _pid_alive(self.pid, self.outcome_path)
        # Another host's driver: its application's state on the master says whether it runs.
        app = self.application()
        ui = os.environ.get(MASTER_UI_ENV)
        if app is None or not ui:
            raise SubmitError(
                f"the driver writing {self.outcome_path} runs on {self.host}, not here, and "
                + ("it has not reported its application id yet" if app is None else f"${MASTER_UI_ENV} is not set")
                + ": cannot tell whether it still runs"
            )
        return application_active(ui, str(app["application_id"]))

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - chars))
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def poll(self) -> WriteOutcome | None:
        """The outcome if the driver has finished, else None."""
        outcome = read_outcome(self.outcome_path)
        if outcome is None and self.running():
            return None
        submit_files.discard(self.outcome_path)  # the driver is done with its conf and config
        if outcome is None:
            outcome = read_outcome(self.outcome_path)  # it may have written just before exiting
        return outcome if outcome is not None else self._no_outcome()

    def wait(
        self, timeout: float | None = None, interval: float = 0.5, master_gone_after: float | None = None
    ) -> WriteOutcome:
        """The driver's outcome once it has one. ``master_gone_after``: when the driver's cluster
        master (``spark://host:port``) has not accepted a connection for that many seconds, the
        driver is stopped and the outcome says so (a driver whose cluster is gone would wait for
        it forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        unreachable_since: float | None = None
        next_probe = 0.0
        while True:
            outcome = self.poll()
            if outcome is not None:
                return outcome
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"driver pid {self.pid} wrote no outcome to {self.outcome_path} in {timeout} s")
            master = self._cluster_master() if master_gone_after is not None else None
            if master is not None and time.monotonic() >= next_probe:
                next_probe = time.monotonic() + min(5.0, max(master_gone_after or 0.0, 0.5) / 4)
                if master_listens(master):
                    unreachable_since = None
                elif unreachable_since is None:
                    unreachable_since = time.monotonic()
                elif master_gone_after is not None and time.monotonic() - unreachable_since >= master_gone_after:
                    return self._master_gone(master, master_gone_after)
            time.sleep(interval)

    def _cluster_master(self) -> str | None:
        """The standalone master the driver's application runs on (``spark://``), once reported."""
        app = self.application()
        master = None if app is None else str(app.get("master") or "")
        return master if master and master.startswith("spark://") else None

    def _master_gone(self, master: str, seconds: float) -> WriteOutcome:
        self.kill()
        message = (f"the Spark master {master} has not accepted a connection for {seconds:.0f} s: the cluster "
                   f"is gone, driver pid {self.pid} was stopped (nothing committed by it after this point)")
        return WriteOutcome(
            engine="spark-submit", table=self.table, operation=parse_operation(self.operation), committed=False,
            seconds=max(0.0, time.time() - self.started_at),
            error=ErrorInfo(exception_class="occflow.engines.spark.submit.MasterGone", messages=(message,)),
            classification=classify_error(message), tag={"log": self.log_path, "master_gone": master},
        )

    def join(self, timeout: float | None = None, interval: float = 0.5) -> bool:
        """Wait for the driver process to exit (it writes the outcome, then stops its JVM)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.running():
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(interval)
        return True

    def kill(self, grace: float = 10.0) -> None:
        """Stop the driver and its JVM (the driver runs in its own process group): SIGTERM, then
        SIGKILL for what is left after ``grace`` seconds (a JVM's shutdown hooks may keep trying
        to reach a master that is gone)."""
        if not self.running():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)

    def _no_outcome(self) -> WriteOutcome:
        tail = self.log_tail()
        message = f"driver pid {self.pid} exited without writing an outcome to {self.outcome_path}"
        error = ErrorInfo(exception_class="occflow.engines.spark.submit.DriverExited", messages=(message, tail))
        return WriteOutcome(
            engine="spark-submit",
            table=self.table,
            operation=parse_operation(self.operation),
            committed=False,
            seconds=max(0.0, time.time() - self.started_at),
            error=error,
            # The log tail may hold the engine's exception (a driver killed mid-commit, say).
            classification=classify_error(tail or message),
            tag={"log": self.log_path},
        )


def _driver_conf(cfg: SparkConfig, table: str, lease_window: tuple[str | Path, int] | None) -> dict[str, str]:
    """The Spark conf the driver starts with: the config's, and on Iceberg or Delta the lease fence's."""
    conf = cfg.spark_conf()
    if lease_window is not None:  # on Iceberg / Delta the lease is checked inside the commit too (submit_fence.py)
        fence = commit_fence.plan(cfg)
        if not fence.at_commit:
            log.warning("spark-submit driver writing %s: %s", table, fence.describe())
        conf = fence.spark_conf(conf, lease_window[0], lease_window[1])
    return conf


def _driver_command(
    spark_submit: str, cfg: SparkConfig, py_files: Sequence[str | Path], out: Path, table: str,
    op: Operation, params: Mapping[str, str] | None, tag: CommitTag | None,
    lease_window: tuple[str | Path, int] | None,
) -> list[str]:
    """``spark-submit`` with the config's master and the files holding its conf and config
    (``submit_files.py``: no setting is on a command line), then the driver and its arguments
    (the job's own arguments follow: ``_job_args``)."""
    properties, config_file = submit_files.paths(out)
    command = [spark_submit, "--master", cfg.master, "--properties-file", str(properties)]
    if py_files:
        command += ["--py-files", ",".join(str(Path(p).absolute()) for p in py_files)]
    command += [str(DRIVER_FILE), "--outcome", str(out), "--table", table, "--operation", op.value]
    command += ["--config", f"@{config_file}"]
    for key, value in (params or {}).items():
        command += ["--param", f"{key}={value}"]
    if tag is not None:
        command += ["--tag", json.dumps(tag.properties(), sort_keys=True)]
    if lease_window is not None:
        command += ["--lease-window", str(Path(lease_window[0]).absolute()), "--fence", str(int(lease_window[1]))]
    return command


def submit_job(
    job: SqlJob | CallableJob | ApplicationJob | str | Path | Callable[[Any, JobContext], None],
    table: str,
    outcome_path: str | Path,
    operation: Operation | str | None = None,
    config: SparkConfig | Mapping[str, Any] | None = None,
    params: Mapping[str, str] | None = None,
    py_files: Sequence[str | Path] = (),
    spark_submit: str | None = None,
    env: Mapping[str, str] | None = None,
    tag: CommitTag | None = None,
    lease_window: tuple[str | Path, int] | None = None,
) -> SubmittedJob:
    """Start ``job`` in a spark-submit driver that writes its outcome to ``outcome_path``.

    ``tag``: the write's commit tag; the driver puts it on its commit and, right before the
    commit, refuses to commit a write whose tag the table already holds. ``lease_window``: the
    task's lease window file and the lease's fence (``lease_window.py``); the driver refuses to
    write unless that lease is certainly live right before its write statement starts and, on
    Iceberg or Delta with the lease-fence jar built, inside the commit itself (``submit_fence.py``; without
    the jar a warning says the check stops at the statement start)."""
    the_job = as_job(job)
    split_table(table)
    cfg = config if isinstance(config, SparkConfig) else SparkConfig.from_dict(config)
    if cfg.remote:
        raise SubmitError("spark-submit needs a master URL, not a Spark Connect remote; run the job in-process")
    op = parse_operation(operation) if operation is not None else the_job.operation()
    if op is None:
        raise SubmitError(f"cannot tell the operation of {the_job.describe()!r}: pass operation=")
    out = Path(outcome_path).absolute()
    if out.exists():
        raise SubmitError(f"outcome path {out} already holds an outcome; give each run its own path")
    out.parent.mkdir(parents=True, exist_ok=True)
    cfg.table_format_spec().prepare()  # SQLite catalog schema, warehouse: before any driver runs
    spark_submit = spark_submit or spark_submit_path()
    command = _driver_command(spark_submit, cfg, py_files, out, table, op, params, tag, lease_window)
    command += _job_args(the_job)
    child_env = dict(os.environ)
    child_env.setdefault("PYSPARK_PYTHON", sys.executable)
    child_env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    child_env.update(env or {})
    submit_files.write(out, _driver_conf(cfg, table, lease_window), cfg.to_dict(), spark_submit, child_env)
    log_path = str(out) + ".log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=child_env, start_new_session=True
        )
    submitted = SubmittedJob(
        outcome_path=str(out),
        pid=proc.pid,
        log_path=log_path,
        table=table,
        operation=op.value,
        command=tuple(command),
    )
    submitted.save()
    return submitted

