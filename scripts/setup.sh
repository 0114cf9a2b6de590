#!/usr/bin/env bash
# Set up the lab on a fresh machine: a virtual environment in .venv with the lab installed.
#   bash scripts/setup.sh          # the lab
#   bash scripts/setup.sh --dev    # the lab, its test tools and DeepSpeed (the distributed tests)
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

# What this set-up installs from: a second run with the same inputs (CI's second test command)
# checks nothing again (28 s of pip resolving otherwise).
# A plain set-up is satisfied by a --dev one (a superset) from the same inputs.
stamp=".venv/.lab-setup"
sources="$(cat pyproject.toml scripts/setup.sh scripts/install_wordnet.sh | sha256sum | cut -c1-16)"
torch_spec="${LAB_TORCH_SPEC:-torch==2.13.0}"
inputs="$sources ${extras:-plain} $torch_spec"
done_before="$(cat "$stamp" 2> /dev/null || true)"
if { [ "$done_before" = "$inputs" ] || { [ -z "$extras" ] && [ "$done_before" = "$sources [dev] $torch_spec" ]; }; } \
   && .venv/bin/python -c "import lab" 2> /dev/null; then
  echo "lab installed in $(pwd)/.venv (set up already from these inputs: $stamp)"
  exit 0
fi
rm -f "$stamp"

# torch is pinned before anything can ask for it: an unpinned 'torch' resolves to a multi-GB
# CUDA build. GPU users may set LAB_TORCH_SPEC (for example "torch==2.13.0" from their index).
pip install "${LAB_TORCH_SPEC:-torch==2.13.0}"
pip install -e ".${extras}"
if [ -n "$extras" ]; then
  # DeepSpeed ships as a source package whose build imports torch: built without isolation
  # against the torch above (an isolated build would pull a multi-GB CUDA torch) and with no
  # ops compiled ahead of time (DS_BUILD_OPS=0; the few it needs are compiled on first use).
  pip install "setuptools>=68"
  DS_BUILD_OPS=0 pip install --no-build-isolation "deepspeed>=0.14"
  # lm-evaluation-harness's decontamination code, which tests/test_decontam_sources.py runs
  # beside the lab's n-gram methods (docs/decontam.md, "Faithful to which source"): installed
  # without its dependencies (datasets, evaluate, peft, sacrebleu, an unpinned torch, ...); the
  # one module used, lm_eval.decontamination.janitor, needs the standard library alone.
  pip install --no-deps "lm_eval==0.4.13"
  # The HTML report's browser test drives Debian's Chromium (Selenium, chromium-driver); on a
  # machine where apt-get cannot run as root, that test is skipped with its reason.
  if ! command -v chromium > /dev/null || ! command -v chromedriver > /dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
         chromium chromium-driver > /dev/null) \
        || echo "setup: could not install chromium (the HTML browser test will be skipped)" >&2
    else
      echo "setup: no chromium/chromedriver (the HTML browser test will be skipped)" >&2
    fi
  fi
fi

# WordNet 3.0 for METEOR, offline, into .venv/nltk_data (the Docker image runs the same script).
bash scripts/install_wordnet.sh .venv/bin/python
echo "$inputs" > "$stamp"
echo "lab installed in $(pwd)/.venv: activate with '. .venv/bin/activate'"
