"""CORS as Ollama allows it (envconfig.AllowedOrigins): localhost in every spelling, any port, the
schemes of desktop and editor apps, and whatever OLLAMA_ORIGINS adds (comma-separated, `*` as a
wildcard: "chrome-extension://*", or "*" for any origin). Shared by the embedded server and the proxy."""

from __future__ import annotations

import os
import re

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

LOCAL_ORIGINS = r"(https?://(localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])(:\d+)?)|((app|file|tauri|vscode-webview)://.*)"


def origins_from_env() -> list[str]:
    return [origin.strip() for origin in os.environ.get("OLLAMA_ORIGINS", "").split(",") if origin.strip()]


def origins_pattern(extra: list[str]) -> str:
    """One regular expression for Ollama's default origins and `extra` (with `*` wildcards)."""
    added = [re.escape(origin).replace(r"\*", ".*") for origin in extra]
    return "|".join([f"({LOCAL_ORIGINS})"] + [f"({pattern})" for pattern in added])


def add_cors(app: FastAPI, extra: list[str]) -> None:
    app.add_middleware(CORSMiddleware, allow_origin_regex=origins_pattern(extra), allow_methods=["*"],
                       allow_headers=["*"])
