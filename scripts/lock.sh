#!/usr/bin/env bash
# Regenerates the three hashed lock files that scripts/bootstrap.sh installs from, each with a
# sha256 hash of every wheel and sdist of every pinned version (hash-checking mode:
# `--require-hashes`, see docs/getting-started.md#supply-chain):
#
#   requirements.lock        everything `pip install -e .[dev]` needs, for Python 3.11
#   requirements-build.lock  the build backend ([build-system] requires in pyproject.toml), used
#                            to build occflow itself and the sdist-only packages of the lock
#   requirements-uv.lock     uv, the installer
#   requirements-spark4.lock .venv-spark4/ (the Spark 4 compatibility suite, docs/spark-support.md):
#                            the spark4 extra (PySpark 4.1 with its Connect client) instead of
#                            spark, with delta, postgres, iceberg and the test runner; every
#                            package both locks hold at the version requirements.lock pins
#
# The versions already pinned are kept (uv prefers the pins of the file it writes): a plain run
# only refreshes hashes and annotations. To move versions, pass uv's own options, which go to
# requirements.lock's compile: `bash scripts/lock.sh --upgrade-package deltalake` (or
# `--upgrade`). The build backend's version is the exact pin in pyproject.toml; uv's is the pin in
# requirements-uv.lock (OCCFLOW_UV_VERSION=X.Y.Z to change it). Every version that changed is
# printed at the end. Needs network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

UV=${UV:-.venv/bin/uv}
PY=${PYTHON:-.venv/bin/python}
HEADER="bash scripts/lock.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pins() { grep -oE '^[A-Za-z0-9][A-Za-z0-9._-]*==[^ \\]+' "$1" 2>/dev/null | sort || true; }
LOCKS="requirements.lock requirements-build.lock requirements-uv.lock requirements-spark4.lock"
for f in $LOCKS; do pins "$f" >"$tmp/$f.before"; done

"$UV" pip compile -q pyproject.toml --extra dev --python-version 3.11 --generate-hashes \
  --custom-compile-command "$HEADER" -o requirements.lock "$@"

# [build-system] requires must be exact pins (tests/test_supply_chain.py checks it).
"$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
  >"$tmp/build.in"
"$UV" pip compile -q "$tmp/build.in" --python-version 3.11 --generate-hashes --no-annotate \
  --custom-compile-command "$HEADER" -o requirements-build.lock

# Spark 4: the main lock's versions as constraints (Airflow, delta-rs, pyarrow... are the ones the
# main suite tests), but PySpark and its Py4J, which are the point of this environment.
pins requirements.lock | grep -viE '^(pyspark|py4j)==' >"$tmp/spark4-constraints.txt"
printf '%s\n' pytest pytest-timeout >"$tmp/spark4-tools.in"
"$UV" pip compile -q pyproject.toml "$tmp/spark4-tools.in" --extra spark4 --extra delta --extra postgres --extra iceberg \
  --constraints "$tmp/spark4-constraints.txt" --python-version 3.11 --generate-hashes --no-annotate \
  --custom-compile-command "$HEADER" -o requirements-spark4.lock

uv_version=${OCCFLOW_UV_VERSION:-$(pins requirements-uv.lock | sed -n 's/^uv==//p')}
echo "uv==${uv_version:?no uv pin in requirements-uv.lock: set OCCFLOW_UV_VERSION}" >"$tmp/uv.in"
"$UV" pip compile -q "$tmp/uv.in" --python-version 3.11 --generate-hashes --no-annotate \
  --custom-compile-command "$HEADER" -o requirements-uv.lock

changed=0
for f in $LOCKS; do
  if ! diff <(cat "$tmp/$f.before") <(pins "$f") >"$tmp/diff"; then
    changed=1
    echo "lock: versions changed in $f:"
    grep '^[<>]' "$tmp/diff" | sed 's/^</  was/; s/^>/  now/'
  fi
done
[ "$changed" -eq 1 ] || echo "lock: no version changed (hashes and annotations refreshed)"
