#!/usr/bin/env bash
# The GPU check, for a maintainer on a machine with one NVIDIA GPU (not CI: CI has none).
# First the FlexAttention document kernel against the mask path (logits and gradients); then the
# lab's paper-shape pre-training against a plain compiled loop of the same shape on the same
# batches (GPT-2 and RoBERTa, block 512, bf16), its MFU, the quickstart study on the GPU with its
# wall time, and DeepSpeed ZeRO-2 on one GPU; then one verdict per target, a speed ratio only
# over a passed correctness and a finite loss (docs/scaling-out.md#the-gpu-check). Numbers land
# in OUT/results.json, logs in OUT/*.log, the record of the CUDA-only code a pass covered in
# OUT/verified.json.
#   bash scripts/gpu-check.sh [--out DIR] [--parts peak,data,...]   # on the GPU machine
#   bash scripts/gpu-check.sh --dry-run --out /tmp/gc               # anywhere: tiny shapes
# The machine's Python needs torch and transformers; what else the lab needs can travel as
# wheels: scripts/gpu-carry.sh builds .carry/ here, and this script sources
# scripts/gpu-bootstrap.sh when .carry/whl is present (docs/scaling-out.md).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && python=.venv/bin/python
if ! "$python" -c "import orjson, nltk, datatrove, codebleu" 2> /dev/null; then
  # the lab's own dependencies are missing: take them from the carried wheels
  [ -d .carry/whl ] || { echo "gpu-check: $python lacks the lab's dependencies and there is" \
                              "no .carry/whl (scripts/gpu-carry.sh builds it)" >&2; exit 2; }
  # shellcheck source=scripts/gpu-bootstrap.sh
  . scripts/gpu-bootstrap.sh
fi
exec "$python" benchmarks/gpu_check.py "$@"
