#!/bin/sh
# PgBouncer in transaction pooling mode in front of one PostgreSQL database, configured from
# the environment: PGB_PORT (listen), PGB_SERVER_HOST, PGB_SERVER_PORT, PGB_DATABASE,
# PGB_USER, PGB_PASSWORD, PGB_POOL_SIZE. Runs as the package's unprivileged user.
set -eu
conf=/tmp/pgbouncer
mkdir -p "$conf"
cat > "$conf/pgbouncer.ini" << INI
[databases]
$PGB_DATABASE = host=$PGB_SERVER_HOST port=$PGB_SERVER_PORT dbname=$PGB_DATABASE

[pgbouncer]
listen_addr = *
listen_port = ${PGB_PORT:-6432}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $conf/userlist.txt
pool_mode = transaction
max_client_conn = 1000
default_pool_size = ${PGB_POOL_SIZE:-20}
; a statement the gateway gave up on ends here too (its own bound is A2AC_DB_TIMEOUT_S)
query_timeout = 30
server_login_retry = 1
; no ignore_startup_parameters: the gateway sends none, and a bound set so would be lost
INI
printf '"%s" "%s"\n' "$PGB_USER" "$PGB_PASSWORD" > "$conf/userlist.txt"
chmod 600 "$conf/userlist.txt"
if [ "$(id -u)" = 0 ]; then
  chown -R postgres "$conf"
  exec setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer "$conf/pgbouncer.ini"
fi
exec pgbouncer "$conf/pgbouncer.ini"
