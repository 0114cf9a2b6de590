#!/usr/bin/env bash
# The Python track's pinned sources (issue 73): the source distributions corpora/python-sources.txt
# lists (name==version sha256), downloaded from PyPI with pip (no install), each checked against
# its sha256 and unpacked into a folder of its own: one package is one repository for
# `lab corpora extract --language python --from DIR` (its split is repository-disjoint).
# usage: bash scripts/fetch-python-sources.sh [DIR]    (default DIR: $LAB_CORPORA/python-sources)
# then:  lab corpora extract --language python --from DIR --out CORPORA/codesearchnet-python
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
list="$root/corpora/python-sources.txt"
out="${1:-${LAB_CORPORA:?give DIR or set LAB_CORPORA}/python-sources}"
pip="${PIP:-$root/.venv/bin/pip}"
if [ -e "$out" ]; then
  echo "fetch-python-sources: $out exists (remove it to fetch again)" >&2
  exit 2
fi
mkdir -p "$(dirname "$out")"
work="$(mktemp -d "${out%/}.tmp-XXXXXX")"
trap 'rm -rf "$work"' EXIT
mkdir "$work/sources"
while read -r spec sha; do
  [[ -z "$spec" || "$spec" == \#* ]] && continue
  mkdir "$work/$spec"
  # the package's sdist (its build tools, which pip runs for its metadata, may be wheels)
  "$pip" download --quiet --no-deps --no-binary "${spec%%==*}" --dest "$work/$spec" "$spec"
  file=("$work/$spec"/*)
  if [ "${#file[@]}" != 1 ] || ! echo "$sha  ${file[0]}" | sha256sum --check --quiet; then
    echo "fetch-python-sources: $list: $spec: the download's sha256 is not $sha" >&2
    exit 2
  fi
  case "${file[0]}" in
    *.zip) python3 -m zipfile -e "${file[0]}" "$work/sources/" ;;
    *) tar -xzf "${file[0]}" -C "$work/sources" ;;
  esac
  echo "$spec $(basename "${file[0]}") sha256 ok"
done < "$list"
cp "$list" "$work/sources/python-sources.txt"
mv "$work/sources" "$out"
echo "fetch-python-sources: $(ls "$out" | grep -vc '\.txt$') packages in $out"
