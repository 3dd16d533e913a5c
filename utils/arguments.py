"""How the command line reads its values: each `type=` of cli.py's options, with its own message."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def draft_length(text: str) -> int:
    """A fixed draft length K, the one way every command reads it: 0 to the engine's limit."""
    from utils.engine.config import K_LIMIT

    if not text.strip().isdigit() or int(text) > K_LIMIT:
        raise argparse.ArgumentTypeError(f"must be a number from 0 to {K_LIMIT}")
    return int(text)


def bench_k(text: str) -> str:
    """`bench --k`: 'auto' (the controller's choice), 'auto:N' (the controller's choice up to N instead
    of SPEC_K_MAX), 'tree:W' (the controller's choice, with trees of up to W continuations where they
    pay: SPEC_TREE_WIDTH), or a fixed draft length."""
    if text.startswith("tree:"):
        if not text[5:].isdigit() or not 2 <= int(text[5:]) <= 4:
            raise argparse.ArgumentTypeError("tree:W needs W from 2 to 4")
        return text
    if text.startswith("auto:"):
        ceiling = draft_length(text[5:])
        if ceiling == 0:
            raise argparse.ArgumentTypeError("auto:N needs N from 1")
        return f"auto:{ceiling}"
    return text if text == "auto" else str(draft_length(text))


def probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def answer_format(text: str) -> str | dict:
    """--format: "json", a JSON schema written inline, or the path of a file holding one."""
    if text == "json":
        return text
    try:
        schema = json.loads(text if text.lstrip().startswith("{") else Path(text).read_text())
    except (OSError, ValueError) as error:
        raise argparse.ArgumentTypeError(f"not 'json', a JSON schema or a schema file: {error}") from None
    if not isinstance(schema, dict):
        raise argparse.ArgumentTypeError("a JSON schema is an object")
    return schema


def think(text: str) -> bool | str:
    """Ollama's `think`: true or false, or a level (the models that have levels, gpt-oss)."""
    value = text.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    if value in ("high", "medium", "low"):
        return value
    raise argparse.ArgumentTypeError("must be true, false, high, medium or low")


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value
