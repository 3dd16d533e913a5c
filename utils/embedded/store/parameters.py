"""Model parameters as Ollama keeps them: a Modelfile's `PARAMETER name value` lines, /api/create's
`parameters` object and `cli.py models add --param name=value`, stored with a registered name.

Names and types are Ollama's (api/types.go Options and FormatParams; its message for an unknown
name). /api/show writes them as Ollama does: every JSON number is a Go float64 there, printed with
`%v` (`8192`, `0.7`, `1e+06`), one line per value, names padded to 30 columns.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from utils.api.http import ApiError

# Ollama's Options and Runner fields, by type.
_INTS = {"num_keep", "seed", "num_predict", "top_k", "repeat_last_n", "num_ctx", "num_batch", "num_gpu",
         "main_gpu", "num_thread", "draft_num_predict"}
_FLOATS = {"top_p", "min_p", "typical_p", "temperature", "repeat_penalty", "presence_penalty", "frequency_penalty"}
_BOOLS = {"use_mmap"}
_LISTS = {"stop"}
_GO_TRUE, _GO_FALSE = {"1", "t", "T", "TRUE", "true", "True"}, {"0", "f", "F", "FALSE", "false", "False"}
SHOW_COLUMN = 30


class ParameterError(ApiError):
    """A parameter Ollama refuses (unknown name, a value of the wrong type); its message is Ollama's."""

    def __init__(self, message: str):
        super().__init__(message, 400)


def _known(name: str) -> None:
    if name not in _INTS | _FLOATS | _BOOLS | _LISTS:
        raise ParameterError(f"unknown parameter '{name}'")


def from_text(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Parameters from (name, text) pairs (Modelfile lines, --param): typed as Ollama's FormatParams
    types them; `stop` may repeat and collects its values in order."""
    parameters: dict[str, Any] = {}
    for name, text in pairs:
        _known(name)
        if name in _LISTS:
            parameters.setdefault(name, []).append(text)
        elif name in _BOOLS:
            if text not in _GO_TRUE | _GO_FALSE:
                raise ParameterError(f"invalid bool value [{text}]")
            parameters[name] = text in _GO_TRUE
        elif name in _INTS:
            if not re.fullmatch(r"[+-]?\d+", text):
                raise ParameterError(f"invalid int value [{text}]")
            parameters[name] = int(text)
        else:
            try:
                parameters[name] = float(text)
            except ValueError:
                raise ParameterError(f"invalid float value [{text}]") from None
    return checked(parameters)


def checked(parameters: dict[str, Any]) -> dict[str, Any]:
    """/api/create's `parameters` object, refused where Ollama's option loading would refuse it
    (`option "x" must be of type integer`); a single `stop` string becomes a list of one."""
    out: dict[str, Any] = {}
    for name, value in parameters.items():
        _known(name)
        if value is None:  # Ollama skips a null option
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if name in _LISTS:
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ParameterError(f'option "{name}" must be of an array of strings')
        elif name in _BOOLS and not isinstance(value, bool):
            raise ParameterError(f'option "{name}" must be of type boolean')
        elif name in _INTS:
            if not number or not float(value).is_integer():
                raise ParameterError(f'option "{name}" must be of type integer')
            value = int(value)
        elif name in _FLOATS and (not number or not math.isfinite(value)):
            raise ParameterError(f'option "{name}" must be of type float32')
        out[name] = value
    return out


def _go_float(value: float) -> str:
    """Go's `%v` of a float64: the shortest digits that read back, an exponent below 1e-4 and from 1e6."""
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    scientific = len(digits) - 1 + int(exponent)
    if -4 <= scientific < 6:
        return format(Decimal(repr(float(value))).normalize(), "f")
    mantissa = str(digits[0]) + ("." + "".join(map(str, digits[1:])) if len(digits) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'-' if scientific < 0 else '+'}{abs(scientific):02d}"


def _go_value(value: Any, quoted: bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_float(value)
    if quoted:  # Go's %#v of a string
        return json.dumps(value, ensure_ascii=False)
    # A Modelfile value is quoted only where its spaces or lines need it (Ollama's parser.quote).
    if "\n" in value or value.startswith(" ") or value.endswith(" "):
        return f'"""{value}"""' if '"' in value else f'"{value}"'
    return value


def _lines(parameters: dict[str, Any]) -> list[tuple[str, Any]]:
    """(name, value) for each value, sorted by name; a list gives a line per item."""
    return [(name, item) for name in sorted(parameters)
            for item in (parameters[name] if isinstance(parameters[name], list) else [parameters[name]])]


def show_text(parameters: dict[str, Any]) -> str:
    """/api/show's `parameters`: `name<padding> value` lines (recorded from Ollama 0.32.15)."""
    return "\n".join(f"{name:<{SHOW_COLUMN}} {_go_value(value, quoted=True)}" for name, value in _lines(parameters))


def modelfile_lines(parameters: dict[str, Any]) -> list[str]:
    """The Modelfile's `PARAMETER name value` lines, as /api/show's `modelfile` writes them."""
    return [f"PARAMETER {name} {_go_value(value, quoted=False)}" for name, value in _lines(parameters)]


def command_line(command: str, value: str) -> str:
    """A Modelfile line such as TEMPLATE or SYSTEM with its text, quoted as Ollama's parser.quote quotes
    it (only where its lines or edge spaces need it)."""
    return f"{command} {_go_value(value, quoted=False)}"
