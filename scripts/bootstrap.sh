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
    "(Airflow, PySpark, delta-rs, pyodps, ...: a few minutes on a fresh machine)"
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

# JVM artifacts (docs/getting-started.md#supply-chain): the jars Spark loads (Iceberg's Spark
# runtime, delta-spark, delta-storage) are the exact Maven coordinates of scripts/jvm/pom.xml,
# resolved with Maven from Maven Central into .venv/share/occflow/jars/: Maven checks each
# download against Central's checksums (--strict-checksums, checksumPolicy fail), transitive
# dependencies are excluded (Spark has them), and each jar must then have the sha256 pinned in
# scripts/jvm/jars.sha256 (recorded beside the jars in SHA256SUMS). Resolved again only when the
# pom or the pins change, or a jar no longer matches its recorded sha256. Spark gets the local
# paths (engines/spark/jvm_artifacts.py): nothing is downloaded when a session starts.
repo_root=$PWD
maven_repo=${OCCFLOW_MAVEN_REPO:-$PWD/.venv/share/occflow/m2}
# resolve_jvm_artifacts VENV PINS [MAVEN-ARGS...]: the manifest's jars (the Spark line MAVEN-ARGS
# pick, 3.5 without any) into VENV/share/occflow/jars, each with its sha256 in scripts/jvm/PINS.
resolve_jvm_artifacts() {
  local venv=$1 pins=scripts/jvm/$2
  shift 2
  local jars_dir=$venv/share/occflow/jars
  local jvm_stamp=$jars_dir/.occflow-pom-stamp
  pinned_jars() { grep -v '^#' "$repo_root/$pins"; }
  if [ -f "$jvm_stamp" ] && cmp -s <(cat scripts/jvm/pom.xml "$pins") "$jvm_stamp" \
      && (cd "$jars_dir" && sha256sum --quiet --strict -c SHA256SUMS >/dev/null 2>&1); then
    return 0
  fi
  command -v mvn >/dev/null || { echo "bootstrap: mvn (Maven) is not on PATH: install the Debian package maven" >&2; exit 1; }
  echo "bootstrap: resolving the JVM artifacts of scripts/jvm/pom.xml $* from Maven Central into $jars_dir (Maven, strict checksums)"
  mkdir -p "$(dirname "$jars_dir")"
  rm -rf "$jars_dir.new"
  if ! mvn -B -q -Dstyle.color=never --strict-checksums -Dmaven.repo.local="$maven_repo" -f scripts/jvm/pom.xml "$@" \
      dependency:copy-dependencies -Doccflow.jars.dir="$PWD/$jars_dir.new" >"$jars_dir.log" 2>&1; then
    cat "$jars_dir.log" >&2
    echo "bootstrap: FAILED to resolve the JVM artifacts of scripts/jvm/pom.xml $* from Maven Central (network," \
      "or a download whose checksum does not match Central's): Maven's output is above and in $jars_dir.log" >&2
    exit 1
  fi
  if ! (cd "$jars_dir.new" && pinned_jars | sha256sum --strict -c --quiet -) \
      || [ "$(cd "$jars_dir.new" && ls)" != "$(pinned_jars | awk '{print $2}' | sort)" ]; then
    echo "bootstrap: FAILED: the jars Maven resolved into $jars_dir.new are not the ones pinned in" \
      "$pins (names or sha256 differ; update both files together)" >&2
    exit 1
  fi
  (cd "$jars_dir.new" && sha256sum -- *.jar >SHA256SUMS)
  cat scripts/jvm/pom.xml "$pins" >"$jars_dir.new/.occflow-pom-stamp"
  rm -rf "$jars_dir" "$jars_dir.log"
  mv "$jars_dir.new" "$jars_dir"
  echo "bootstrap: JVM artifacts in $jars_dir: $(cd "$jars_dir" && ls -- *.jar | paste -sd ' ')"
}
resolve_jvm_artifacts .venv jars.sha256

# The spark-submit driver's lease check inside its Iceberg commit (engines/spark/java/): compiled
# with Maven (scripts/jvm/fence/pom.xml) against the manifest's jars resolved above and PySpark's
# Hadoop API jar; its Maven plugins are resolved the same way once, a rebuild needs no network.
if ! .venv/bin/python -m occflow.engines.spark.submit_fence status >/dev/null; then
  echo "bootstrap: compiling the spark-submit driver's commit-time lease check (mvn package)"
  OCCFLOW_MAVEN_REPO=$maven_repo .venv/bin/python -m occflow.engines.spark.submit_fence build
fi

# Spark 4 (docs/spark-support.md): .venv-spark4/ beside .venv/, for the Spark 4 compatibility suite
# (tests/spark4, marker spark4): PySpark 4.1 with its Connect client instead of 3.5, the other
# packages at the main lock's versions, from requirements-spark4.lock (hash-checked, by the uv of
# .venv); occflow editable; the manifest's Spark 4.1 jars (profile spark-4.1, pins in
# scripts/jvm/jars-spark-4.1.sha256) and the lease check compiled against them. No bytecode pass:
# the suite starts one Python process. OCCFLOW_SPARK4=0 leaves it out.
if [ "${OCCFLOW_SPARK4:-1}" != "0" ]; then
  spark4=.venv-spark4
  if [ ! -x $spark4/bin/python ]; then
    echo "bootstrap: creating $spark4 (Spark 4.1) with $("$PY" --version 2>&1)"
    "$PY" -m venv --without-pip $spark4
  fi
  stamp4=$spark4/.occflow-lock-stamp
  if [ ! -f "$stamp4" ] || ! cmp -s <(cat requirements-spark4.lock requirements-build.lock) "$stamp4"; then
    echo "bootstrap: installing $(grep -c '^[A-Za-z0-9]' requirements-spark4.lock) Python packages from requirements-spark4.lock into $spark4"
    .venv/bin/uv pip install -q --python $spark4/bin/python --require-hashes -r requirements-spark4.lock \
      --build-constraints requirements-build.lock --require-build-hashes
    .venv/bin/uv pip install -q --python $spark4/bin/python --no-deps -e . \
      --build-constraints requirements-build.lock --require-build-hashes
    rm -rf provider/*.egg-info
    cat requirements-spark4.lock requirements-build.lock >"$stamp4"
  fi
  resolve_jvm_artifacts $spark4 jars-spark-4.1.sha256 -Doccflow.spark.line=4.1
  # submit_fence's mvn call names no Spark line: MAVEN_OPTS gives its JVM the property that
  # activates the spark-4.1 profiles (the manifest's jars, Java 17 class files).
  if ! $spark4/bin/python -m occflow.engines.spark.submit_fence status >/dev/null; then
    echo "bootstrap: compiling the lease check for Spark 4.1 into $spark4 (mvn package)"
    OCCFLOW_MAVEN_REPO=$maven_repo MAVEN_OPTS="${MAVEN_OPTS:-} -Doccflow.spark.line=4.1" \
      $spark4/bin/python -m occflow.engines.spark.submit_fence build
  fi
fi
