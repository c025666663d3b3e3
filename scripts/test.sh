#!/usr/bin/env bash
# The test command: lint, types, and the whole test suite (slow suites included unless
# OCCFLOW_FAST=1). Creates .venv/ on a fresh machine first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYTHONDONTWRITEBYTECODE=1
echo "== ruff"; .venv/bin/ruff check provider tests dags_example bench scripts
echo "== mypy --strict occflow.core"; .venv/bin/mypy
echo "== pytest"
markers=()
if [ "${OCCFLOW_FAST:-0}" = "1" ]; then markers=(-m "not slow"); fi
exec .venv/bin/pytest "${markers[@]}" "$@"
