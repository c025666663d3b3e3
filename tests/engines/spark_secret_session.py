"""Starts a local Spark session whose conf carries a secret, as occflow's in-process engine does,
and reports what the JVM's command line holds and what the session sees (a script: one JVM per
process). ``OCCFLOW_TEST_SECRET=... python spark_secret_session.py OUT_JSON`` (the secret comes in
the environment: on this script's own command line it would be found there)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from occflow.engines.spark.session import SparkEngine


def main(secret: str, out: str) -> None:
    engine = SparkEngine({"master": "local[1]", "conf": {"spark.hadoop.fs.s3a.secret.key": secret,
                                                          "spark.occflow.test.plain": "visible"}})
    spark = engine.session()
    cmdlines = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdlines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    jvm = [c for c in cmdlines if "org.apache.spark.deploy.SparkSubmit" in c and "pyspark-shell" in c]
    Path(out).write_text(json.dumps({
        "seen": spark.sparkContext.getConf().get("spark.hadoop.fs.s3a.secret.key"),
        "plain": spark.sparkContext.getConf().get("spark.occflow.test.plain"),
        "jvm_cmdlines": jvm,
        "secret_in_any_cmdline": any(secret in c for c in cmdlines),
    }))
    engine.stop()


if __name__ == "__main__":
    main(os.environ["OCCFLOW_TEST_SECRET"], sys.argv[1])
