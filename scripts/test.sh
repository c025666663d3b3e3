#!/usr/bin/env bash
# The test command: lint, types (on a copy of the tree, as installed), then the test suite. Creates .venv/ on a fresh machine first.
#
# By default the suites marked `slow` (load tests, full conformance runs, fault loops) are left
# out; under CI (CI=true) or with OCCFLOW_SLOW=1 they run afterwards, as a second pytest pass,
# and then the Spark 4 compatibility suite from .venv-spark4 (OCCFLOW_SPARK4=0 leaves it out).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PYTHONDONTWRITEBYTECODE=1
echo "== ruff"
.venv/bin/ruff check provider tests dags_example bench scripts
echo "== mypy --strict (the whole package) on the tree as a user installs it"
# Not the checkout: the editable install puts provider/ on sys.path through a .pth file, and mypy
# silences errors in modules it follows from there. The git files (tracked and new, uncommitted
# work included) are copied out, mtimes kept, to a fixed place so mypy's cache stays warm.
tree=.venv/occflow-tree
rm -rf "$tree" && mkdir -p "$tree"
git ls-files -co --exclude-standard -- provider pyproject.toml \
  | while IFS= read -r f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
  | xargs -0 cp -p --parents -t "$tree"
(cd "$tree" && ../bin/mypy --python-executable ../bin/python --cache-dir ../occflow-tree-cache)
echo "== import-linter (layers, engine independence, pure core, no circles)"
.venv/bin/lint-imports --no-cache
echo "== pytest (default suites)"
if [ $# -eq 0 ] && [ "${OCCFLOW_SPLIT:-1}" != "0" ]; then
  # Two processes side by side (the machines have 2 cores): the test files that start Spark (any
  # that names it), in their usual order, since one JVM serves a process's sessions; and every
  # other file, in its usual order. Each keeps the order a single run would give it, so neither
  # meets a state the other left (each has its own Airflow home, Spark JVM and temp dirs). About
  # 13 minutes instead of 19. OCCFLOW_SPLIT=0 runs them as one process.
  mapfile -t jvm < <(find tests -path tests/spark4 -prune -o -name 'test_*.py' -print | sort | xargs grep -liE 'spark')
  others=(); for f in "${jvm[@]}"; do others+=(--ignore="$f"); done
  logs=$(mktemp -d)
  .venv/bin/pytest -m "not slow" -p no:cacheprovider --durations=15 "${jvm[@]}" > "$logs/jvm.log" 2>&1 &
  jvm_pid=$!
  set +e
  .venv/bin/pytest -m "not slow" --durations=15 "${others[@]}" > "$logs/others.log" 2>&1
  rc_others=$?
  wait "$jvm_pid"
  rc_jvm=$?
  set -e
  echo "-- the files that start Spark (exit $rc_jvm)"; cat "$logs/jvm.log"
  echo "-- every other file (exit $rc_others)"; cat "$logs/others.log"
  rm -rf "$logs"
  if [ "$rc_jvm" -ne 0 ] || [ "$rc_others" -ne 0 ]; then exit 1; fi
else
  .venv/bin/pytest -m "not slow" --durations=15 "$@"
fi
if [ "${CI:-}" = "true" ] || [ "${OCCFLOW_SLOW:-0}" = "1" ]; then
  echo "== pytest (slow suites)"
  set +e
  .venv/bin/pytest -m slow --durations=15 "$@"
  rc=$?
  set -e
  # 5: no test selected (e.g. a path argument without slow tests) is not a failure
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
fi

# The Spark 4 compatibility suite (docs/spark-support.md), with the slow suites: from .venv-spark4
# (PySpark 4.1, the manifest's Spark 4.1 jars), tests/spark4 (marker spark4) and the 3.5 suite's
# tests listed in tests/spark4/reused.txt, run unchanged on the other line. About 3 minutes.
if { [ "${CI:-}" = "true" ] || [ "${OCCFLOW_SLOW:-0}" = "1" ]; } && [ "${OCCFLOW_SPARK4:-1}" != "0" ] && [ $# -eq 0 ]; then
  echo "== pytest (Spark 4 compatibility suite, .venv-spark4)"
  # shellcheck disable=SC2046
  .venv-spark4/bin/pytest -p no:cacheprovider --durations=15 tests/spark4 $(grep -v '^#' tests/spark4/reused.txt)
fi
