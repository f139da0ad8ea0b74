#!/bin/sh
# Entrypoint of the smoke's local PostgreSQL image (Debian's postgresql-15), taking the env
# of the official image: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA, PGPORT.
# `postgres [ARGS]` (the default command) initializes PGDATA once and runs the server.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}" "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
export PGDATA

if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
shift

if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /run/postgresql
  chown postgres:postgres "$PGDATA" /run/postgresql
  chmod 700 "$PGDATA"
  exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "postgres-entrypoint: POSTGRES_PASSWORD must be set" >&2
    exit 2
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
    --encoding=UTF8 --auth-local=trust --auth-host=scram-sha-256 > /dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    db=$(printf '%s' "$POSTGRES_DB" | sed 's/"/""/g')
    echo "CREATE DATABASE \"$db\"" | postgres --single -D "$PGDATA" postgres > /dev/null
  fi
  echo "postgres-entrypoint: initialized $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -k /run/postgresql "$@"
