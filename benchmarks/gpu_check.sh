#!/usr/bin/env bash
# The prepared GPU check (benchmarks/gpu_check.py) in one command, never past 8 minutes.
#
#   bash benchmarks/gpu_check.sh                                  # CUDA; JSON in benchmarks/out/gpu-check.json
#   bash benchmarks/gpu_check.sh --device cpu --output /tmp/c.json
#
# Arguments pass through to gpu_check.py. It needs torch, transformers, accelerate, peft and
# tokenizers, nothing else (no Django, no network). The script keeps its own budget
# (--budget-s, 420 s) and a watchdog; `timeout` is the last resort if Python itself hangs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=$(command -v python3 || command -v python); fi
fi
# Models are built from configs here; nothing may reach for the Hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_PROGRESS_BARS=1 TOKENIZERS_PARALLELISM=false
if command -v timeout >/dev/null; then
  exec timeout --kill-after=10 480 "$PYTHON" benchmarks/gpu_check.py "$@"
fi
exec "$PYTHON" benchmarks/gpu_check.py "$@"
