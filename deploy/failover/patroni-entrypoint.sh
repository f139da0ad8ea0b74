#!/bin/sh
# A PostgreSQL node under Patroni: the data directory made the postgres user's, then Patroni
# (as that user) runs PostgreSQL, as the primary or as a streaming replica of it.
set -eu
data=/var/lib/postgresql/data
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$data" /run/postgresql
  chown postgres:postgres "$data" /run/postgresql
  chmod 700 "$data"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
exec patroni /etc/patroni/patroni.yml
