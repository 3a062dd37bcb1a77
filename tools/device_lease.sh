#!/usr/bin/env bash
# One device lease, several torch versions side by side: the GPU suite runs in the background
# (setsid, so it outlives the call that started it) while later calls carry the next torch in.
# Each queue runs one job at a time: a job started while its queue is busy waits its turn (flock
# on /tmp/gpuN.lock), so a version can be queued the moment its carry is assembled. A GPU is one
# queue ("0"), or several lanes of it ("0", "0b": one device, jobs side by side).
# Run on the GPU machine through the device tool, from the repository root:
#
#   start SHA [WHAT]   copy the tree to /tmp/tree, install it (editable), queue the image's
#                      torch on GPU 0: tools/gpu_suite.sh WHAT (default matrix) -> /tmp/r/base/
#   extras GPU         queue the image's torch's extras (mutation experiment first) on GPU
#                      -> /tmp/r/extras/
#   poison GPU         queue the image's torch's poison samples on GPU -> /tmp/r/poison/
#   realsuite GPU DIR ARGS
#                      queue tools/real_suite.py over another project's tree DIR (carried, with
#                      its wheels under .devtree/) on GPU -> /tmp/r/realsuite/
#   run VERSION GPU [WHAT]
#                      after carry-torch's calls: queue that torch's gpu_suite.sh WHAT (default
#                      matrix) on GPU -> /tmp/r/VERSION/
#   suite NAME GPU WHAT [AFTER...]
#                      queue gpu_suite.sh WHAT for base (the image's torch) or a carried VERSION on
#                      GPU, into the same folder -> NAME-WHAT.done, once each job AFTER (its .done
#                      name, e.g. "base" or "2.14.1-timings") is done. A VERSION whose chunks were
#                      copied to /tmp/chunks-VERSION (tools/carry_chunks.sh) is assembled in the
#                      background at once, one assembly at a time, and the job waits for that
#                      assembly before it runs, so its last chunk's call returns at once
#                      (a lease runs "timings" alone on the host, "audit" and "traces" for the
#                      rest: host timings with no neighbour)
#   assemble VERSION   install a carried torch from the chunks copied to /tmp/chunks-VERSION
#                      (tools/carry_chunks.sh's calls) into /tmp/torch-VERSION, once, one version
#                      at a time -> /tmp/r/assemble-VERSION.log
#   wait FILE SECONDS  block until FILE exists (a call must be running, or the machine is given
#                      back after ~30 s idle and every background run dies with it)
#   status | collect NAME (tar /tmp/r/NAME into $OUT)
#
# Lessons it encodes (a lease's runs were lost to the idle release): keep a call running while
# background runs work (`wait`), collect each version as soon as it is done, and write
# everything under /tmp/r so that `collect` can return what exists even mid-run.
set -u
cmd=${1:?command}; shift
R=/tmp/r
queue() {  # GPU NAME COMMAND: run COMMAND on GPU after that GPU's earlier jobs; NAME.done after.
  # GPU may carry a lane letter ("0b"): the same device, its own queue, so correctness steps of
  # two versions share one GPU side by side (timings never: "overhead" runs alone on the host)
  export SYNCGUARD_GIT_COMMIT=$(cat $R/sha) SYNCGUARD_SKIP_INSTALL=1 CUDA_VISIBLE_DEVICES=${1%%[a-z]*}
  setsid nohup flock /tmp/gpu$1.lock bash -c "$3; touch $R/$2.done" > $R/bg-$2.log 2>&1 < /dev/null &
  echo "queued $2 on GPU $1"
}
case $cmd in
start)
  SHA=$1
  rm -rf /tmp/tree && mkdir -p /tmp/tree $R && cp -a . /tmp/tree && rm -rf /tmp/tree/.carry
  echo "$SHA" > $R/sha
  cd /tmp/tree
  python3 -m pip install -q --no-build-isolation --no-deps -e . > $R/install.log 2>&1 || cat $R/install.log
  nvidia-smi -L
  queue 0 base "tools/gpu_suite.sh /tmp/r/base ${2:-matrix}"
  ;;
suite)
  N=$1; G=$2; W=$3; shift 3
  cd /tmp/tree
  pre=""
  for a in "$@"; do pre="$pre until [ -f $R/$a.done ]; do sleep 5; done;"; done
  if [ "$N" != base ]; then
    # the assembly starts now, while the job may still wait its turn (it is a file copy and an
    # unpack, light beside another version's timings); the job's own call finds it done
    setsid nohup tools/device_lease.sh assemble "$N" > /dev/null 2>&1 < /dev/null &
    pre="$pre tools/device_lease.sh assemble $N && . /tmp/torch-$N.env &&"
  fi
  queue "$G" "$N-$W" "$pre tools/gpu_suite.sh /tmp/r/$N $W"
  ;;
assemble)
  # a carried torch installed from the chunks copied to /tmp/chunks-VERSION: once (its env file
  # says it is done) and one at a time (carry-torch's assemble.sh works in /tmp/carry)
  V=${1:?version}; mkdir -p $R
  flock /tmp/assemble.lock bash -c "[ -f /tmp/torch-$V.env ] || { rm -rf /tmp/carry && mkdir -p /tmp/carry && cat /tmp/chunks-$V/chunk.* | tar xf - -C /tmp/carry && mv /tmp/carry/*/* /tmp/carry/ && bash /tmp/carry/assemble.sh; } > $R/assemble-$V.log 2>&1" \
    || { tail -5 "$R/assemble-$V.log"; exit 1; }
  ;;
extras)
  cd /tmp/tree
  queue "$1" extras "tools/gpu_suite.sh /tmp/r/extras extras"
  ;;
poison)
  cd /tmp/tree
  queue "$1" poison "tools/gpu_suite.sh /tmp/r/poison poison"
  ;;
realsuite)
  G=$1; DIR=$2; shift 2
  cd /tmp/tree
  ls .devtree/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devtree/*.whl
  OPTS=""; for a in "$@"; do [ -e "/tmp/tree/$DIR/$a" ] || OPTS="$OPTS $a"; done  # no test paths
  export PYTHONPATH=/tmp/site SYNCGUARD_REAL_SUITE=/tmp/tree/$DIR SYNCGUARD_REAL_ARGS="$*" SYNCGUARD_REAL_OPTIONS="$OPTS"
  queue "$G" realsuite "tools/gpu_suite.sh /tmp/r/realsuite realsuite"
  ;;
run)
  V=$1; G=$2
  cd /tmp/tree
  . /tmp/torch-$V.env
  queue "$G" "$V" "tools/gpu_suite.sh /tmp/r/$V ${3:-matrix}"
  ;;
wait)
  for _ in $(seq 1 $(( $2 / 5 ))); do [ -f "$1" ] && break; sleep 5; done
  cat $R/*/steps.txt 2>/dev/null
  ;;
status)
  ls $R; for f in $R/*/steps.txt; do echo "== $f"; cat "$f"; done
  nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader
  ;;
collect)
  tar czf "$OUT/$1.tgz" -C $R "$1" && ls -la "$OUT"
  ;;
*) echo "unknown command $cmd" >&2; exit 2 ;;
esac
