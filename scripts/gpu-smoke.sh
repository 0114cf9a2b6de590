#!/usr/bin/env bash
# GPU smoke test, for users and any machine with a GPU (not CI here: these machines have none).
# Runs the micro study on one GPU; with two or more GPUs, runs it again with its pre-training on
# 2 ranks under DeepSpeed ZeRO-2 in bf16. Evaluation and probes run on the GPU too.
#   bash scripts/gpu-smoke.sh             # run (exits 2 when no GPU is visible)
#   bash scripts/gpu-smoke.sh --dry-run   # print both plans and their cost; needs no GPU (without
#                                         # one it exits 2 after both, as the run would)
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=${LAB:-lab}
DRY=()
[ "${1:-}" = "--dry-run" ] && DRY=(--dry-run)
OUT=${GPU_SMOKE_OUT:-runs/gpu-smoke}
gpus=$(python -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "$gpus" -lt 1 ] && [ ${#DRY[@]} -eq 0 ]; then
  echo "gpu-smoke: no CUDA GPU visible (torch.cuda.device_count() is 0); --dry-run shows the plan" >&2
  exit 2
fi
GPU=(--set resources.device=cuda --set resources.threads=4)
status=0  # a dry run shows both plans even where one refuses (no GPU here), then says so
echo "== one GPU"
$LAB study recipes/mini/micro.yaml --out "$OUT/one-gpu" "${GPU[@]}" "${DRY[@]}" || status=$?
[ "$status" -ne 0 ] && [ ${#DRY[@]} -eq 0 ] && exit "$status"
if [ "$gpus" -ge 2 ] || [ ${#DRY[@]} -gt 0 ]; then
  echo "== two GPUs, ZeRO-2, bf16"
  $LAB study recipes/mini/micro.yaml --out "$OUT/two-gpus" "${GPU[@]}" \
    --set resources.pretrain.processes=2 --set resources.pretrain.deepspeed=zero2 \
    --set pretrain.bf16=true "${DRY[@]}" || status=$?
fi
exit "$status"
