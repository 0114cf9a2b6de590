#!/usr/bin/env bash
# Set up the lab on a fresh machine: a virtual environment in .venv with the lab installed.
#   bash scripts/setup.sh          # the lab
#   bash scripts/setup.sh --dev    # the lab and its test tools
# Works offline except for the package registries. Re-running it is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
[ "${1:-}" = "--dev" ] && extras="[dev]"

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

# torch is pinned before anything can ask for it: an unpinned 'torch' resolves to a multi-GB
# CUDA build. GPU users may set LAB_TORCH_SPEC (for example "torch==2.13.0" from their index).
pip install "${LAB_TORCH_SPEC:-torch==2.13.0}"
pip install -e ".${extras}"
echo "lab installed in $(pwd)/.venv: activate with '. .venv/bin/activate'"
