# The operator image.   docker build -t scavenger/operator:dev .
# hack/images (`make images`) builds this same recipe without Docker, so it keeps to the instructions
# that builder follows: FROM debian:bookworm-slim, RUN, COPY, ENV, USER, WORKDIR, ENTRYPOINT, CMD.
FROM debian:bookworm-slim

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*

COPY pyproject.toml README.md /src/
COPY sj_operator /src/sj_operator
COPY gang /src/gang

# The package and its dependencies from PyPI in a virtualenv; a fixed non-root user (the Deployment
# runs as 10001 with a read-only root filesystem).
RUN python3 -m venv /opt/scavenger \
 && /opt/scavenger/bin/pip install --no-cache-dir --quiet /src \
 && rm -rf /src \
 && groupadd --system --gid 10001 scavenger \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin scavenger

# MALLOC_ARENA_MAX: glibc gives each of the API client's worker threads an arena of its own (up to 8 per
# core), which holds freed memory; two arenas keep the resident size near what the operator uses.
ENV PATH=/opt/scavenger/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MALLOC_ARENA_MAX=2

USER 10001:10001
ENTRYPOINT ["python3", "-m", "sj_operator"]
