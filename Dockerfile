# The gateway image: the package and its runtime dependencies in a venv, run unprivileged.
# PYTHON_IMAGE: any Debian-based image with Python >= 3.11 and its venv module.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY a2a_continue ./a2a_continue
COPY sql ./sql
# An optional build secret `pip_cert` is a CA bundle for pip (a TLS-inspecting proxy);
# PIP_INDEX_URL picks another package index.
ARG PIP_INDEX_URL
RUN --mount=type=secret,id=pip_cert \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi \
 && python3 -m venv /opt/a2a-continue \
 && /opt/a2a-continue/bin/pip install --no-cache-dir --disable-pip-version-check \
      ${PIP_INDEX_URL:+--index-url "$PIP_INDEX_URL"} . \
 && /opt/a2a-continue/bin/pip uninstall --yes --quiet setuptools pip

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/a2a-continue /opt/a2a-continue
RUN useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin gateway
ENV PATH=/opt/a2a-continue/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    A2AC_HOST=0.0.0.0 \
    A2AC_PORT=8080
USER gateway
EXPOSE 8080
CMD ["a2a-continue", "serve"]
