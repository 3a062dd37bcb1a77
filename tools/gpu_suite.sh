#!/usr/bin/env bash
# Every GPU test and benchmark for the torch in this environment, in one device call.
#   SYNCGUARD_GIT_COMMIT=<sha> tools/gpu_suite.sh OUTDIR [full|matrix|extras|poison|detector]
# matrix: what the version matrix and the atlas need (cases/ audited, both snippet corpora with
# their ground truth, the whole tests/gpu suite, overhead and merge benchmarks, the thread stress
# loop); core: matrix without the timings, in two halves a lease may run side by side (audit:
# cases/ and tests/gpu; traces: the profile tests, the device APIs, the corpora, the thread
# stress); overhead: only the timings (the overhead and merge benchmarks); timings: what a lease
# runs alone on the host for one torch (the kinds test against the profiler's trace, the profiler
# scenarios, whose verdicts the detector summary reads, then the overhead group and the summary);
# extras: the mutation experiment, the race
# benchmark and the plugin's sample project (serial, -n 4, -W error); realsuite: another project's
# GPU suite bare vs --syncguard; devrows: the device-side row variant's first measurement;
# detector: issue 44's detector summary (the profiler scenario tests, then
# bench/detector_summary.py reading their verdicts; scenarios and summary: each half alone);
# full: matrix and extras (over the device's 10-minute call limit: make it two calls, matrix then
# extras, in one lease); poison: the sticky-CUDA-error samples. Logs and JSON land in OUTDIR; the
# caller tars OUTDIR into $OUT (the device returns at most 8 files). SYNCGUARD_OVERHEAD_ROUNDS
# (default 216) and SYNCGUARD_SUMMARY_ROUNDS (default 60) set the two benchmarks' rounds.
#
# The GPU machine gets the tree without .git: SYNCGUARD_GIT_COMMIT names the commit it was sent
# from, so every report's provenance names it (src/syncguard/reporting/provenance.py: the
# project's commit and syncguard's own).
#
# CUPTI allows one subscriber per process, and once torch's profiler has run in a process the
# default `cuda` detector cannot subscribe again: steps that run the profiler (the `profile`
# corpus tests, the corpus runner's ground truth) run in processes of their own, after the rest.
set -u
out=${1:?outdir}; what=${2:-full}
mkdir -p "$out"; out=$(cd "$out" && pwd)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
ver=$(python3 -c "import torch; print(torch.__version__.split('+')[0])")
py=python3
step() { local name=$1; shift; local t0=$SECONDS; "$@" > "$out/$name.log" 2>&1; local rc=$?
         echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$out/steps.txt"; tail -3 "$out/$name.log"; }
echo "commit ${SYNCGUARD_GIT_COMMIT:-unknown} dirty ${SYNCGUARD_GIT_DIRTY:-0}" > "$out/gpu.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$out/gpu.txt" 2>&1
$py -c "import torch, sys; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0), sys.version)" >> "$out/gpu.txt" 2>&1
# pytester's subprocess runs (tests/gpu/test_plugin_gpu.py...) find the plugin by its entry point;
# SYNCGUARD_SKIP_INSTALL=1 when an earlier call installed this tree (versions run side by side)
if [ "${SYNCGUARD_SKIP_INSTALL:-0}" != 1 ]; then
  $py -m pip install -q --no-build-isolation --no-deps -e . > "$out/install.log" 2>&1 || cat "$out/install.log"
fi
P="-p no:cacheprovider -q -rfEx"
is() { local m; for m in "$@"; do [ "$what" = "$m" ] && return 0; done; return 1; }
if is matrix full core audit; then
  step "cases-$ver" $py -m pytest $P -n 4 --syncguard cases/ --syncguard-report="$out/cuda-torch-$ver.json"
  step "tests-gpu-$ver" $py -m pytest tests/gpu -q -p no:cacheprovider -rfEx -n 4 -k "not profile"
fi
if is matrix full core traces; then
  # the profiler scenarios and the kinds test run in "timings" (below); each of these tests runs
  # its profiled program in processes of its own, so they spread over workers; their programs'
  # JSON is kept, which says why when a detector and the profiler disagree
  step "tests-gpu-profile-$ver" env SYNCGUARD_SCENARIO_DIR="$out/programs" $py -m pytest tests/gpu -q \
      -p no:cacheprovider -rfEx -n 4 -k "profile and not test_profiler_beside_regions and not test_kinds_agree"
fi
# the kinds test's reference is the profile detector, which reads the profiler's GPU-side rows:
# behind other processes' GPU work those come late or not at all (reports/gpu/lease-d83369b/), so
# it runs where nothing else does
if is matrix full core timings; then
  step "kinds-$ver" env SYNCGUARD_SCENARIO_DIR="$out/programs" $py -m pytest tests/gpu/test_real_programs.py \
      $P -k test_kinds_agree
fi
if is detector scenarios timings; then
  step "profiler-scenarios-$ver" env SYNCGUARD_SCENARIO_DIR="$out/scenarios" $py -m pytest tests/gpu/test_profiler_scenarios.py $P -n 4
fi
# overhead: host-side timings (and the merge benchmark below), so a lease runs them alone on the
# host ("core" elsewhere, then "overhead" per version one after another); the profiler
# configurations cost about 25 times the loop each, so they get fewer rounds
if is matrix full overhead timings; then
  step "overhead-$ver" $py bench/bench_overhead.py --out "$out" --rounds "${SYNCGUARD_OVERHEAD_ROUNDS:-216}" --profiler-rounds 11
  step "overhead-cprofile-$ver" $py bench/bench_overhead.py --out "$out" --cprofile
  # the merge variants' device and host times (the atlas's merge rows, the README's merge table):
  # timings too, so here, alone on the host
  step "merge-split-$ver" $py bench/bench_merge.py --split --out "$out/merge-split-$ver.json"
fi
if is matrix full core traces; then
  # what torch's device APIs answer here: the one-GPU truth of tests/test_predict_shim.py
  step "device-apis-$ver" $py tools/probe_device_apis.py
  step "corpus-$ver" env SYNCGUARD_CORPUS_TRACE=1 $py tools/corpus_report.py --out "$out"
  # a thread syncing while regions open and close (once a crash on torch 2.11.0):
  # 6 processes bare, 6 audited with the default detectors, exit codes counted
  step "stress-threads-$ver" bash -c 'for m in bare audit; do for i in 1 2 3 4 5 6; do
      '"$py"' tools/stress_threads.py $m 300 > "'"$out"'/stress-$m-$i.log" 2>&1; echo "$m rc=$?"; done; done | sort | uniq -c'
fi
C="-c samples/gpu_project/pytest.ini"
if [ "$what" = extras ] || [ "$what" = full ]; then
  step "mutation-$ver" env PYTHON=$py tools/mutation_experiment.sh "$out/mutation-$ver.txt"
  step "races-bench-$ver" $py bench/bench_races.py --out "$out/races-bench-$ver.json"
  step sample-serial $py -m pytest $C samples/gpu_project/tests $P --syncguard --syncguard-report="$out/sample-serial.json"
  step sample-n4 $py -m pytest $C samples/gpu_project/tests $P --syncguard -n 4 --syncguard-report="$out/sample-n4.json"
  step sample-Werror $py -m pytest $C samples/gpu_project/tests $P --syncguard -W error --syncguard-report="$out/sample-Werror.json"
  for r in n4 Werror; do
    step "compare-serial-$r" $py samples/compare_reports.py "$out/sample-serial.json" "$out/sample-$r.json"
  done
fi
# realsuite: an open-source project's own GPU tests, bare vs --syncguard (tools/real_suite.py);
# SYNCGUARD_REAL_SUITE names its tree, SYNCGUARD_REAL_ARGS its pytest arguments,
# SYNCGUARD_REAL_OPTIONS the same without test paths (for the recheck of the tests that differed)
if [ "$what" = realsuite ]; then
  step "real-suite-$ver" $py tools/real_suite.py run "${SYNCGUARD_REAL_SUITE:?}" "$out/real-suite" 2 -- ${SYNCGUARD_REAL_ARGS:?}
  step "real-suite-recheck-$ver" $py tools/real_suite.py recheck "$SYNCGUARD_REAL_SUITE" "$out/real-suite" 3 -- ${SYNCGUARD_REAL_OPTIONS:--p no:cacheprovider -q}
fi
# devrows: the device-side row variant (cases/device_rows.py), first measured: its cases under
# syncguard, the device/host split of every variant (both copy placements), where the host time
# of the two Triton variants goes, and its kernel's program-count sweep
if [ "$what" = devrows ]; then
  step "cases-devrows-$ver" $py -m pytest $P --syncguard cases/test_device_rows.py cases/test_merge.py -k device_rows --syncguard-report="$out/cases-devrows-$ver.json"
  step "merge-split-$ver" $py bench/bench_merge.py --split --out "$out/merge-split-$ver.json"
  step "merge-split-same-stream-$ver" $py bench/bench_merge.py --split --variant triton_device_rows --device-rows-same-stream --out "$out/merge-split-same-stream-$ver.json"
  step "merge-host-phases-$ver" $py bench/bench_merge.py --host-phases --reps 20 --rounds 3 --out "$out/merge-host-phases-$ver.json"
  step "merge-sweep-devrows-$ver" $py bench/bench_merge.py --sweep --variant triton_device_rows --reps 50 --out "$out/merge-sweep-devrows-$ver.json"
fi
# detector: the profiler scenarios (each in processes of its own, their verdicts kept), then the
# summary's timings alone on the host, reading those verdicts: OUTDIR/detector-summary.json
# (scenarios: only the first half, a correctness step a lease may run beside another version's;
# summary: only the second, alone on the host, reading the verdicts the first kept)
if is detector summary timings; then
  step "detector-summary-$ver" $py bench/detector_summary.py --out "$out" --scenarios-from "$out/scenarios" --rounds "${SYNCGUARD_SUMMARY_ROUNDS:-60}"
fi
if [ "$what" = poison ]; then
  step poison-serial $py -m pytest $C samples/gpu_project/poison $P --syncguard --syncguard-report="$out/poison-serial.json"
  step poison-isolate $py -m pytest $C samples/gpu_project/poison $P --syncguard --syncguard-isolate --syncguard-report="$out/poison-isolate.json"
  step poison-n1 $py -m pytest $C samples/gpu_project/poison $P --syncguard -n 1 --syncguard-report="$out/poison-n1.json"
fi
cat "$out/steps.txt"
