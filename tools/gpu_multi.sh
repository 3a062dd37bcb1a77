#!/usr/bin/env bash
# The several-GPU run (nvidia-h200-x2 or larger): one xdist worker per GPU, cross-device cases,
# and the same cases/ audit serial vs -n <#GPUs> (reports compared, wall times recorded).
#   tools/gpu_multi.sh OUTDIR
set -u
out=${1:?outdir}; mkdir -p "$out"; out=$(cd "$out" && pwd)
# NVLink multicast stays off (the device README: it can take the host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-gpu}
n=$(python3 -c "import torch; print(torch.cuda.device_count())")
P="-p syncguard.plugin -p no:cacheprovider -q -rfEx"
nvidia-smi -L > "$out/gpus.txt" 2>&1; nvidia-smi topo -m >> "$out/gpus.txt" 2>&1
timed() { local name=$1; shift; local t0; t0=$(date +%s%N); "$@" > "$out/$name.log" 2>&1; local rc=$?
          local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
          echo "$name rc=$rc wall_ms=$ms" | tee -a "$out/steps.txt"; tail -2 "$out/$name.log"; }
timed "multigpu-n$n" python3 -m pytest cases/test_multigpu.py $P --syncguard -n "$n" --syncguard-report="$out/multigpu-n$n.json"
timed multigpu-serial python3 -m pytest cases/test_multigpu.py $P --syncguard --syncguard-report="$out/multigpu-serial.json"
timed cases-serial python3 -m pytest cases $P --syncguard --syncguard-report="$out/cases-serial.json"
timed "cases-n$n" python3 -m pytest cases $P --syncguard -n "$n" --syncguard-report="$out/cases-n$n.json"
timed compare-cases python3 samples/compare_reports.py "$out/cases-serial.json" "$out/cases-n$n.json"
cat "$out/steps.txt"
