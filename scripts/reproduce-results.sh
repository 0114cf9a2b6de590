#!/usr/bin/env bash
# Every committed study's report, recomputed from its committed tables (results/<study>/), into a
# temporary folder, and the check that the READMEs quote what it recomputes
# (tests/test_results_reproduce.py). Usage: bash scripts/reproduce-results.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for study in mini-rq5-epoch-sweep mini-rq4-paired; do
  cp -r "results/$study" "$work/$study"
  echo "== results/$study"
  .venv/bin/lab report "$work/$study" --no-html
  cat "$work/$study/report/primary.md"
done
.venv/bin/python -m pytest -q tests/test_results_reproduce.py
