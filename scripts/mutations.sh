#!/usr/bin/env bash
# Mutation check of the crash tests: plant each deliberate delivery bug in a scratch
# copy of the tree, run the test that exists to catch it, and require that it FAILS;
# then run the same test on the unmutated copy and require that it PASSES.
#
#   scripts/mutations.sh                 # every mutation x every test in the table
#   scripts/mutations.sh offsets-early   # one mutation (names below)
#   ONLY=test_crash scripts/mutations.sh # only the tests whose id contains this
#
# Nothing in the checkout is modified: the copy lives in a temp dir and goes first on
# PYTHONPATH (grebe is installed editable through a plain .pth path, which PYTHONPATH
# precedes), so `grebe run` children import the mutated code too. The recipe and the
# mutation table are in docs/testing.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="$ROOT/.venv/bin/python"
export LANG=en_US.UTF-8 LC_ALL=en_US.UTF-8 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

# name | file | sed expression | tests that must fail (space-separated node ids)
MUTATIONS=(
  "offsets-early|src/grebe/core/offsets.py|s/while tracked and tracked\[0\] not in unfinished:/while tracked and tracked[0] <= offset:/|tests/integration/test_crash.py tests/integration/test_kafka_e2e.py::test_kill_9_a_replica_ten_times_loses_nothing"
  "ack-on-submit|src/grebe/core/dispatcher.py|s/^\( *\)future.add_done_callback(entry)$/\1from grebe.core.source import Outcome\n\1asyncio.ensure_future(entry.stream.source.ack(entry.message, Outcome.DONE))\n\1future.add_done_callback(entry)/|tests/integration/test_crash.py tests/integration/test_kafka_e2e.py::test_kill_9_a_replica_ten_times_loses_nothing"
)

scratch_copy() {
  local dir
  dir=$(mktemp -d /tmp/grebe-mutation.XXXXXX)
  cp -r "$ROOT/src" "$ROOT/tests" "$ROOT/pyproject.toml" "$dir/"
  find "$dir" -name __pycache__ -prune -exec rm -rf {} +
  echo "$dir"
}

run_test() {  # dir test -> pytest's exit status
  local dir=$1 test=$2
  (cd "$dir" && PYTHONPATH="$dir/src" timeout 900 "$PY" -m pytest -x -q -p no:cacheprovider \
    "$test" >"$dir/pytest.log" 2>&1) && return 0 || return $?
}

status=0
for row in "${MUTATIONS[@]}"; do
  IFS='|' read -r name file expr tests <<<"$row"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  for test in $tests; do
    if [ -n "${ONLY:-}" ] && [[ $test != *"$ONLY"* ]]; then continue; fi
    dir=$(scratch_copy)
    cp "$dir/$file" "$dir/$file.orig"
    sed -i "$expr" "$dir/$file"
    if cmp -s "$dir/$file" "$dir/$file.orig"; then
      echo "MUTATION $name did not apply to $file (the code moved? update the sed line)" >&2
      exit 2
    fi
    imported=$(cd "$dir" && PYTHONPATH="$dir/src" "$PY" -c 'import grebe; print(grebe.__file__)')
    [[ $imported == "$dir/"* ]] || { echo "scratch copy not imported: $imported" >&2; exit 2; }
    if run_test "$dir" "$test"; then
      echo "SURVIVED  $name  $test  (log: $dir/pytest.log)"
      status=1
      continue
    fi
    echo "KILLED    $name  $test  ($(tail -n 1 "$dir/pytest.log"))"
    echo "          $(grep -m1 -E '^E ' "$dir/pytest.log" | cut -c1-160)"
    mv "$dir/$file.orig" "$dir/$file"
    if run_test "$dir" "$test"; then
      echo "PASSES    unmutated  $test"
      rm -rf "$dir"
    else
      echo "FAILS     unmutated  $test  (log: $dir/pytest.log)"
      status=1
    fi
  done
done
exit $status
