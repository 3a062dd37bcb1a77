#!/usr/bin/env bash
# The six steps of README's "Adding syncguard to an existing suite", run on a copy of
# samples/adopt/project in DIR (default /tmp/syncguard-adopt; emptied first). Every output in
# that README section is this script's output. The sample uses the FAKE detector (its pytest.ini):
# it shows the plugin's plumbing on a CPU, not GPU behaviour. The two lines dropped from the
# output are torch's "Failed to initialize NumPy" warning (a CPU venv without numpy).
set -u
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-/tmp/syncguard-adopt}
rm -rf "$dir" && mkdir -p "$dir" && cp -r "$here/project/." "$dir" && cd "$dir" || exit 2
run() { echo "\$ $*"; "$@" 2>&1 | sed -e '/Failed to initialize NumPy/,+1d'; echo; }

echo "## 1. record mode first"
run pytest -q --syncguard --syncguard-mode=record --syncguard-report=syncguard.json

echo "## 2. read the summary"
run syncguard report syncguard.json

echo "## 3. set the scope (then keep it in pytest.ini: syncguard_ignore = src/tinymodel/testing.py)"
run pytest -q --syncguard --syncguard-mode=record --syncguard-report=syncguard.json \
    --syncguard-ignore=src/tinymodel/testing.py
echo "syncguard_ignore = src/tinymodel/testing.py" >> pytest.ini

echo "## 4. add allows with reasons (the one-line edits, then the run)"
sed -i 's/^def test_route/@pytest.mark.allow_sync(reason="route sizes its output from the counts; tracked in #12")\ndef test_route/;
        s/^def test_train_step/@pytest.mark.allow_sync(reason="train_step logs the loss once per step", max=100)\ndef test_train_step/;
        1i import pytest' tests/test_model.py
grep -n "allow_sync" tests/test_model.py
echo
run pytest -q --syncguard --syncguard-mode=record --syncguard-report=syncguard.json

echo "## 5. turn on fail mode (the default mode)"
run pytest -q --syncguard --syncguard-report=syncguard.json

echo "## 6. commit a baseline for the gate"
run syncguard report syncguard.json --baseline syncguard-baseline.json --update-baseline --format markdown
run syncguard report syncguard.json --baseline syncguard-baseline.json --fail-on regression --format markdown
