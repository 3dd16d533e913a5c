"""Wall time per turn of the agent CLIs (Claude Code, Codex; installed in tests/js by `npm ci`) against
`cli.py serve`, with speculation on and off (`--no-speculation`): a fresh server each, the one-file task
of tests/test_agent_clis.py, Claude Code then resumed once. Prints a Markdown table (docs/performance.md,
"Agent CLIs").

    .venv/bin/python scripts/agent_clis.py [--model qwen2.5-coder:0.5b]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.agent_clis import CONTEXT, Turn, run_claude, run_codex  # noqa: E402
from tests.support.models import DRAFT  # noqa: E402
from utils.embedded.server import EmbeddedServer  # noqa: E402


def turns(url: str, folder: Path, model: str) -> list[tuple[str, Turn]]:
    first = run_claude(folder / "claude", url, model)
    second = run_claude(folder / "claude", url, model, "What is in hello.txt?", resume=first.session)
    return [("Claude Code, turn 1", first), ("Claude Code, turn 2 (--resume)", second),
            ("Codex, turn 1", run_codex(folder / "codex", url, model))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DRAFT)
    model = parser.parse_args().model
    os.environ.setdefault("OLLAMA_CONTEXT_LENGTH", str(CONTEXT))  # the servers' context
    rows: dict[str, dict[bool, Turn]] = {}
    for speculation in (True, False):
        with tempfile.TemporaryDirectory() as folder, \
                EmbeddedServer(log_path=Path(folder) / "serve.log", speculation=speculation) as server:
            for name, turn in turns(server.url, Path(folder), model):
                rows.setdefault(name, {})[speculation] = turn
                print(f"{name}, speculation {'on' if speculation else 'off'}: {turn.seconds:.0f} s, "
                      f"{turn.prompt_tokens} prompt tokens, tools {turn.tools_used}, "
                      f"problems {turn.failures()}", file=sys.stderr, flush=True)
    print(f"| {model}, context {os.environ['OLLAMA_CONTEXT_LENGTH']} | prompt tokens | speculation on | off |")
    print("|---|---:|---:|---:|")
    for name, by in rows.items():
        print(f"| {name} | {by[True].prompt_tokens:,} | {by[True].seconds:.0f} s | {by[False].seconds:.0f} s |")


if __name__ == "__main__":
    main()
