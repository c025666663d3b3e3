#!/usr/bin/env bash
# The main job: creates .venv/ on a fresh machine, then runs the example DAGs on the embedded
# defaults (falls back to the transaction-core demo while the DAG runner is not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# --deployed: the same on Celery workers, a Spark standalone cluster and PostgreSQL (docs/deployment.md).
for arg in "$@"; do
  if [ "$arg" = "--deployed" ]; then
    exec .venv/bin/python scripts/run_deployed.py "$@"
  fi
done
if [ -f scripts/run_examples.py ]; then
  exec .venv/bin/python scripts/run_examples.py "$@"
fi
exec .venv/bin/python scripts/demo_core.py "$@"
