"""Models page support: the server's models, installing bundled models, and the pair advisor."""

from __future__ import annotations

import re
import statistics
from dataclasses import replace
from typing import Any

import pandas as pd
import streamlit as st

from config import Settings
from utils.app.runtime import ScriptCalls, run, server
from utils.app.sidebar import relation_label
from utils.bench.first_asks import remembers_answers
from utils.engine.client import ServerError
from utils.engine.drafters import NONE


def server_models(settings: Settings, url: str) -> list[dict[str, Any]]:
    """The server's models with their sizes, as `ollama list` shows them; raises ServerError."""
    client = server(settings, url)

    async def listing() -> list[dict[str, Any]]:
        return [
            {"model": m.get("model", ""), "size (MB)": round((m.get("size") or 0) / 1e6),
             "parameters": (m.get("details") or {}).get("parameter_size", ""),
             "quantization": (m.get("details") or {}).get("quantization_level", "")}
            for m in await client.list_models()
        ]

    try:
        return run(listing)
    except ServerError as error:
        raise type(error)(f"cannot list the models of {url}: {error.message}", error.status, error.host) from None


def bundled_models(settings: Settings) -> list[dict[str, Any]]:
    from utils.embedded.store.models import ModelStore

    models = ModelStore(settings.models_dir)
    return [
        {"model": name, "size (MB)": round(spec.size / 1e6), "installed": models.is_installed(name),
         "description": spec.description}
        for name, spec in models.catalogue.items()
    ]


def install_models(settings: Settings, names: list[str]) -> None:
    """Install bundled models, showing each step and the share of parts downloaded."""
    from utils.embedded.store.models import ModelError, ModelStore

    models = ModelStore(settings.models_dir)
    bar = st.progress(0.0, text="Starting…")
    with st.status(f"Installing {', '.join(names)}…", expanded=True) as status:
        for number, name in enumerate(names):
            parts = len(models.spec(name).parts)

            def progress(line: str, number: int = number, parts: int = parts) -> None:
                status.write(line)
                if match := re.search(r"\[(\d+)/(\d+)\]", line):
                    done = number + int(match.group(1)) / max(parts, 1)
                    bar.progress(min(done / len(names), 1.0), text=line)

            try:
                models.install(name, progress=progress)
            except ModelError as error:
                status.update(label=f"Installing {name} failed", state="error")
                st.error(f"{error}. Check the network connection and try again; finished parts are kept.")
                return
        bar.progress(1.0, text="Done")
        status.update(label=f"Installed {', '.join(names)}", state="complete", expanded=False)
    st.cache_data.clear()  # the server's model list and the tokenizer relations changed


def run_advisor(settings: Settings, url: str, target: str, drafters: list[str], prompts: tuple[str, ...],
                max_tokens: int, repeats: int = 2):
    """The pair advisor, with a progress bar."""
    from utils.bench.advisor import advise

    bar = st.progress(0.0, text="Starting…")
    client = server(settings, url)
    calls = ScriptCalls()  # the advisor reports from the engine's loop; the bar is drawn from the script

    def progress(done: int, total: int, label: str) -> None:
        bar.progress(done / total if total else 1.0, text=f"Measuring: {label} ({done} of {total} answers)")

    advice = run(lambda: advise(settings, client, target, drafters, prompts=prompts, max_tokens=max_tokens,
                                repeats=repeats, progress=calls.wrap(progress)), calls)
    return honest_advice(advice)


def drafted_nothing(measured) -> bool:
    """A candidate that ran without error but drafted no token: its speed is standard generation's."""
    return measured.relation != "standard" and not measured.error and measured.acceptance_rate is None


def honest_advice(advice):
    """The advice, never recommending a draft that drafted nothing (its speed was standard generation's
    plus noise, so "faster" meant nothing): the fastest candidate that drafted and beat standard
    generation instead, or none."""
    chosen = next((c for c in advice.candidates if c.drafter == advice.recommended), None)
    if chosen is None or not drafted_nothing(chosen):
        return advice
    standard = advice.standard.tokens_per_second
    paying = [c for c in advice.candidates
              if not c.error and not drafted_nothing(c) and c.tokens_per_second > standard]
    why = f"{chosen.drafter} drafted nothing on these prompts, so its speed was standard generation's"
    if not paying:
        return replace(advice, recommended=NONE,
                       reason=f"{why}; no other draft beat standard generation ({standard:.1f} tokens/s): "
                              "keep speculation off for this target")
    best = max(paying, key=lambda c: c.tokens_per_second)
    return replace(advice, recommended=best.drafter,
                   reason=f"{why}; {best.drafter}: {best.tokens_per_second:.1f} tokens/s against {standard:.1f} "
                          f"standard (×{best.tokens_per_second / standard:.2f})")


def advice_table(advice) -> list[dict[str, Any]]:
    rows = []
    for measured in [advice.standard, *advice.candidates]:
        rows.append({
            "drafter": measured.drafter,
            "kind": relation_label(measured.relation),
            "tokens/s": round(measured.tokens_per_second, 1) if not measured.error else None,
            "speed-up (median)": None if measured.speedup is None else f"×{measured.speedup:.2f}",
            "spread (25–75%)": (None if measured.spread is None
                                else f"×{measured.spread[0]:.2f} – ×{measured.spread[1]:.2f}"
                                + ("" if measured.beyond_noise else ", within noise")),
            "asked again (median)": (f"×{statistics.median(measured.again_ratios):.2f}"
                                     if measured.again_ratios else None),
            "acceptance": None if measured.acceptance_rate is None else round(measured.acceptance_rate, 2),
            "tokens per verification": (None if measured.mean_acceptance_length is None
                                        else round(measured.mean_acceptance_length, 2)),
            "same text as standard": measured.identical,
            "problem": measured.error or ("drafted nothing" if drafted_nothing(measured) else ""),
        })
    return rows


def advice_meaning(advice) -> str:
    """What the advisor's figures compare, in words, under its table."""
    text = ("tokens/s: all of a drafter's answers together, tokens ÷ seconds generating. Speed-up: a drafter's "
            "tokens/s over standard generation's on the same prompt, answered right before or after it, the median "
            "over the prompts and passes; spread: the middle half of them (25–75%), \"within noise\" unless it "
            "lies above ×1.00.")
    again = [c.drafter for c in advice.candidates if remembers_answers(c.drafter)]
    if again and advice.repeats > 1:
        text += (f" {', '.join(again)} remembers its answers: from the second pass on it is asked again and copies "
                 "its first answer, faster than it would answer a new question. So its tokens/s, speed-up and "
                 "spread are of the first pass alone, its first asks, the speed a new question gets; its later "
                 "passes are the \"asked again\" column, apart, and the recommendation leaves them out.")
    return text


def whole_table(rows: list[dict[str, Any]], index: str) -> pd.DataFrame:
    """Rows for st.table, one per `index` (a model, a drafter): st.table shows every column and wraps
    long text, where st.dataframe cut the columns to its width (the descriptions, the advisor's figures)."""
    table = pd.DataFrame(rows)
    return table.set_index(index) if index in table else table
