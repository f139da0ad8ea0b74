# What make compose-smoke and make compose-ha-smoke share: their steps' banner, stopping a
# process and the private Docker daemon, and how pip reaches its index from a container.
# Sourced after the script has set SMOKE, START, STEP, KEEP, DAEMON_PID, DOCKER_STATE.

step() {
  STEP=$1
  echo "== [$((SECONDS - START)) s] $STEP"
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
