#!/usr/bin/env bash
# make compose-failover-smoke: docker-compose.failover.yml (three PostgreSQL 15 nodes under
# Patroni with a three-member etcd and synchronous replication, HAProxy on Patroni's
# GET /primary, PgBouncer in transaction mode, two gateway replicas, the sample agents)
# brought up on the local base images and driven by scripts/compose_failover_smoke.py:
# a follow-up's latency with and without synchronous replication, then three drills under
# steady load (the primary's postgres SIGKILLed, a planned switchover, the old primary
# rejoining as a replica), each with its figures and its audit.
#
# Like make compose-ha-smoke (whose helpers it shares): the Docker daemon that answers, or a
# private one (state in $A2AC_SMOKE_CACHE/docker) stopped at the end; the base images of
# make compose-smoke, built with it when missing; scripts/compose-failover-smoke/
# compose.override.yml puts every service on the host network at free ports on 127.0.0.1.
# A2AC_SMOKE_KEEP=1 leaves the stack running.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${A2AC_SMOKE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/a2a-continue}
DOCKER_STATE=$CACHE/docker
SUITE=bookworm
COMPOSE_VERSION=2.40.3
PG_ENTRYPOINT=scripts/compose-smoke/postgres-entrypoint.sh
OVERRIDE=scripts/compose-failover-smoke/compose.override.yml
PROJECT=a2ac-failover-smoke
PYTHON_BASE=a2ac-smoke/python:$SUITE
PG_BASE=a2ac-smoke/postgres:15-$SUITE-$(sha256sum "$PG_ENTRYPOINT" | cut -c1-12)
KEEP=${A2AC_SMOKE_KEEP:-}
unset PYTHON_IMAGE POSTGRES_IMAGE A2AC_JWT_SECRET A2AC_ENCRYPTION_KEY A2AC_WORKERS \
  A2AC_GATEWAY_PORT COMPOSE_FILE COMPOSE_PROJECT_NAME

START=$SECONDS
STEP="start"
RUN=$(mktemp -d "${TMPDIR:-/tmp}/a2ac-failover-smoke.XXXXXX")
DAEMON_PID=""
APT_UPDATED=""
STACK_UP=""
COMPOSE=()
SMOKE=compose-failover-smoke
# shellcheck source=scripts/compose_common.sh
source scripts/compose_common.sh

compose() {
  local limit=$1
  shift
  timeout "$limit" "${COMPOSE[@]}" -p "$PROJECT" -f docker-compose.failover.yml -f "$OVERRIDE" \
    --env-file "$RUN/smoke.env" "$@"
}

on_exit() {
  local rc=$?
  set +e
  if [ -n "$STACK_UP" ]; then
    if [ "$rc" != 0 ]; then
      echo "-- the stack's last log lines"
      compose 60 logs --no-color --tail 20 2>&1
    fi
    if [ "$KEEP" = 1 ]; then
      echo "stack left running: ${COMPOSE[*]} -p $PROJECT -f docker-compose.failover.yml" \
        "-f $OVERRIDE --env-file $RUN/smoke.env ..."
    else
      compose 180 down --volumes --remove-orphans --timeout 10 > "$RUN/down.log" 2>&1 ||
        { cat "$RUN/down.log"; echo "$SMOKE: compose down failed" >&2; }
    fi
  fi
  [ -z "$DAEMON_PID" ] || timeout 60 docker image prune --force > /dev/null 2>&1
  stop_daemon
  [ "$KEEP" = 1 ] || rm -rf --one-file-system "$RUN"
  if [ "$rc" = 0 ]; then
    echo "$SMOKE: passed in $((SECONDS - START)) s"
  else
    echo "$SMOKE: FAILED at step '$STEP' after $((SECONDS - START)) s" >&2
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

find_compose() {
  if timeout 20 docker compose version > /dev/null 2>&1; then
    COMPOSE=(docker compose)
  elif [ -x "$CACHE/bin/docker-compose-$COMPOSE_VERSION" ]; then
    COMPOSE=("$CACHE/bin/docker-compose-$COMPOSE_VERSION")
  else
    return 1
  fi
}

images_present() {
  docker image inspect "$PYTHON_BASE" > /dev/null 2>&1 && docker image inspect "$PG_BASE" > /dev/null 2>&1
}

# ---------------------------------------------------------------------------------------
step "Docker daemon"
OWN_DAEMON=""
daemon_answers || OWN_DAEMON=1
if [ -n "$OWN_DAEMON" ]; then
  if [ ! -S "$DOCKER_STATE/docker.sock" ] || ! DOCKER_HOST=unix://$DOCKER_STATE/docker.sock daemon_answers; then
    start_daemon
  else
    export DOCKER_HOST=unix://$DOCKER_STATE/docker.sock
  fi
fi
find_compose || true
if [ ${#COMPOSE[@]} = 0 ] || ! images_present; then
  step "base images (make compose-smoke builds them)"
  stop_daemon
  bash scripts/compose_smoke.sh > "$RUN/compose-smoke.log" 2>&1 ||
    { tail -30 "$RUN/compose-smoke.log"; fail "make compose-smoke failed"; }
  tail -1 "$RUN/compose-smoke.log"
  if [ -n "$OWN_DAEMON" ]; then start_daemon; fi
  find_compose || fail "no Docker Compose v2 after make compose-smoke"
  images_present || fail "no base images after make compose-smoke"
fi
"${COMPOSE[@]}" version
timeout 20 docker buildx version > /dev/null 2>&1 || export COMPOSE_BAKE=false

step "configuration"
PORTS=(ETCD1_CLIENT ETCD1_PEER ETCD2_CLIENT ETCD2_PEER ETCD3_CLIENT ETCD3_PEER PG1 PG1_API
  PG2 PG2_API PG3 PG3_API HAPROXY PGB GW1 GW2 AGENT SLOW_AGENT)
read -r -a FREE < <(python3 - "${#PORTS[@]}" << 'PY'
import socket
import sys

held = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in held:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))
for s in held:
    s.close()
PY
)
JWT_SECRET=$(openssl rand -hex 32)
{
  echo "A2AC_JWT_SECRET=$JWT_SECRET"
  echo "A2AC_ENCRYPTION_KEY=$(openssl rand -base64 32)"
  echo "PYTHON_IMAGE=$PYTHON_BASE"
  echo "POSTGRES_IMAGE=$PG_BASE"
  for i in "${!PORTS[@]}"; do echo "FO_${PORTS[$i]}=${FREE[$i]}"; done
  echo "A2AC_SMOKE_PIP_CERT=$(pip_cert)"
  echo "A2AC_SMOKE_PIP_INDEX_URL=$(pip_index_url)"
} > "$RUN/smoke.env"
grep -v -E 'SECRET|KEY' "$RUN/smoke.env" | tr '\n' ' '
echo
compose 180 down --volumes --remove-orphans --timeout 5 > /dev/null 2>&1 || true

step "docker compose -f docker-compose.failover.yml up -d --build --wait"
STACK_UP=1
BUILD_START=$SECONDS
compose 1500 up -d --build --wait --wait-timeout 300 > "$RUN/up.log" 2>&1 ||
  { tail -40 "$RUN/up.log"; fail "the stack did not come up healthy"; }
echo "up in $((SECONDS - BUILD_START)) s"
compose 60 ps --format '{{.Service}} {{.State}} {{.Status}}' | sort | tr '\n' ';'
echo

step "the drills (scripts/compose_failover_smoke.py)"
set -a
# shellcheck disable=SC1091
source "$RUN/smoke.env"
set +a
FO_COMPOSE="${COMPOSE[*]} -p $PROJECT -f docker-compose.failover.yml -f $OVERRIDE --env-file $RUN/smoke.env" \
  FO_JWT_SECRET=$JWT_SECRET FO_RUN=$RUN \
  timeout 1200 .venv/bin/python scripts/compose_failover_smoke.py
