#!/usr/bin/env bash
# Every committed study's tables, recomputed from its committed files (results/<study>/) in a
# temporary folder, and the check that the READMEs quote what it recomputes
# (tests/test_results_reproduce.py). Usage: bash scripts/reproduce-results.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for study in mini-rq5-epoch-sweep mini-rq4-paired decontam decontam-embedded; do
  cp -r "results/$study" "$work/$study"
  echo "== results/$study"
  .venv/bin/lab report "$work/$study" --no-html
  cat "$work/$study/report/primary.md"
  if [ -f "$work/$study/report/decontam.md" ]; then cat "$work/$study/report/decontam.md"; fi
done
# results/timing keeps no results.csv: its forgetting table is rendered from samples.csv.
cp -r results/timing "$work/timing"
.venv/bin/python results/timing/forgetting_table.py "$work/timing"
echo "== results/timing" && cat "$work/timing/timing.md"
# The detectors' leaderboard, from the committed per-model scores.
mkdir "$work/detect" && cp results/detect/detect.csv "$work/detect/"
.venv/bin/python -m lab.detect.leaderboard "$work/detect/detect.csv" >/dev/null
echo "== results/detect" && cat "$work/detect/leaderboard.md"
.venv/bin/python -m pytest -q tests/test_results_reproduce.py
