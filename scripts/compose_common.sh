# What make compose-smoke and make compose-ha-smoke share: their steps' banner and failure,
# installing a missing Debian package, starting and stopping a process and the private Docker
# daemon, and how pip reaches its index from a container. Sourced after the script has set
# SMOKE, START, STEP, KEEP, RUN, APT_UPDATED, DAEMON_PID, DOCKER_STATE.

step() {
  STEP=$1
  echo "== [$((SECONDS - START)) s] $STEP"
}

fail() {
  echo "$SMOKE: $*" >&2
  exit 1
}

# Run "$@" every second until it succeeds, for at most $1 seconds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local end=$((SECONDS + limit))
  until "$@"; do
    if ((SECONDS >= end)); then
      echo "$SMOKE: no $what after $limit s" >&2
      return 1
    fi
    sleep 1
  done
}

apt_install() {
  [ "$(id -u)" = 0 ] || fail "needs $* (apt-get install $*); run as root to install it"
  if [ -z "$APT_UPDATED" ]; then
    timeout 600 apt-get update -qq > "$RUN/apt.log" 2>&1 ||
      { tail -20 "$RUN/apt.log"; fail "apt-get update failed"; }
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends "$@" \
    > "$RUN/apt.log" 2>&1 || { tail -20 "$RUN/apt.log"; fail "apt-get install $* failed"; }
}

start_daemon() {
  command -v dockerd > /dev/null || apt_install docker.io
  [ "$(id -u)" = 0 ] || fail "no Docker daemon answers, and starting one needs root"
  mkdir -p "$DOCKER_STATE"
  export DOCKER_HOST=unix://$DOCKER_STATE/docker.sock
  # A daemon left by an interrupted run: stop it by its PID and start afresh.
  local stale
  stale=$(cat "$DOCKER_STATE/dockerd.pid" 2>/dev/null || true)
  if [ -n "$stale" ] && tr '\0' ' ' < "/proc/$stale/cmdline" 2>/dev/null | grep -qF "$DOCKER_STATE"; then
    echo "stopping the private daemon an earlier run left (pid $stale)"
    stop_pid "$stale" 60
  fi
  setsid dockerd --storage-driver=vfs --iptables=false --ip6tables=false --bridge=none \
    --data-root "$DOCKER_STATE/data" --exec-root "$DOCKER_STATE/exec" \
    --pidfile "$DOCKER_STATE/dockerd.pid" -H "$DOCKER_HOST" \
    > "$DOCKER_STATE/dockerd.log" 2>&1 < /dev/null &
  DAEMON_PID=$!
  wait_for 60 "answer from the private Docker daemon" daemon_answers ||
    { tail -20 "$DOCKER_STATE/dockerd.log"; fail "the private Docker daemon did not start"; }
  echo "started a private Docker daemon (pid $DAEMON_PID, state in $DOCKER_STATE)"
}

# SIGTERM, then SIGKILL after $2 seconds.
stop_pid() {
  local pid=$1 limit=$2
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq $((limit * 2))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  echo "$SMOKE: pid $pid ignored SIGTERM for $limit s; killing it" >&2
  kill -KILL "$pid" 2>/dev/null || true
}

stop_daemon() {
  [ -n "$DAEMON_PID" ] || return 0
  if [ "$KEEP" = 1 ]; then
    echo "private Docker daemon left running: pid $DAEMON_PID, DOCKER_HOST=$DOCKER_HOST"
    return 0
  fi
  stop_pid "$DAEMON_PID" 60
  # dockerd stops the containerd it started; make sure of it.
  local containerd_pid
  containerd_pid=$(cat "$DOCKER_STATE/exec/containerd/containerd.pid" 2>/dev/null || true)
  [ -z "$containerd_pid" ] || stop_pid "$containerd_pid" 20
  # What the daemon leaves mounted in its state (its network namespace handle).
  awk -v state="$DOCKER_STATE/" 'index($2, state) == 1 { print $2 }' /proc/mounts |
    sort -r | while read -r mount; do umount "$mount" 2> /dev/null || true; done
  DAEMON_PID=""
}

daemon_answers() {
  timeout 15 docker version --format '{{.Server.Version}}' > /dev/null 2>&1
}

# pip's CA bundle, as the machine's own pip is configured (an empty file when none).
pip_cert() {
  local candidate
  for candidate in "${PIP_CERT:-}" "$(python3 -m pip config get global.cert 2> /dev/null)" \
    "${REQUESTS_CA_BUNDLE:-}" "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
    if [ -n "$candidate" ] && [ -s "$candidate" ]; then
      echo "$candidate"
      return
    fi
  done
  : > "$RUN/no-cert.pem"
  echo "$RUN/no-cert.pem"
}

pip_index_url() {
  local url=${PIP_INDEX_URL:-$(python3 -m pip config get global.index-url 2> /dev/null || true)}
  case $url in http://* | https://*) echo "$url" ;; esac
}
