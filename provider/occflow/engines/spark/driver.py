"""Driver-side entry point: run one write job and leave its outcome as JSON where the caller reads it.

    python -m occflow.engines.spark.driver --outcome PATH --table T [--operation OP] JOB [--config JSON]
    spark-submit .../occflow/engines/spark/driver.py --outcome PATH --table T ... (same arguments)

JOB is one of ``--sql TEXT``, ``--sql-file FILE``, ``--callable package.module:function`` or
``--application FILE [--app-arg ARG ...]``. The outcome (committed snapshot / version, rows,
seconds; or the failure's exception class, error class, Java cause chain and classification)
is written to PATH atomically: a reader sees the whole file or none. Exit status: 0 committed,
1 the job failed (outcome written), 2 the arguments were wrong.

Imports are absolute because spark-submit runs this file as a script, not as a module.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from occflow.core.errors import InvalidDeclarationError
from occflow.engines.spark.config import SparkConfig
from occflow.engines.spark.jobs import ApplicationJob, CallableJob, SqlJob
from occflow.engines.spark.session import SparkEngine
from occflow.engines.spark.submit import write_atomically

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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        config = SparkConfig.from_dict(_load_config(args.config))
        job = _job(args)
        params = _params(args.param)
        engine = SparkEngine(config)
    except (InvalidDeclarationError, ValueError, OSError) as exc:
        print(f"occflow driver: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGS
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        # Started by spark-submit: the session's jars and conf came from its command line.
        from pyspark.sql import SparkSession  # optional heavy dependency

        engine.attach(SparkSession.builder.getOrCreate())
    start = time.perf_counter()
    try:
        outcome = engine.run(job, args.table, args.operation, params=params)
    except InvalidDeclarationError as exc:
        print(f"occflow driver: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGS
    data = json.loads(outcome.to_json())
    data["driver"] = {"pid": os.getpid(), "seconds_total": round(time.perf_counter() - start, 3)}
    write_atomically(args.outcome, json.dumps(data, sort_keys=True))
    return EXIT_COMMITTED if outcome.committed else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
