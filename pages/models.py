"""Models: what is installed, installing bundled models, and which draft pays for a target."""

import streamlit as st

from utils.app.models import (
    advice_meaning,
    advice_table,
    bundled_models,
    install_models,
    run_advisor,
    server_models,
    whole_table,
)
from utils.app.runtime import current, explain, server_url
from utils.bench.advisor import ADVISOR_MAX_TOKENS, ADVISOR_PROMPTS
from utils.engine.drafters import model_free_drafters

settings, server, choices = current()

st.title("Models")
if settings.ollama_host:
    st.caption(f"Models of the Ollama server at OLLAMA_HOST ({settings.ollama_host}); add models with "
               "`ollama pull`.")
    try:
        st.table(whole_table(server_models(settings, server_url(settings)), "model"))
    except Exception as error:  # noqa: BLE001 - HostError or ServerError: say what to do
        st.error(explain(error, settings))
else:
    st.caption(f"Bundled models of the embedded server, stored in {settings.models_dir}.")
    bundled = bundled_models(settings)
    st.table(whole_table(bundled, "model"))
    missing = [row["model"] for row in bundled if not row["installed"]]
    if missing:
        to_install = st.multiselect("Install", missing, key="to_install")
        if st.button("Install selected models", disabled=not to_install):
            install_models(settings, to_install)

st.header("Pair advisor")
if server is None or choices is None:
    st.info("The advisor needs a server with models: see the sidebar.")
    st.stop()
st.caption("Answers a few short prompts (greedy) with standard generation and with each candidate draft in "
           "turn, every prompt by all of them one after another, a few times over; then recommends the draft with "
           "the best median speed-up if it drafted and was faster in three runs out of four, else none.")
target = st.selectbox("Target", server.models, index=server.models.index(choices.target), key="advisor_target")
candidates = [*model_free_drafters()] + [model for model in server.models if model != target]
drafters = st.multiselect("Candidate drafts", candidates, default=candidates, key="advisor_drafters")
prompt_count = st.slider("Prompts", 1, len(ADVISOR_PROMPTS), len(ADVISOR_PROMPTS), key="advisor_prompts")
max_tokens = st.number_input("Tokens per answer", 8, 256, ADVISOR_MAX_TOKENS, key="advisor_tokens")
repeats = st.number_input("Repeats", 1, 5, 2, key="advisor_repeats",
                          help="Passes over the prompts: two or more show the spread, which tells a real "
                               "difference from this machine's noise")
if st.button("Measure and recommend", type="primary", disabled=not drafters):
    st.session_state.advice = run_advisor(settings, server.url, target, drafters,
                                             ADVISOR_PROMPTS[:prompt_count], int(max_tokens), int(repeats))
if advice := st.session_state.get("advice"):
    st.table(whole_table(advice_table(advice), "drafter"))
    st.caption(advice_meaning(advice))
    if advice.recommended == "none":
        st.info(f"Recommendation for {advice.target}: no speculation. {advice.reason}.")
    else:
        st.success(f"Recommendation for {advice.target}: draft with {advice.recommended}. {advice.reason}.")
