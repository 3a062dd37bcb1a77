#!/usr/bin/env bash
# Every GPU test and benchmark for the torch in this environment, in one device call.
#   tools/gpu_suite.sh OUTDIR [full|matrix|poison]
# matrix: what the version matrix needs (cases audit, corpus, overhead, merge benchmark), for a
# carried torch; full: matrix + the harness's tests, the race benchmark and the plugin's sample
# project (serial, -n 4, -W error); poison: the sticky-CUDA-error samples. Logs and JSON land in OUTDIR; the
# caller tars OUTDIR into $OUT (the device returns at most 8 files).
set -u
out=${1:?outdir}; what=${2:-full}
mkdir -p "$out"; out=$(cd "$out" && pwd)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
ver=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
py=python3
step() { local name=$1; shift; local t0=$SECONDS; "$@" > "$out/$name.log" 2>&1; local rc=$?
         echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$out/steps.txt"; tail -3 "$out/$name.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1
$py -c "import torch, sys; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), sys.version)" >> "$out/gpu.txt" 2>&1
if [ "$what" != poison ]; then
step "cases-$ver" $py -m pytest -p syncguard.plugin --syncguard cases/ -q -p no:cacheprovider -rfEx \
     --syncguard-report="$out/cuda-torch-$ver.json"
step "corpus-$ver" $py tools/corpus_report.py --out "$out"
step "overhead-$ver" $py bench/bench_overhead.py --out "$out" --rounds 7
step "merge-bench-$ver" $py bench/bench_merge.py --out "$out/merge-bench-$ver.json"
fi
P="-p syncguard.plugin -p no:cacheprovider -q"; C="-c samples/gpu_project/pytest.ini"
if [ "$what" = full ]; then
  # the profile-detector tests in their own process: once the profiler has run, CUPTI keeps its
  # subscriber and the default cuda detector cannot subscribe (test_corpus.py's docstring)
  step "tests-gpu-$ver" $py -m pytest tests/gpu tests/test_detect.py -q -p no:cacheprovider -k "not profile"
  step "tests-gpu-profile-$ver" $py -m pytest tests/gpu tests/test_detect.py -q -p no:cacheprovider -k profile
  step "races-bench-$ver" $py bench/bench_races.py --out "$out/races-bench-$ver.json"
  step sample-serial $py -m pytest $C samples/gpu_project/tests $P --syncguard --syncguard-report="$out/sample-serial.json"
  step sample-n4 $py -m pytest $C samples/gpu_project/tests $P --syncguard -n 4 --syncguard-report="$out/sample-n4.json"
  step sample-Werror $py -m pytest $C samples/gpu_project/tests $P --syncguard -W error --syncguard-report="$out/sample-Werror.json"
  step sample-warn-Werror $py -m pytest $C samples/gpu_project/tests $P --syncguard --syncguard-mode=warn \
       -W error::UserWarning --syncguard-report="$out/sample-warn-Werror.json"
  for r in n4 Werror warn-Werror; do
    step "compare-serial-$r" $py samples/compare_reports.py "$out/sample-serial.json" "$out/sample-$r.json"
  done
fi
if [ "$what" = poison ]; then
  step poison-serial $py -m pytest $C samples/gpu_project/poison $P --syncguard --syncguard-report="$out/poison-serial.json"
  step poison-isolate $py -m pytest $C samples/gpu_project/poison $P --syncguard --syncguard-isolate --syncguard-report="$out/poison-isolate.json"
  step poison-n1 $py -m pytest $C samples/gpu_project/poison $P --syncguard -n 1 --syncguard-report="$out/poison-n1.json"
fi
cat "$out/steps.txt"
