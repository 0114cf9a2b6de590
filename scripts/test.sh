#!/usr/bin/env bash
# Install the lab with its test tools and run the test suite.
# Data: LAB_CORPORA names the corpora folder (tests that need it are skipped without it).
# The default run leaves out the tests marked `long` (12.1 min (docs/times.md: tests-fast) on two
# cores);
# `--long` runs only those (CI runs both). Other arguments go to pytest.
set -euo pipefail
selection="not long"
if [ "${1:-}" = "--long" ]; then
  selection="long"
  shift
fi
# Tests run the CLI from temporary folders: a relative LAB_CORPORA must not change meaning there.
if [ -n "${LAB_CORPORA:-}" ] && [ -d "$LAB_CORPORA" ]; then
  LAB_CORPORA="$(cd "$LAB_CORPORA" && pwd)"
  export LAB_CORPORA
fi
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export HF_HUB_OFFLINE=1  # a hub look-up otherwise hangs for most of a minute without network
# One pytest worker per core (pytest-xdist), each kept to its core by tests/conftest.py: every
# torch in it then runs one thread, and no two threads wait on a core another process holds
# (a micro pre-training took 11x longer on two threads beside a busy core). worksteal: the
# long tests' minutes are shared out as they finish. LAB_TEST_WORKERS=1 runs them in order.
workers="${LAB_TEST_WORKERS:-$(nproc)}"
parallel=()
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers" --dist worksteal)
fi
status=0
.venv/bin/python -m pytest -m "$selection" "${parallel[@]}" "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests (exit 5)" >&2
  exit 1
fi
exit "$status"
