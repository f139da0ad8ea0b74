# PgBouncer and HAProxy from Debian's packages, on any Debian-based image (the gateway's
# PYTHON_IMAGE by default: no other base image is needed).
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends pgbouncer haproxy \
 && rm -rf /var/lib/apt/lists/*
COPY pgbouncer-entrypoint.sh /usr/local/bin/pgbouncer-entrypoint
COPY haproxy.cfg /etc/haproxy/haproxy.cfg
RUN chmod 0755 /usr/local/bin/pgbouncer-entrypoint
