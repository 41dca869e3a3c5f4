#!/usr/bin/env bash
# Starts the product on its embedded default: SQLite, a filesystem Celery
# broker served by a real worker process, demo data, demo logins.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
export DEBUG=${DEBUG:-true}
# A generation scores 2 never-served solutions per problem by default (540 on the demo):
# on a CPU that keeps "Start a generation" to minutes. load_demo grades that pool too.
export PIPELINE_POOL_PER_PROBLEM=${PIPELINE_POOL_PER_PROBLEM:-2}
# Phase 1's candidate steps: SmolLM2-135M (make install puts it in the venv) run by the
# worker below, on the GPU if there is one. load_demo says if it cannot be loaded; the
# demo works without it (labelers then write each step). STEPGEN_BACKEND=none turns it off.
export STEPGEN_BACKEND=${STEPGEN_BACKEND:-local}
export STEPGEN_LOCAL_MODEL_DIR=${STEPGEN_LOCAL_MODEL_DIR:-builtin:smollm2}

$PY manage.py migrate --no-input
# The shared cache (login and API throttling) lives in a table on the embedded default.
$PY manage.py createcachetable
$PY manage.py load_demo

# --beat: the one beat of this deployment runs inside the worker (the reconciler
# every 30 s, the cadence when configured); its schedule file is disposable.
$PY -m celery -A annotate worker --loglevel=INFO --queues=cpu,gpu --pool=solo \
    --beat --schedule=var/celerybeat-schedule --logfile=var/celery-worker.log &
WORKER=$!
trap 'kill $WORKER 2>/dev/null || true; wait $WORKER 2>/dev/null || true' EXIT INT TERM

echo
echo "  annotate is running at http://$HOST:$PORT/   (admin: http://$HOST:$PORT/admin/)"
echo "  Celery worker pid $WORKER (log: var/celery-worker.log); Ctrl-C stops both."
echo
$PY manage.py runserver "$HOST:$PORT" --noreload
