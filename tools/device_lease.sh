#!/usr/bin/env bash
# One device lease, several torch versions side by side: the GPU suite runs in the background
# (setsid, so it outlives the call that started it) while later calls carry the next torch in.
# Run on the GPU machine through the device tool, from the repository root:
#
#   start SHA          copy the tree to /tmp/tree, install it (editable), start the image's torch
#                      on GPU 0: tools/gpu_suite.sh matrix then extras -> /tmp/r/<v>/
#   realsuite DIR ARGS on GPU 1: tools/real_suite.py over another project's tree DIR (carried,
#                      with its wheels under .devtree/) -> /tmp/r/realsuite-<v>/
#   run VERSION GPU    after carry-torch's calls: that torch's matrix run on GPU -> /tmp/r/VERSION/
#   wait FILE SECONDS  block until FILE exists (a call must be running, or the machine is given
#                      back after ~30 s idle and every background run dies with it)
#   status | collect NAME (tar /tmp/r/NAME into $OUT)
#
# Lessons it encodes (this session lost one lease's runs to the idle release): keep a call
# running while background runs work (`wait`), collect each version as soon as it is done, and
# write everything under /tmp/r so that `collect` can return what exists even mid-run.
set -u
cmd=${1:?command}; shift
R=/tmp/r
case $cmd in
start)
  SHA=$1
  rm -rf /tmp/tree && mkdir -p /tmp/tree $R && cp -a . /tmp/tree && rm -rf /tmp/tree/.carry
  echo "$SHA" > $R/sha
  cd /tmp/tree
  python3 -m pip install -q --no-build-isolation --no-deps -e . > $R/install.log 2>&1 || cat $R/install.log
  nvidia-smi -L
  export SYNCGUARD_GIT_COMMIT=$SHA SYNCGUARD_SKIP_INSTALL=1
  CUDA_VISIBLE_DEVICES=0 setsid nohup bash -c 'tools/gpu_suite.sh /tmp/r/base matrix; tools/gpu_suite.sh /tmp/r/base extras; touch /tmp/r/base.done' > $R/bg-base.log 2>&1 < /dev/null &
  ;;
realsuite)
  DIR=$1; shift
  cd /tmp/tree
  ls .devtree/*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .devtree/*.whl
  export SYNCGUARD_GIT_COMMIT=$(cat $R/sha) SYNCGUARD_SKIP_INSTALL=1 PYTHONPATH=/tmp/site
  export SYNCGUARD_REAL_SUITE=/tmp/tree/$DIR SYNCGUARD_REAL_ARGS="$*"
  CUDA_VISIBLE_DEVICES=1 setsid nohup bash -c 'tools/gpu_suite.sh /tmp/r/realsuite realsuite; touch /tmp/r/realsuite.done' > $R/bg-realsuite.log 2>&1 < /dev/null &
  ;;
run)
  V=$1; G=$2
  cd /tmp/tree
  . /tmp/torch-$V.env
  export SYNCGUARD_GIT_COMMIT=$(cat $R/sha) SYNCGUARD_SKIP_INSTALL=1
  CUDA_VISIBLE_DEVICES=$G setsid nohup bash -c "tools/gpu_suite.sh /tmp/r/$V matrix; touch /tmp/r/$V.done" > $R/bg-$V.log 2>&1 < /dev/null &
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
