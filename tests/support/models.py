"""The models the suite runs on (installed by scripts/install.sh) and the project's folder."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SMALL = "smollm2:135m"
TARGET = "qwen2.5-coder:1.5b"
DRAFT = "qwen2.5-coder:0.5b"
