#!/usr/bin/env bash
# Set up the lab on a fresh machine: a virtual environment in .venv with the lab installed.
#   bash scripts/setup.sh                 # the lab (CPU torch)
#   bash scripts/setup.sh --dev           # the lab, its test tools and DeepSpeed (the distributed tests)
#   bash scripts/setup.sh --cuda 12.8     # on a GPU node: torch's CUDA 12.8 build, the rest as on CPU
#   bash scripts/setup.sh --cuda 12.8 --dry-run   # what it would install, installing nothing
# --torch-index-url URL (or LAB_TORCH_INDEX_URL) takes torch from any index, as the Dockerfile's
# TORCH_INDEX_URL does; --cuda X.Y is the index of PyTorch's CUDA X.Y builds. LAB_TORCH_SPEC picks
# another torch version. Works offline except for the package registries. Re-running it is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bash scripts/setup.sh [--dev] [--cuda X.Y | --torch-index-url URL] [--dry-run]" >&2; exit 2; }
extras=""
dry_run=""
cuda=""
torch_index="${LAB_TORCH_INDEX_URL:-}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dev) extras="[dev]" ;;
    --dry-run) dry_run=1 ;;
    --cuda)
      [ $# -ge 2 ] || usage
      if ! [[ "$2" =~ ^[0-9]+\.[0-9]+$ ]]; then
        echo "setup: --cuda $2: give the CUDA version as X.Y, e.g. 12.8" >&2; exit 2
      fi
      cuda="cu${2//./}"; torch_index="https://download.pytorch.org/whl/$cuda"; shift ;;
    --torch-index-url) [ $# -ge 2 ] || usage; torch_index="$2"; shift ;;
    *) echo "setup: unknown option $1" >&2; usage ;;
  esac
  shift
done

python=${PYTHON:-python3}
# The CUDA build by its local version (2.13.0+cu128): a plain ==2.13.0 is met by a CPU build already
# in .venv, which pip would then keep.
torch_spec="${LAB_TORCH_SPEC:-torch==2.13.0${cuda:++$cuda}}"
torch_source=(${torch_index:+--index-url "$torch_index"})
if [ -n "$dry_run" ]; then
  # The plan, one command a line, as the steps below run them.
  echo "$python -m venv .venv"
  echo "pip install ${torch_source[*]:+${torch_source[*]} }$torch_spec"
  echo "pip install -e .${extras}"
  [ -n "$extras" ] && echo "pip install --no-build-isolation deepspeed>=0.14 (DS_BUILD_OPS=0); pip install --no-deps lm_eval==0.4.13; as root: apt-get install slurm-wlm munge chromium chromium-driver"
  echo "bash scripts/install_wordnet.sh .venv/bin/python"
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check -q "$@"; }

# What this set-up installs from: a second run with the same inputs (CI's second test command)
# checks nothing again (28 s of pip resolving otherwise).
# A plain set-up is satisfied by a --dev one (a superset) from the same inputs.
stamp=".venv/.lab-setup"
sources="$(cat pyproject.toml scripts/setup.sh scripts/install_wordnet.sh | sha256sum | cut -c1-16)"
inputs="$sources ${extras:-plain} $torch_spec${torch_index:+ from $torch_index}"
done_before="$(cat "$stamp" 2> /dev/null || true)"
if { [ "$done_before" = "$inputs" ] || { [ -z "$extras" ] && [ "$done_before" = "$sources [dev] $torch_spec${torch_index:+ from $torch_index}" ]; }; } \
   && .venv/bin/python -c "import lab" 2> /dev/null; then
  echo "lab installed in $(pwd)/.venv (set up already from these inputs: $stamp)"
  exit 0
fi
rm -f "$stamp"

# torch is pinned before anything can ask for it: an unpinned 'torch' resolves to a multi-GB
# CUDA build. On a GPU node --cuda X.Y takes the same version's CUDA build from PyTorch's index.
pip install "${torch_source[@]}" "$torch_spec"
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
  # tests/test_slurm.py runs a study through a one-node SLURM cluster of Debian's slurm-wlm and
  # munge (scripts/slurm-local.sh); where apt-get cannot run as root, that test is skipped.
  if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    bash scripts/slurm-local.sh install \
      || echo "setup: could not install slurm-wlm and munge (the SLURM test will be skipped)" >&2
  fi
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
