#!/usr/bin/env bash
# Installs everything, then runs the whole test suite on the real engine and models.
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC_FORCE_MODELS=1 bash scripts/install.sh
bash scripts/install_native.sh   # llama.cpp's llama-server, for tests/test_native.py
bash scripts/install_browser.sh  # Debian's chromium, for tests/e2e
exec .venv/bin/python -m pytest "$@"
