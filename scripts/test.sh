#!/usr/bin/env bash
# Installs everything, lints, then runs the whole test suite on the real engine and models.
# Arguments go to pytest: `bash scripts/test.sh -m "not models"` runs the fast layer (tests/unit/) only.
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC_FORCE_MODELS=1 bash scripts/install.sh
bash scripts/install_native.sh   # llama.cpp's llama-server, for tests/test_native.py
bash scripts/install_browser.sh  # Debian's chromium, for tests/e2e
(cd tests/js && npm ci --silent --no-audit --no-fund)  # ollama-js, for tests/test_proxy.py
# Lint and type-check first (pyproject.toml); the tests run either way, so one run reports both.
lint=0
.venv/bin/ruff check . || lint=$?
.venv/bin/mypy utils || lint=$?
# Two workers (pytest-xdist, each with its own session servers and temporary folders, a file's tests
# kept together) where the machine has the cores for them: on two cores they share the same two and
# ran slower (docs/testing.md, "Two workers"). Arguments given here come after: `-n 0` runs in one
# process.
workers=()
if [ "$(nproc)" -ge 4 ]; then workers=(-n 2 --dist loadfile); fi
.venv/bin/python -m pytest ${workers[@]+"${workers[@]}"} "$@" || exit $?
if [ "$lint" -ne 0 ]; then
  echo "ruff or mypy found problems (above): failing although the tests passed" >&2
fi
exit "$lint"
