"""The agent CLIs people run, Claude Code (`claude -p`, the Anthropic Messages API) and Codex
(`codex exec`, the OpenAI Responses API), installed from npm (tests/js), run non-interactively against
`cli.py serve` with speculation on, as a user starts it, with a context that holds their prompts
(OLLAMA_CONTEXT_LENGTH): one turn each on a one-file task in a folder of its own. A turn completes with
no retry and no error in the CLI's own event stream (it accepted every stream the server sent), its
answers were speculated (the server's /metrics), and where the model called a tool the CLI ran it.
Their first requests are long (Claude Code about 12k tokens, Codex about 4.4k), read slowly on a CPU:
the deadlines are derived from that, and each CLI is asked as few turns as the checks need.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agent_clis import CLAUDE, CODEX, CONTEXT, run_claude, run_codex, speculated
from tests.support.models import DRAFT
from utils.embedded.server import EmbeddedServer

# The smallest model that answers them coherently (smollm2:135m's context is 8k).
MODEL = DRAFT
# Deadlines from the prompt's size: qwen2.5-coder:0.5b read Codex's 4,183-token prompt in 11.6 minutes
# on 2 cores shared with a load of 12 (0.17 s a token), plus its answer: a ceiling, not a wait.
CLAUDE_PROMPT, CODEX_PROMPT = 12_000, 4_500
SECONDS_PER_TOKEN, ANSWER = 0.25, 300


def deadline(prompt_tokens: int) -> float:
    return prompt_tokens * SECONDS_PER_TOKEN + ANSWER


@pytest.fixture(scope="module")
def agents_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """`cli.py serve` as a user starts it for an agent CLI: speculation on (its defaults) and
    OLLAMA_CONTEXT_LENGTH set in its environment; its log kept, to read what it did with each prompt."""
    log = tmp_path_factory.mktemp("agents-serve") / "serve.log"
    with pytest.MonkeyPatch.context() as patch:  # the server's environment only, not this process's
        patch.setenv("OLLAMA_CONTEXT_LENGTH", str(CONTEXT))
        server = EmbeddedServer(log_path=log, speculation=True)
        server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def agents_server(agents_serve: EmbeddedServer) -> str:
    return agents_serve.url


def prompts_read(server: EmbeddedServer) -> list[int]:
    """The tokens the server read of each long prompt it has begun (its log, oldest first); none of
    an agent's long prompts abandoned by its client, which then sends it again (a retry the CLI's own
    events do not show)."""
    assert server.log_path is not None
    log = server.log_path.read_text(errors="replace")
    abandoned = [int(total) for total in re.findall(r"prompt abandoned by its client: .* of (\d+) new", log)]
    assert not [total for total in abandoned if total > 2000], f"long prompts left unread and sent again: {abandoned}"
    return [int(read) for read in re.findall(r"\d+ cached, (\d+) to read", log)]


def test_the_clis_are_installed() -> None:
    """scripts/test.sh's `npm ci` in tests/js put both CLIs and their platform binaries there."""
    assert CLAUDE.exists() and CODEX.exists(), "run: cd tests/js && npm ci"


@pytest.mark.timeout(2 * deadline(CLAUDE_PROMPT) + 60)
def test_claude_code_turn(agents_serve: EmbeddedServer, tmp_path: Path) -> None:
    """`claude -p` with a one-file task completes a turn, speculated, with no retry (none in the CLI's
    events, and no request abandoned and sent again in the server's log); a resumed second turn (the
    same system prompt and tools) completes too and reads only what is new: its cached prefix is
    nearly the whole of the first turn's prompt."""
    agents_server = agents_serve.url
    before = speculated(agents_server, "/v1/messages")
    first = run_claude(tmp_path, agents_server, MODEL, timeout=deadline(CLAUDE_PROMPT))
    assert not first.failures(), first.failures()
    turn_one = prompts_read(agents_serve)
    assert first.session and first.prompt_tokens > 5000, (first.session, first.prompt_tokens)
    assert speculated(agents_server, "/v1/messages") > before
    if "Write" in first.tools_used:  # the CLI ran the model's call: its file is there
        assert (first.folder / "hello.txt").is_file(), first.events[-3:]
    second = run_claude(tmp_path, agents_server, MODEL, "What is in hello.txt?", resume=first.session,
                        timeout=deadline(CLAUDE_PROMPT))
    assert not second.failures(), second.failures()
    assert second.session == first.session
    # Nothing the resumed turn asked read more than a quarter of what the first turn's long prompt
    # read (a prompt whose new part is a few tokens has no log line at all): its time to first token
    # is what its new tokens cost, not the whole prompt again.
    turn_two = prompts_read(agents_serve)[len(turn_one):]
    assert all(read * 4 <= max(turn_one) for read in turn_two), (turn_one, turn_two)


@pytest.mark.timeout(deadline(CODEX_PROMPT) + 60)
def test_codex_turn(agents_server: str, tmp_path: Path) -> None:
    """`codex exec` on the server as a Responses provider completes a turn, speculated, with no error."""
    before = speculated(agents_server, "/v1/responses")
    turn = run_codex(tmp_path, agents_server, MODEL, timeout=deadline(CODEX_PROMPT))
    assert not turn.failures(), turn.failures()
    assert any(event.get("type") == "turn.completed" for event in turn.events), turn.events
    assert turn.prompt_tokens > 2000, turn.prompt_tokens
    assert speculated(agents_server, "/v1/responses") > before
