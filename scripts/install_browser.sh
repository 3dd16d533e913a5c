#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests (tests/e2e): Playwright drives it headless.
# `playwright install` cannot be used here (it downloads its own browser builds), so the tests use
# /usr/bin/chromium. Safe to run again: does nothing when Chromium is already there.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  echo "chromium: already installed ($(/usr/bin/chromium --version 2>/dev/null || echo unknown version))"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "installing chromium needs root (or sudo)" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
echo "chromium: installed ($(/usr/bin/chromium --version 2>/dev/null || echo unknown version))"
