# Source this (bash) from the repository root on a lent GPU machine, after the working tree
# arrived there with .carry/ (built here by scripts/gpu-carry.sh, named in the device run's carry):
#   . scripts/gpu-bootstrap.sh && lab study recipes/quickstart.yaml --out "$OUT/qs" ...
# It installs .carry/whl/*.whl into /tmp/site (no network, no dependency resolution: the wheels
# are the complete list of what the image lacks), unpacks WordNet under /tmp, and exports:
#   PYTHONPATH=/tmp/site:<repo>   the carried packages and the lab itself (not installed)
#   PATH=/tmp/bin:/tmp/site/bin:… a `lab` command (python3 -m lab.cli), `deepspeed`, and
#                                 `python` where only python3 exists (scripts/gpu-smoke.sh)
#   LAB_CORPORA=<repo>/.carry/corpora, NLTK_DATA=/tmp/lab-nltk_data, HF_HUB_OFFLINE=1
# Sourcing it again is cheap (the install is skipped while the wheels are unchanged). It never
# exits the calling shell: on an error it says why and returns 1.
# Overrides (for tests elsewhere): LAB_CARRY_WHL (wheel folder), LAB_SITE (install folder).

_lab_gpu_bootstrap() {
  local root py whl site nltk marker stamp
  root=$(cd "$(dirname "${BASH_SOURCE[0]:-scripts/x}")/.." && pwd) || return 1
  py=$(command -v python3) || { echo "gpu-bootstrap: no python3 on PATH" >&2; return 1; }
  whl=${LAB_CARRY_WHL:-$root/.carry/whl}
  site=${LAB_SITE:-/tmp/site}
  nltk=/tmp/lab-nltk_data
  if ! compgen -G "$whl/*.whl" > /dev/null; then
    echo "gpu-bootstrap: no wheels in $whl (build .carry with scripts/gpu-carry.sh and carry it)" >&2
    return 1
  fi

  # Wheels: --target ignores what the image already has (a package importable there is
  # installed again under /tmp/site, which comes first on PYTHONPATH); --upgrade replaces an
  # earlier install. Skipped when this very set of wheels is already installed.
  stamp=$(cd "$whl" && ls -l -- *.whl | "$py" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')
  if [ "$(cat "$site/.lab-carry" 2> /dev/null)" != "$stamp" ]; then
    "$py" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
      --no-cache-dir --upgrade --target "$site" "$whl"/*.whl \
      || { echo "gpu-bootstrap: pip could not install $whl/*.whl into $site" >&2; return 1; }
    echo "$stamp" > "$site/.lab-carry"
  fi

  # WordNet 3.0 (METEOR): unpacked once; NLTK refuses data in group- or world-writable folders.
  marker=$nltk/corpora/wordnet/data.noun
  if [ ! -f "$marker" ]; then
    if [ -f "$root/.carry/nltk_data/wordnet.tar.xz" ]; then
      (umask 022 && mkdir -p "$nltk/corpora" && "$py" -c '
import sys, tarfile
with tarfile.open(sys.argv[1]) as tar:
    tar.extractall(sys.argv[2], filter="data")' "$root/.carry/nltk_data/wordnet.tar.xz" "$nltk/corpora") \
        || { echo "gpu-bootstrap: could not unpack WordNet into $nltk" >&2; return 1; }
    else
      echo "gpu-bootstrap: no .carry/nltk_data/wordnet.tar.xz: METEOR will fail" >&2
    fi
  fi

  # The lab, run from this checkout: a `lab` command that carries its environment with it.
  mkdir -p /tmp/bin || return 1
  cat > /tmp/bin/lab <<EOF
#!/bin/sh
export PYTHONPATH="$site:$root\${PYTHONPATH:+:\$PYTHONPATH}"
export LAB_CORPORA="\${LAB_CORPORA:-$root/.carry/corpora}" NLTK_DATA="\${NLTK_DATA:-$nltk}"
export HF_HUB_OFFLINE=1
exec "$py" -m lab.cli "\$@"
EOF
  chmod +x /tmp/bin/lab || return 1
  command -v python > /dev/null || ln -sf "$py" /tmp/bin/python

  case ":${PYTHONPATH:-}:" in *":$site:$root:"*) ;; *) export PYTHONPATH="$site:$root${PYTHONPATH:+:$PYTHONPATH}" ;; esac
  case ":$PATH:" in *":/tmp/bin:$site/bin:"*) ;; *) export PATH="/tmp/bin:$site/bin:$PATH" ;; esac
  export LAB_CORPORA="$root/.carry/corpora" NLTK_DATA="$nltk" HF_HUB_OFFLINE=1

  # What the carried wheels need of the image, by version (a warning, not a failure).
  "$py" - "$whl" <<'PY' || true
import sys
from importlib import metadata
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

carried = {parse_wheel_filename(w.name)[0] for w in Path(sys.argv[1]).glob("*.whl")}
problems = []
for name in sorted(carried):
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        problems.append(f"{name} not installed")
        continue
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            problems.append(f"{name} needs {req}: missing")
            continue
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            problems.append(f"{name} needs {req}: found {have}")
if problems:
    print("gpu-bootstrap: warning: " + "; ".join(problems), file=sys.stderr)
PY
  echo "gpu-bootstrap: $(ls "$whl"/*.whl | wc -l) wheels in $site; set PYTHONPATH=$site:$root," \
       "PATH=/tmp/bin:$site/bin:... (lab = $py -m lab.cli), LAB_CORPORA=$LAB_CORPORA," \
       "NLTK_DATA=$NLTK_DATA, HF_HUB_OFFLINE=1"
}
_lab_gpu_bootstrap
_lab_gpu_bootstrap_rc=$?
unset -f _lab_gpu_bootstrap
# shellcheck disable=SC2317  # return when sourced, exit when run as a script
return $_lab_gpu_bootstrap_rc 2> /dev/null || exit $_lab_gpu_bootstrap_rc
