#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for tests and prints its URL.
#
#   scripts/postgres.sh [start|stop|url]     (default: start)
#
# The server lives in $OCCFLOW_PG_DIR (default /tmp/occflow-pg): data directory, socket, log and
# the port it listens on (loopback only, a free port picked at first start). Idempotent: a second
# `start` finds the running server and prints the same URL. Uses Debian's `postgresql` package,
# installed when missing. PostgreSQL refuses to run as root, so as root it runs as `postgres`.
set -euo pipefail

DIR=${OCCFLOW_PG_DIR:-/tmp/occflow-pg}
CMD=${1:-start}

find_bin() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
    return 1
  fi
  echo "$d"
}

BIN=$(find_bin || true)
if [ -z "$BIN" ]; then
  if [ "$CMD" = "stop" ]; then exit 0; fi
  echo "postgres.sh: installing Debian package postgresql" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >&2
  BIN=$(find_bin)
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

url() {
  echo "postgresql://occflow@127.0.0.1:$(cat "$DIR/port")/postgres"
}

running() {
  [ -f "$DIR/port" ] && [ -f "$DIR/data/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1
}

case "$CMD" in
  url)
    running || { echo "postgres.sh: no server running in $DIR" >&2; exit 1; }
    url
    ;;
  stop)
    if running; then
      as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >&2
    fi
    ;;
  start)
    if running; then
      url
      exit 0
    fi
    mkdir -p "$DIR"
    if [ "$(id -u)" -eq 0 ]; then chown postgres "$DIR"; fi
    if [ ! -f "$DIR/data/PG_VERSION" ]; then
      as_owner "$BIN/initdb" -D "$DIR/data" -U occflow --auth=trust -E UTF8 --no-sync >"$DIR/initdb.log" 2>&1 \
        || { cat "$DIR/initdb.log" >&2; exit 1; }
    fi
    if [ ! -f "$DIR/port" ]; then
      python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' >"$DIR/port"
    fi
    PORT=$(cat "$DIR/port")
    # Throwaway server: no fsync, loopback only, enough connections for the 32-process load test.
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 start \
      -o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" >&2 \
      || { tail -n 30 "$DIR/server.log" >&2; exit 1; }
    url
    ;;
  *)
    echo "usage: scripts/postgres.sh [start|stop|url]" >&2
    exit 2
    ;;
esac
