"""Claude Code and Codex, the agent CLIs installed from npm in tests/js (scripts/test.sh's `npm ci`), run
non-interactively against a server: one turn each in a working folder, in an environment of their own
(HOME and the CLIs' homes in a temporary folder, telemetry, updates and other traffic off), their
event streams read back. Used by tests/test_agent_clis.py and scripts/agent_clis.py (the figures).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.models import ROOT

BIN = ROOT / "tests" / "js" / "node_modules" / ".bin"
CLAUDE, CODEX = BIN / "claude", BIN / "codex"
# Claude Code's first request is about 12k tokens of system prompt and tool definitions; Codex's
# about 4.4k. The server's context must hold them and an answer.
CONTEXT = 16384
TASK = "Create a file named hello.txt in the current directory containing exactly the text: hi"


@dataclass
class Turn:
    """One CLI run: its events (JSON lines), the time it took, and what it printed otherwise."""

    events: list[dict[str, Any]]
    seconds: float
    returncode: int
    stderr: str
    folder: Path
    session: str = ""
    prompt_tokens: int = 0
    tools_used: list[str] = field(default_factory=list)

    def failures(self) -> list[str]:
        """Everything in the run that says a request was retried or failed: none for a clean turn."""
        bad = [json.dumps(event)[:400] for event in self.events if _failed(event)]
        return bad + ([f"exit code {self.returncode}: {self.stderr[-2000:]}"] if self.returncode else [])


def _failed(event: dict[str, Any]) -> bool:
    kind, subtype = event.get("type", ""), event.get("subtype", "")
    return (kind in ("error", "turn.failed") or "retry" in str(subtype) or event.get("is_error") is True
            or (kind == "result" and subtype != "success"))


def _home(folder: Path) -> dict[str, str]:
    """An environment without the user's: only PATH and what the CLIs need, HOME in `folder`."""
    home = folder / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "TMPDIR": str(folder), "NO_COLOR": "1", "TERM": "dumb"}


def claude_env(folder: Path, url: str, model: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    """Claude Code pointed at `url` as its Anthropic API, every model role on `model`, nothing else
    reached: no telemetry, error reports or auto-update, no retry (a retry fails the turn instead)."""
    env = _home(folder)
    env.update({
        "ANTHROPIC_BASE_URL": url, "ANTHROPIC_AUTH_TOKEN": "ollama", "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
        "CLAUDE_CONFIG_DIR": str(folder / "home" / ".claude"),
        "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "0",
        "API_TIMEOUT_MS": str(3_600_000),  # a long prompt is read slowly on a CPU: the test's deadline rules
    })
    if headers:
        env["ANTHROPIC_CUSTOM_HEADERS"] = "\n".join(f"{key}: {value}" for key, value in headers.items())
    return env


def run_claude(folder: Path, url: str, model: str, prompt: str = TASK, resume: str = "",
               headers: dict[str, str] | None = None, timeout: float = 1800) -> Turn:
    """`claude -p PROMPT` in `folder`/work with stream-json output, edits accepted (no prompt to answer);
    `resume`: a session id to continue."""
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    command = [str(CLAUDE), "-p", prompt, "--model", model, "--output-format", "stream-json", "--verbose",
               "--permission-mode", "acceptEdits"] + (["--resume", resume] if resume else [])
    turn = _run(command, work, claude_env(folder, url, model, headers), timeout)
    for event in turn.events:
        if event.get("type") == "result":
            turn.session = event.get("session_id", "")
            usage = event.get("usage") or {}
            turn.prompt_tokens = sum(int(usage.get(key) or 0) for key in
                                     ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        for block in (event.get("message") or {}).get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                turn.tools_used.append(block.get("name", ""))
    return turn


def codex_config(folder: Path, url: str, model: str, headers: dict[str, str] | None = None) -> Path:
    """CODEX_HOME with a config.toml: `url`/v1 as a provider of the Responses API, no retries, no
    analytics, no update check; commands run without asking, sandboxed to the working folder."""
    codex_home = folder / "home" / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    extra = "".join(f'http_headers."{key}" = "{value}"\n' for key, value in (headers or {}).items())
    (codex_home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "local"\napproval_policy = "never"\n'
        'sandbox_mode = "workspace-write"\ncheck_for_update_on_startup = false\n'
        "[analytics]\nenabled = false\n[feedback]\nenabled = false\n"
        '[model_providers.local]\nname = "cli.py serve"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
        f"stream_idle_timeout_ms = {3_600_000}\n" + extra)
    return codex_home


def run_codex(folder: Path, url: str, model: str, prompt: str = TASK,
              headers: dict[str, str] | None = None, timeout: float = 1800) -> Turn:
    """`codex exec --json PROMPT` in `folder`/work on the provider of codex_config."""
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    env = {**_home(folder), "CODEX_HOME": str(codex_config(folder, url, model, headers))}
    command = [str(CODEX), "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-C", str(work), prompt]
    turn = _run(command, work, env, timeout)
    for event in turn.events:
        if event.get("type") == "thread.started":
            turn.session = event.get("thread_id", "")
        if event.get("type") == "turn.completed":
            usage = event.get("usage") or {}
            turn.prompt_tokens += int(usage.get("input_tokens") or 0)
        item = event.get("item") or {}
        # An "error" item is a warning (an unknown model's "Model metadata ... not found"), not a tool.
        if event.get("type") == "item.completed" and item.get("type") not in (None, "agent_message", "reasoning",
                                                                               "error"):
            turn.tools_used.append(item["type"])
    return turn


def _run(command: list[str], work: Path, env: dict[str, str], timeout: float) -> Turn:
    start = time.monotonic()
    done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line of text between the events (a warning)
    return Turn(events, time.monotonic() - start, done.returncode, done.stderr, work)


def speculated(url: str, endpoint: str) -> int:
    """Answers speculated on `endpoint` so far, from the server's /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found = re.search(rf'^spec_proxy_requests_total\{{endpoint="{endpoint}",mode="speculative"}} (\d+)', text, re.M)
    return int(found.group(1)) if found else 0
