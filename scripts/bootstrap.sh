#!/usr/bin/env bash
# Creates .venv/ at the repo root and installs everything occflow needs, from the lock file.
# Idempotent: a second run only checks. Used by `make run`, `make test` and .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: Java for Spark, PostgreSQL for the lease store's tests, JDBC drivers for
# Iceberg's JDBC catalog. Installed only when missing.
APT_PACKAGES=$(grep -v '^#' scripts/apt-packages.txt | xargs)
missing=()
for pkg in $APT_PACKAGES; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
  .venv/bin/pip install -q "uv==0.13.8"
fi
stamp=.venv/.occflow-lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s requirements.lock "$stamp"; then
  .venv/bin/uv pip install -q --python .venv/bin/python -r requirements.lock
  .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e .
  cp requirements.lock "$stamp"
fi
