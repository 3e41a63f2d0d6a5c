# One image for the operator (`gpushare run`) and the node agent (`gpushare agent`).
# Build: make image   (needs a Docker engine; not available on every machine)
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# Dependencies and the build backend only from the hash-pinned locks (wheels only, no sdist
# builds); regenerate them with `make lock` (docs/security.md).
COPY requirements/ requirements/
RUN python -m venv /opt/gpushare \
 && /opt/gpushare/bin/pip install --no-compile --require-hashes --only-binary=:all: -r requirements/image.txt \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --only-binary=:all: -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY operator/ operator/
# gpushare itself: built with the locked hatchling, installed without resolving anything more;
# `pip check` fails the build if the lock no longer satisfies pyproject.toml.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation -w /tmp/dist . \
 && /opt/gpushare/bin/pip install --no-compile --no-deps /tmp/dist/*.whl \
 && /opt/gpushare/bin/pip check \
 && /opt/gpushare/bin/python -c "import gpushare, kopf, pynvml, kubernetes_asyncio"

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gpushare-operator" \
      org.opencontainers.image.description="GPUSharePool operator, admission webhook and GPU node agent"
COPY --from=build /opt/gpushare /opt/gpushare
ENV PATH=/opt/gpushare/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Non-root, numeric so `runAsNonRoot: true` can verify it, with a passwd entry: Python's
# getpass.getuser() (Kopf's peering identity outside a pod) fails for a uid that has none.
RUN echo 'gpushare:x:65532:65532:gpushare:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'gpushare:x:65532:' >> /etc/group
USER 65532:65532
ENTRYPOINT ["gpushare"]
CMD ["run"]
