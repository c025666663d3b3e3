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
  echo "bootstrap: creating .venv with $("$PY" --version 2>&1)"
  "$PY" -m venv .venv
fi
# The Debian packages' installed versions, recorded beside the Python ones (apt installs what the
# archive has: this says which ones a run had). Printed when they change.
debian_versions=.venv/occflow-debian-versions.txt
# shellcheck disable=SC2086,SC2016
dpkg-query -W -f='${Package}=${Version}\n' $APT_PACKAGES >"$debian_versions.new"
if cmp -s "$debian_versions.new" "$debian_versions"; then
  rm "$debian_versions.new"
else
  mv "$debian_versions.new" "$debian_versions"
  echo "bootstrap: Debian packages recorded in $debian_versions: $(paste -sd ' ' "$debian_versions")"
fi

# Supply chain (docs/getting-started.md#supply-chain): every Python package is installed in
# hash-checking mode from a lock with a sha256 hash of each file (scripts/lock.sh writes them):
# uv from requirements-uv.lock, the packages from requirements.lock, and the build backend that
# builds occflow itself and the lock's sdist-only packages from requirements-build.lock.
uv_pin=$(sed -n 's/^uv==\([^ ]*\).*/\1/p' requirements-uv.lock)
if [ "$(.venv/bin/uv --version 2>/dev/null | cut -d' ' -f2)" != "$uv_pin" ]; then
  echo "bootstrap: installing uv $uv_pin (the installer) into .venv"
  .venv/bin/pip install -q --disable-pip-version-check --require-hashes -r requirements-uv.lock
fi
stamp=.venv/.occflow-lock-stamp
if [ ! -f "$stamp" ] || ! cmp -s <(cat requirements.lock requirements-build.lock) "$stamp"; then
  echo "bootstrap: installing $(grep -c '^[A-Za-z0-9]' requirements.lock) Python packages from requirements.lock" \
    "(Airflow, PySpark and Iceberg's jars, delta-rs, pyodps, ...: a few minutes on a fresh machine)"
  .venv/bin/uv pip install -q --python .venv/bin/python --require-hashes -r requirements.lock \
    --build-constraints requirements-build.lock --require-build-hashes
  # occflow itself, editable: no hash to check (hash-checking mode refuses editables), but its
  # build backend is pinned ([build-system] requires) and hash-checked all the same.
  .venv/bin/uv pip install -q --python .venv/bin/python --no-deps -e . \
    --build-constraints requirements-build.lock --require-build-hashes
  # The build's metadata left beside the sources would be a second copy of the distribution on
  # the import path: Airflow would load occflow's plugin twice ("already registered").
  rm -rf provider/*.egg-info
  cat requirements.lock requirements-build.lock >"$stamp"
fi

# Bytecode for every installed package, once per lock: the test command runs with
# PYTHONDONTWRITEBYTECODE, so without it every Python process (each Airflow service, task and
# CLI call) compiled Airflow's modules again (about 2.5 s of each process's start).
compiled=.venv/.occflow-bytecode-stamp
if [ ! -f "$compiled" ] || ! cmp -s requirements.lock "$compiled"; then
  echo "bootstrap: compiling the installed packages' bytecode (faster start of every process)"
  # A few third-party files are not valid Python 3 (test data, templates): compileall reports
  # them and goes on; that is no reason to stop.
  .venv/bin/python -m compileall -q -j 0 .venv/lib/python*/site-packages >/dev/null 2>&1 || true
  cp requirements.lock "$compiled"
fi

# The spark-submit driver's lease check inside its Iceberg commit (engines/spark/java/): compiled
# with the JDK's javac against the Iceberg and Hadoop jars installed above, no network.
if ! .venv/bin/python -m occflow.engines.spark.submit_fence status >/dev/null; then
  echo "bootstrap: compiling the spark-submit driver's commit-time lease check (javac)"
  .venv/bin/python -m occflow.engines.spark.submit_fence build
fi
