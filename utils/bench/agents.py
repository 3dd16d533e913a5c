"""Agent sessions in the benchmark (prompts/agents.jsonl): a coding agent's tool loop, step by step.

A session is one JSON line: `id`, `category`, `system` (the agent's instructions), `tools` (Ollama's
tool schemas), `task` (the user's request) and `results`: the scripted tool results, one per step
after the first, each `{"tool_name": ..., "content": ...}`; optionally `finish`, a user message after
the last result that asks for the final answer. Step 1 asks the system prompt and the task; step N
asks the same history plus the configuration's own answer to step N-1 (as the assistant's content, a
tool call included, as Ollama returns a small model's bare-JSON call) and result N-1 as a `tool`
message. The results are scripted: they do not depend on what the model called.

What a step is comes from its answer, after the fact (`step_kind`): a write_file call carrying a
file's content ("file write"), any other tool call ("call"), or no call ("final answer").
"""

from __future__ import annotations

import re
from typing import Any

STEP = "step"  # an agent step's category until its answer says which kind it is
FILE_WRITE, CALL, FINAL = "file write", "call", "final answer"

# A call as the model begins it, bare, fenced or in <tool_call> tags: {"name": "...", "arguments": ...}
# (an answer cut by max_tokens is still its call; qwen2.5-coder:1.5b writes a file's content in Python
# triple quotes, which is not JSON: the answer is not parsed, only its beginning read).
_CALL = re.compile(r'^\s*(?:<tool_call>|```\w*)?\s*\{+\s*"name"\s*:\s*"(?P<name>\w+)"')
_CONTENT = re.compile(r'"content"\s*:')


def step_kind(text: str) -> str:
    """The kind of an agent's answer: FILE_WRITE, CALL or FINAL (see the module's docstring)."""
    call = _CALL.match(text)
    if not call:
        return FINAL
    return FILE_WRITE if call["name"] == "write_file" and _CONTENT.search(text) else CALL


def session_problems(session: dict[str, Any]) -> list[str]:
    """What makes a line not a session (a result from a tool the session does not offer, ...): none if it is one."""
    problems = [f"missing {key}" for key in ("system", "tools", "task", "results") if key not in session]
    if problems:
        return problems
    offered = {tool.get("function", {}).get("name") for tool in session["tools"] if isinstance(tool, dict)}
    for number, result in enumerate(session["results"], start=1):
        if not isinstance(result, dict) or not {"tool_name", "content"} <= set(result):
            problems.append(f"result {number} is not {{tool_name, content}}")
        elif result["tool_name"] not in offered:
            problems.append(f"result {number} is from '{result['tool_name']}', not one of the session's tools")
    if not str(session["task"]).strip():
        problems.append("the task is empty")
    if not isinstance(session.get("finish", ""), str):
        problems.append("finish is not a user message's text")
    return problems


def session_steps(session: dict[str, Any]) -> list[dict[str, Any]]:
    """A session (with no `session_problems`) as one prompt per step, of category STEP, in order."""
    said = [[{"role": "system", "content": session["system"]}, {"role": "user", "content": session["task"]}]]
    said += [[{"role": "tool", "tool_name": r["tool_name"], "content": r["content"]}] for r in session["results"]]
    if session.get("finish"):
        said[-1].append({"role": "user", "content": session["finish"]})
    return [{"id": f"{session['id']}/{number}", "category": STEP, "conversation": session["id"],
             "kind": session["category"], "turn": number, "said": messages, "prompt": messages[-1]["content"],
             "chat": True, "tools": session["tools"],
             **({"max_tokens": session["max_tokens"]} if "max_tokens" in session else {})}
            for number, messages in enumerate(said, start=1)]
