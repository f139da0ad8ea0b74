#!/usr/bin/env bash
# The whole suite through PgBouncer in transaction mode, in front of the machine's PostgreSQL
# (127.0.0.1:5432, database `test`, user postgres without a password, as in .ci/run).
#
# The gateways' statements go through PgBouncer with asyncpg's statement cache off
# (A2AC_DB_STATEMENT_CACHE=0); each process's LISTEN connection goes straight to PostgreSQL
# (A2AC_LISTEN_DATABASE_URL), as docs/operations.md says to run it. The tests' own
# connections (creating the run's databases, checking rows, playing a second LISTENer) go
# straight to PostgreSQL too (tests/support/database.py direct_url), and so do the tests
# whose fault proxy plays a frozen or stopping server (tests/runtime/test_database_faults.py):
# the proxy stands where the server is, and PgBouncer 1.18 crashes when a server freezes
# under a client mid-statement (a bug of its own).
#
# PgBouncer comes from Debian's package (installed when missing, as root) and runs as an
# unprivileged user (it refuses root) on a free local port, stopped at the end.
# Arguments go to pytest (default: the whole suite).
set -euo pipefail
cd "$(dirname "$0")/.."

PG_HOST=${A2AC_PG_HOST:-127.0.0.1}
PG_PORT=${A2AC_PG_PORT:-5432}
PG_USER=${A2AC_PG_USER:-postgres}
RUN=$(mktemp -d "${TMPDIR:-/tmp}/a2ac-pgbouncer.XXXXXX")
BOUNCER_PID=""

on_exit() {
  local rc=$?
  set +e
  if [ -n "$BOUNCER_PID" ]; then
    kill -TERM "$BOUNCER_PID" 2> /dev/null
    for _ in $(seq 40); do
      kill -0 "$BOUNCER_PID" 2> /dev/null || break
      sleep 0.25
    done
    kill -KILL "$BOUNCER_PID" 2> /dev/null
  fi
  if [ "$rc" != 0 ] && [ -f "$RUN/pgbouncer.log" ]; then
    echo "-- PgBouncer's last log lines"
    tail -20 "$RUN/pgbouncer.log"
  fi
  rm -rf --one-file-system "$RUN"
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

if ! command -v pgbouncer > /dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
  [ "$(id -u)" = 0 ] || { echo "pgbouncer_suite: needs pgbouncer (apt-get install pgbouncer)" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends \
    pgbouncer > "$RUN/apt.log" 2>&1 || { tail -20 "$RUN/apt.log"; exit 1; }
fi
PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)

timeout 3 bash -c "</dev/tcp/$PG_HOST/$PG_PORT" 2> /dev/null ||
  { echo "pgbouncer_suite: no PostgreSQL answers at $PG_HOST:$PG_PORT" >&2; exit 1; }

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# Every database on the server, reached as PG_USER: the tests create their own databases.
# No ignore_startup_parameters: the gateway sends none (a bound set that way would be lost).
cat > "$RUN/pgbouncer.ini" << INI
[databases]
* = host=$PG_HOST port=$PG_PORT user=$PG_USER

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
max_db_connections = 40
server_lifetime = 3600
query_wait_timeout = 30
; Retry a failed server login after 1 s, not 15 (tests make a database refuse connections)
server_login_retry = 1
logfile = $RUN/pgbouncer.log
pidfile = $RUN/pgbouncer.pid
INI

if [ "$(id -u)" = 0 ]; then
  RUNAS=${A2AC_PGBOUNCER_USER:-nobody}
  chown -R "$RUNAS" "$RUN"
  setpriv --reuid="$RUNAS" --regid="$(id -g "$RUNAS")" --clear-groups \
    "$PGBOUNCER" "$RUN/pgbouncer.ini" > "$RUN/stdout.log" 2>&1 &
else
  "$PGBOUNCER" "$RUN/pgbouncer.ini" > "$RUN/stdout.log" 2>&1 &
fi
BOUNCER_PID=$!
for _ in $(seq 40); do
  timeout 1 bash -c "</dev/tcp/127.0.0.1/$PORT" 2> /dev/null && break
  kill -0 "$BOUNCER_PID" 2> /dev/null || { cat "$RUN/stdout.log"; exit 1; }
  sleep 0.25
done
echo "PgBouncer $("$PGBOUNCER" --version | head -1 | awk '{print $2}') in transaction mode on" \
  "127.0.0.1:$PORT in front of $PG_HOST:$PG_PORT"

export A2AC_DATABASE_URL="postgresql://$PG_USER@127.0.0.1:$PORT/test"
export A2AC_LISTEN_DATABASE_URL="postgresql://$PG_USER@$PG_HOST:$PG_PORT/test"
export A2AC_DB_STATEMENT_CACHE=0
if [ $# -gt 0 ]; then
  .venv/bin/python -m pytest "$@"
else
  make test
fi
