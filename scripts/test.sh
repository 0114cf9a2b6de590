#!/usr/bin/env bash
# Install the lab with its test tools and run the test suite.
# Data: LAB_CORPORA names the corpora folder (tests that need it are skipped without it).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export HF_HUB_OFFLINE=1  # a hub look-up otherwise hangs for most of a minute without network
status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests (exit 5)" >&2
  exit 1
fi
exit "$status"
