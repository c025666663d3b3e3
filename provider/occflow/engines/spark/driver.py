"""Driver-side entry point: run one write job and leave its outcome as JSON where the caller reads it.

    python -m occflow.engines.spark.driver --outcome PATH --table T [--operation OP] JOB [--config JSON|@FILE]
    spark-submit .../occflow/engines/spark/driver.py --outcome PATH --table T ... (same arguments)

``submit_job`` gives the driver ``--config @FILE`` and spark-submit ``--properties-file``: the
config and the Spark conf (secrets among them) are in files only their owner may read, never on
a command line (``submit_files.py``).

JOB is one of ``--sql TEXT``, ``--sql-file FILE``, ``--callable package.module:function`` or
``--application FILE [--app-arg ARG ...]``. The outcome (committed snapshot / version, rows,
seconds; or the failure's exception class, error class, Java cause chain and classification)
is written to PATH atomically: a reader sees the whole file or none. Exit status: 0 committed,
1 the job failed (outcome written), 2 the arguments were wrong.

``--tag JSON`` (the write's commit tag as properties, ``CommitTag.properties``): the commit
carries it (the table format's ``tagging``), and right before the commit the driver looks for it
in the table; if another try's driver already committed this write, this one does not commit
and reports that commit as its outcome (``exactly_once`` in its tag). Once the session is up the
driver writes ``PATH.app.json`` (application id, master, host, pid) so that a caller can follow
it on the cluster.

Imports are absolute because spark-submit runs this file as a script, not as a module.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from occflow.core.errors import InvalidDeclarationError
from occflow.core.operations import parse_operation
from occflow.engines.ledger import AlreadyCommitted, LeaseNotLive
from occflow.engines.outcome import WriteOutcome
from occflow.engines.spark.config import SparkConfig
from occflow.engines.spark.jobs import ApplicationJob, CallableJob, SqlJob
from occflow.engines.spark.lease_window import check_window
from occflow.engines.spark.session import SparkEngine
from occflow.engines.spark.submit_fence import (
    AT_COMMIT,
    AT_STATEMENT_START,
    LEASE_CHECKED_AT,
    CommitFence,
    commit_refusal,
    in_session,
)
from occflow.engines.spark.submit_files import write_atomically
from occflow.engines.tags import CommitTag

EXIT_COMMITTED = 0
EXIT_FAILED = 1
EXIT_BAD_ARGS = 2


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="occflow.engines.spark.driver", description=__doc__.split("\n\n")[0])
    p.add_argument("--outcome", required=True, help="where to write the outcome JSON")
    p.add_argument("--table", required=True, help="the table the job writes, e.g. lake.db.events")
    p.add_argument("--operation", help="canonical operation (default: parsed from the SQL)")
    p.add_argument("--config", help="SparkConfig as JSON, or @FILE holding it")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="job parameter")
    p.add_argument("--tag", help="the write's commit tag as a JSON object of properties")
    p.add_argument("--lease-window", help="the task's lease window file (checked right before the write "
                   "statement and, on Iceberg or Delta with the lease-fence jar, inside the commit)")
    p.add_argument("--fence", type=int, help="the fencing token of the lease the driver was started under")
    job = p.add_mutually_exclusive_group(required=True)
    job.add_argument("--sql", help="SQL text (several statements separated by ;)")
    job.add_argument("--sql-file", help="file with SQL text")
    job.add_argument("--callable", help="package.module:function taking (spark, context)")
    job.add_argument("--application", help="PySpark application file")
    p.add_argument("--app-arg", action="append", default=[], help="argument for --application")
    return p


def _load_config(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    if text.startswith("@"):
        text = Path(text[1:]).read_text(encoding="utf-8")
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"--config must be a JSON object, got {type(data).__name__}")
    return data


def _job(args: argparse.Namespace) -> Any:
    if args.sql is not None:
        return SqlJob(args.sql)
    if args.sql_file is not None:
        return SqlJob(Path(args.sql_file).read_text(encoding="utf-8"))
    if args.callable is not None:
        return CallableJob.from_reference(args.callable)
    return ApplicationJob(args.application, tuple(args.app_arg))


def _params(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param must be KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def _tag(text: str | None) -> CommitTag | None:
    if not text:
        return None
    props = json.loads(text)
    if not isinstance(props, dict):
        raise ValueError(f"--tag must be a JSON object of commit properties, got {type(props).__name__}")
    tag = CommitTag.from_properties(props)
    if tag is None:
        raise ValueError(f"--tag holds no occflow write id: {props!r}")
    return tag


def run_tagged(engine: SparkEngine, job: Any, table: str, operation: str | None, params: dict[str, str],
               tag: CommitTag | None, lease_live: Callable[[], None] = lambda: None) -> WriteOutcome:
    """Run the job; with a tag, its commit carries the tag and is skipped if the write already
    landed. ``lease_live`` runs right before the commit, last (``LeaseNotLive``: not committed)."""
    if tag is None:
        return engine.run(job, table, operation, params=params, before_commit=lease_live)
    ledger = engine.format.commit_ledger(engine.session(), table)
    if ledger is None:  # plain Parquet/Hive: no history to put the tag in
        return engine.run(job, table, operation, params=params, before_commit=lease_live)

    def before_commit() -> None:
        already_there()
        lease_live()

    def already_there() -> None:
        try:
            found = ledger.find_commit(tag)
        except Exception as exc:  # a table the job creates has no history yet: nothing landed
            if "TABLE_OR_VIEW_NOT_FOUND" in str(exc):
                return
            raise
        if found is not None:
            raise AlreadyCommitted(f"{tag.describe()} is already in {found.describe()}", found)

    try:
        with ledger.tagging(tag):
            return engine.run(job, table, operation, params=params, before_commit=before_commit)
    except AlreadyCommitted as done:
        assert done.found is not None
        op = parse_operation(operation) if operation else tag.operation
        reason = (f"already committed by {done.found.by}: found by the driver right before its commit; "
                  "this driver did not commit again")
        return done.found.outcome(op, reason)


def _report_application(outcome_path: str, engine: SparkEngine) -> dict[str, Any]:
    sc = engine.session().sparkContext
    app = {"application_id": sc.applicationId, "master": sc.master, "host": socket.gethostname(),
           "pid": os.getpid()}
    write_atomically(outcome_path + ".app.json", json.dumps(app, sort_keys=True))
    return app


def _commit_fence(engine: SparkEngine, config: SparkConfig, window: str | None,
                  fence: int | None) -> CommitFence | None:
    """Where this driver checks its lease last (``None``: it runs under no lease), said on stderr:
    a driver that checks only at the statement start must not pass for one fenced at the commit."""
    if window is None or fence is None:
        return None
    session_conf = dict(engine.session().sparkContext.getConf().getAll())
    found = in_session(session_conf, config, window, fence)
    print(f"occflow driver: {found.describe()}", file=sys.stderr)
    return found


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = SparkConfig.from_dict(_load_config(args.config))
        job = _job(args)
        params = _params(args.param)
        tag = _tag(args.tag)
        engine = SparkEngine(config)
    except (InvalidDeclarationError, ValueError, OSError) as exc:
        print(f"occflow driver: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGS
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Started by spark-submit: the session's jars and conf came from its command line.
        from pyspark.sql import SparkSession  # optional heavy dependency

        engine.attach(SparkSession.builder.getOrCreate())
    app = _report_application(args.outcome, engine)
    start = time.perf_counter()
    fence = args.fence
    commit_fence = _commit_fence(engine, config, args.lease_window, fence)

    def lease_live() -> None:
        if args.lease_window is not None and fence is not None:
            check_window(args.lease_window, fence)

    def not_live(reason: str, at: str) -> WriteOutcome:  # nothing was committed
        return WriteOutcome.refused_by_lease(engine.engine_name, args.table, parse_operation(args.operation),
                                             time.perf_counter() - start, reason, at=at, fence=fence)

    try:
        outcome = run_tagged(engine, job, args.table, args.operation, params, tag, lease_live)
    except InvalidDeclarationError as exc:
        print(f"occflow driver: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGS
    except LeaseNotLive as lapsed:  # refused right before the write statement started
        outcome = not_live(str(lapsed), AT_STATEMENT_START)
    refused = commit_refusal(outcome)
    if refused is not None:  # the lease-fenced catalog / log store refused the commit: nothing was committed
        outcome = not_live(refused, AT_COMMIT)
    if commit_fence is not None:
        outcome = replace(outcome, tag={**outcome.tag, LEASE_CHECKED_AT: commit_fence.checked_at})
    data = json.loads(outcome.to_json())
    data["driver"] = {**app, "seconds_total": round(time.perf_counter() - start, 3)}
    write_atomically(args.outcome, json.dumps(data, sort_keys=True))
    return EXIT_COMMITTED if outcome.committed else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
