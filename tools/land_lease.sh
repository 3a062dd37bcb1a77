#!/usr/bin/env bash
# Land what a lease collected (tools/device_lease.sh collect NAME -> NAME.tgz) as the committed
# evidence, then regenerate everything that is rendered from it.
#
#   tools/land_lease.sh DIR        (the CPU machine, from the repository root, syncguard installed)
#
# Each DIR/NAME.tgz holds one torch's folder of tools/gpu_suite.sh. Its torch version (from its
# gpu.txt) names where it lands: the folder replaces reports/gpu/<v>/ whole, and the files the
# version matrix and the atlas read move to where they read them (reports/cuda-torch-<v>.json,
# reports/atlas-runs/corpus-run-<v>.{json,md} and merge-split-<v>.json). Every folder is checked
# before anything is replaced: a version twice, or a folder without its gpu.txt, stops it first.
# Then the matrix (reports/matrix.md), the atlas (reports/atlas.md), reports/gpu/README.md, the
# overhead intervals and the docs' generated figures are rendered again (LAND_REPORT_ARGS: more
# arguments for the matrix's `syncguard report`, e.g. --update-baseline once the change is read).
set -euo pipefail
dir=${1:?usage: tools/land_lease.sh DIR}
[ -f pyproject.toml ] && [ -d reports/gpu ] || { echo "land_lease: run it from the repository root" >&2; exit 2; }
ls "$dir"/*.tgz > /dev/null 2>&1 || { echo "land_lease: no collected .tgz in $dir" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
declare -A seen=()
for t in "$dir"/*.tgz; do
  name=$(basename "$t" .tgz)
  mkdir -p "$tmp/$name" && tar xzf "$t" -C "$tmp/$name"
  folder="$tmp/$name/$name"
  [ -f "$folder/gpu.txt" ] || { echo "land_lease: $t has no $name/gpu.txt" >&2; exit 1; }
  ver=$(grep -oE '^[0-9]+\.[0-9]+\.[0-9]+\+' "$folder/gpu.txt" | head -1 | tr -d +)
  [ -n "$ver" ] || { echo "land_lease: $folder/gpu.txt names no torch version" >&2; exit 1; }
  [ -z "${seen[$ver]:-}" ] || { echo "land_lease: torch $ver twice (${seen[$ver]}, $name)" >&2; exit 1; }
  seen[$ver]=$folder
done
for ver in "${!seen[@]}"; do
  folder=${seen[$ver]}
  for f in "cuda-torch-$ver.json" "corpus-run-$ver.json" "corpus-run-$ver.md" "merge-split-$ver.json"; do
    if [ -f "$folder/$f" ]; then
      case $f in cuda-torch-*) to=reports ;; *) to=reports/atlas-runs ;; esac
      mv "$folder/$f" "$to/$f"
    fi
  done
  rm -rf "reports/gpu/$ver" && mv "$folder" "reports/gpu/$ver"
  echo "land_lease: torch $ver -> reports/gpu/$ver/ ($(grep -c . "reports/gpu/$ver/steps.txt" 2>/dev/null || echo 0) steps)"
done
python -m syncguard report "reports/*-torch-*.json" --baseline reports/baseline.json --format markdown \
    --output reports/matrix.md ${LAND_REPORT_ARGS:-} || echo "land_lease: the matrix was not rendered (see above)" >&2
python -m syncguard atlas "reports/atlas-runs/*.json" --format markdown --output reports/atlas.md
python tools/gpu_provenance.py
python tools/overhead_ci.py --out reports/gpu/overhead-ci.md
python tools/readme_figures.py --write
