#!/usr/bin/env bash
# Installs everything, then runs the whole test suite on the real engine and models.
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC_FORCE_MODELS=1 bash scripts/install.sh
exec .venv/bin/python -m pytest "$@"
