#!/usr/bin/env bash
# The one test command: install, start the real servers, run every test.
# `.ci/run` runs exactly this. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --llm
bash scripts/services.sh up
export LANG=en_US.UTF-8 LC_ALL=en_US.UTF-8 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
echo "==> ruff and mypy"
.venv/bin/ruff check src tests bench scripts
.venv/bin/mypy src
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$status"
