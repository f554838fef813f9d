# One image for every relaybus role: `gateway` (default), `collector`, `up`.
#   docker build -t relaybus .
#   docker run --rm relaybus --help
# No `# syntax=` line: BuildKit would fetch that frontend from a registry, offline it fails.
# Build arguments (docker-compose.yml passes them from .env):
#   PYTHON_IMAGE   the base image of both stages (a mirror's copy of python:3.11-slim)
#   PIP_INDEX_URL  the package index pip installs the dependencies from
#   CA_CERTS       PEM text of extra CAs pip trusts besides its own (a TLS-inspecting proxy);
#                  used by the build stage only, never copied into the image
ARG PYTHON_IMAGE=python:3.11-slim

# --- build: install the package and its dependencies into a venv --------------------------
FROM ${PYTHON_IMAGE} AS build
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG CA_CERTS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/relaybus
# Dependencies first (cached while only the code changes), then the package itself.
COPY pyproject.toml README.md ./
COPY relaybus ./relaybus
COPY shared ./shared
COPY collector ./collector
COPY gateway ./gateway
RUN if [ -n "$CA_CERTS" ]; then \
      bundle=$(/opt/relaybus/bin/python -c 'import pip._vendor.certifi as c; print(c.where())') \
      && { cat "$bundle"; printf '%s\n' "$CA_CERTS"; } > /tmp/build-ca.pem \
      && export PIP_CERT=/tmp/build-ca.pem; \
    fi \
 && /opt/relaybus/bin/pip install --no-compile --index-url "$PIP_INDEX_URL" . \
 && /opt/relaybus/bin/python -m compileall -q /opt/relaybus/lib \
 && rm -f /tmp/build-ca.pem

# --- runtime: the venv only, run as an unprivileged user ------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --gid 10001 relaybus \
 && useradd --uid 10001 --gid relaybus --create-home --shell /usr/sbin/nologin relaybus
COPY --from=build /opt/relaybus /opt/relaybus
ENV PATH=/opt/relaybus/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    RELAYBUS_GATEWAY_HOST=0.0.0.0 \
    RELAYBUS_GATEWAY_PORT=8080
USER relaybus
WORKDIR /home/relaybus
EXPOSE 8080 9464
# The gateway answers /readyz once Redis is reachable; the collector service in
# docker-compose.yml overrides this check with its metrics endpoint.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
  CMD python -c 'import os, urllib.request; urllib.request.urlopen("http://127.0.0.1:%s/readyz" % os.environ.get("RELAYBUS_GATEWAY_PORT", "8080"), timeout=2)' || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["relaybus"]
CMD ["gateway"]
