#!/usr/bin/env bash
# The mutation experiment: a merge variant made to drop a dtype, or to sync once
# more, must fail the suite. Each mutation is applied to a throwaway copy of the tree (never to
# this one), the relevant cases run, and the outcome is logged; the experiment passes only when
# every mutant is caught (pytest exit 1) and the unmutated tree passes.
#
#   tools/mutation_experiment.sh [LOG]      # default LOG: reports/<cpu|gpu>/mutation-<torch>.log
#
# On a CPU machine the sync mutants are caught by prediction: each tree also runs
# cases/test_merge.py -k test_declared_sync under CPU CI's flags (--syncguard --syncguard-predict
# --syncguard-mode=fail, as .ci/run does); on the GPU they are measured.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
TORCH=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))')
KIND=$([ "$CUDA" = 1 ] && echo gpu || echo cpu)
LOG=${1:-$ROOT/reports/$KIND/mutation-$TORCH.log}
mkdir -p "$(dirname "$LOG")"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# name | variant whose tests run for it | the tests (-k) that must catch it | file | python
# snippet: one replacement (old -> new) applied with str.replace, count 1
MUTANTS=(
  "drop-bf16|index_copy_rows|test_declared_dtype_support|cases/merge.py|    name = \"index_copy_rows\"\n|    name = \"index_copy_rows\"\n    if inputs_embeds.dtype == torch.bfloat16:  # MUTANT\n        raise NotImplementedError('\"index_copy\" not implemented for \\\\'BFloat16\\\\'')\n"
  "clean-variant-syncs|index_copy_rows|test_declared_sync|cases/merge.py|    inputs_embeds.index_copy_(0, rows, mm)\n|    inputs_embeds.index_copy_(0, rows, mm)\n    if on_cuda:  # MUTANT: one host wait more\n        torch.cuda.current_stream().synchronize()\n"
  "clean-variant-calls-item|index_copy_rows|test_declared_sync|cases/merge.py|    name = \"index_copy_rows\"\n|    name = \"index_copy_rows\"\n    if int(is_multimodal.to(inputs_embeds.device).sum().item()) < 0:  # MUTANT: issue 17's\n        raise ValueError(name)\n"
  "syncing-variant-syncs-more|index_put_gpu_mask|test_declared_sync|cases/merge.py|    rows = torch.nonzero(is_multimodal).flatten()  # the sync\n|    rows = torch.nonzero(is_multimodal).flatten()  # the sync\n    if rows.is_cuda:  # MUTANT: a second wait\n        torch.cuda.current_stream().synchronize()\n"
)

# The plugin comes from an installed syncguard's entry point, or is named with -p: never both.
PLUGIN=$("$PY" -c 'import importlib.metadata as md
try:
    md.distribution("syncguard")
except md.PackageNotFoundError:
    print("-p syncguard.plugin")')

run_case() {  # tree variant-expression tests-expression
  # shellcheck disable=SC2086
  (cd "$1" && PYTHONPATH="$1" "$PY" -m pytest -q -p no:cacheprovider $PLUGIN \
      cases/test_merge.py -k "($3) and ($2)" 2>&1 | tail -25)
  if [ "$CUDA" = 0 ] && [[ "$3" == *test_declared_sync* ]]; then
    # CPU CI's prediction step runs the sync declarations only (.ci/run leaves the dtype table,
    # GPU-only, out of it)
    echo "-- under --syncguard-predict --syncguard-mode=fail (CPU CI):"
    # shellcheck disable=SC2086
    (cd "$1" && PYTHONPATH="$1" "$PY" -m pytest -q -p no:cacheprovider $PLUGIN \
        cases/test_merge.py -k "test_declared_sync and ($2)" --syncguard --syncguard-predict \
        --syncguard-mode=fail 2>&1 | tail -25)
  fi
}

# read before the log is opened: tee truncating a committed log would make the tree look dirty
TREE="${SYNCGUARD_GIT_COMMIT:-$(git -C "$ROOT" rev-parse HEAD)}$(
  [ -n "${SYNCGUARD_GIT_COMMIT:-}" ] || git -C "$ROOT" diff --quiet || echo ' (dirty)')"
{
  echo "# mutation experiment: torch $("$PY" -c 'import torch; print(torch.__version__)'), cuda=$CUDA, $(date -u +%FT%TZ)"
  # the GPU machine gets the tree without .git: SYNCGUARD_GIT_COMMIT names the commit sent
  echo "# tree: $TREE"
  echo "# selection: cases/test_merge.py -k '(<the tests named for the mutant>) and (<its variant>)'; the unmutated tree runs all of them"
  caught=0; missed=0
  cp -r "$ROOT" "$WORK/base"; rm -rf "$WORK/base/.hypothesis" "$WORK/base/.carry" "$WORK/base/.devtree"
  echo; echo "## unmutated"
  # each mutant runs only its variant's tests that must catch it (with the property tests too,
  # one tree took over 3 minutes on the H200, and a lease ended before the last mutants ran);
  # the base runs them all
  all_variants=$(printf '%s\n' "${MUTANTS[@]}" | cut -d'|' -f2 | sort -u | paste -sd'|' | sed 's/|/ or /g')
  all_tests=$(printf '%s\n' "${MUTANTS[@]}" | cut -d'|' -f3 | sort -u | paste -sd'|' | sed 's/|/ or /g')
  out=$(run_case "$WORK/base" "$all_variants" "$all_tests")
  echo "$out" | grep -E "^(FAILED|ERROR|-- )|passed|failed" | head -20
  if echo "$out" | grep -qE '(^| )[0-9]+ (failed|errors?)'; then
    echo "=> the unmutated tree FAILS: the experiment below proves nothing"
  fi
  for m in "${MUTANTS[@]}"; do
    IFS='|' read -r name variant tests file old new <<<"$m"
    tree="$WORK/$name"; cp -r "$WORK/base" "$tree"
    "$PY" - "$tree/$file" "$old" "$new" <<'PYEOF'
import sys
path, old, new = sys.argv[1], sys.argv[2].encode().decode("unicode_escape"), sys.argv[3].encode().decode("unicode_escape")
text = open(path).read()
assert text.count(old) >= 1, f"mutation anchor not found in {path}: {old!r}"
open(path, "w").write(text.replace(old, new, 1))
PYEOF
    echo; echo "## mutant: $name ($tests of $variant)"
    out=$(run_case "$tree" "$variant" "$tests")
    echo "$out" | grep -E "^(FAILED|ERROR|-- )|passed|failed" | head -20
    if echo "$out" | grep -qE '(^| )[0-9]+ (failed|errors?)'; then
      echo "=> caught"; caught=$((caught+1))
    else
      echo "=> NOT caught"
      missed=$((missed+1))
    fi
  done
  echo; echo "# caught $caught, not caught $missed, of ${#MUTANTS[@]} mutants"
} | tee "$LOG"
