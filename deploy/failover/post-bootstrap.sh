#!/bin/sh
# Run once by Patroni on the node that makes the cluster ($1: a connection string to it): the
# gateway's role and database (A2AC_DB_USER, A2AC_DB_PASSWORD, default a2ac / a2ac).
set -eu
user=${A2AC_DB_USER:-a2ac}
password=${A2AC_DB_PASSWORD:-a2ac}
psql -v ON_ERROR_STOP=1 -v user="$user" -v password="$password" "$1" << 'SQL'
CREATE ROLE :"user" LOGIN PASSWORD :'password';
CREATE DATABASE :"user" OWNER :"user";
SQL
